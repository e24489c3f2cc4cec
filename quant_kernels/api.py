"""Public API: ``QuantConfig``, ``quantize_(model, config, calib_inputs)``, ``save_quantized`` / ``load_quantized``.

``quantize_`` works on any ``nn.Module`` with ``nn.Linear`` layers in two steps: *calibrate* (run the calibration
inputs, record per-channel input statistics and which op produced each input) and *convert* (per method: choose
a shared input transform per producer group, fold it into the producer when exact, replace each target
``nn.Linear`` by a :class:`~quant_kernels.qlinear.QuantLinear`).
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from quant_kernels.calibrate import calibrate
from quant_kernels.fold import Folder, resolve_producer
from quant_kernels.methods import METHODS, InputTransform, LayerStats
from quant_kernels.qlinear import FLOAT_BITS, LayerMeta, QuantLinear
from quant_kernels.reference import SEQUENCE_TRANSFORMS

log = logging.getLogger(__name__)

__all__ = ["QuantConfig", "load_quantized", "quantize_", "quantized_layers", "save_quantized", "target_linears"]

FORMAT_VERSION = 1
WEIGHTS_FILE = "quantized.safetensors"
CONFIG_FILE = "quant_config.json"
WEIGHT_QUANTIZERS = ("rtn", "gptq")


def _check_bits(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or not 2 <= v <= FLOAT_BITS:
        raise ValueError(f"{name} must be an int in 2..{FLOAT_BITS} (16 = keep float), got {v!r}")


def _check_pos(name: str, v: Any, allow_none: bool = True) -> None:
    if v is None and allow_none:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"{name} must be a positive int{' or None' if allow_none else ''}, got {v!r}")


@dataclass
class QuantConfig:
    """What to quantize and how. Validated at construction; unknown method or bad values raise ValueError.

    Bits are 2..16, 16 meaning "keep float". Weights: symmetric per output channel, or per group of
    ``group_size`` input features. Activations: per token (asymmetric min-max by default), or per group.

    - ``method``: a name in ``quant_kernels.methods.METHODS`` (rtn, smoothquant, quarot, stamp, serq, l2qer).
    - ``include`` / ``exclude``: module-name globs or prefixes; ``fold``: fold input transforms into producers.
    - ``hadamard`` / ``hadamard_seed``: add a block random-Hadamard feature rotation (quarot always has it).
    - ``smoothquant_alpha``: migration strength. ``serq_rank`` / ``serq_alpha``: salient rank (None = scaled to
      the layer) and flattening strength (0.5 default: with RTN weights full flattening, the official code's 1.0,
      loses more on the weights than it gains on activations; measured on MiniLM, see docs/quantization.md).
      ``lowrank_rank``: l2qer rank (None = SERQ's parameter budget).
    - ``stamp_*``: sequence transform (dwt, dwt2d, dct, wht), Haar levels, high-precision tokens ``k`` and
      their bits, image grid ``(H, W)`` for dwt2d, padding; ``seq_len`` (optional) lets ``k`` be checked here.
    - ``weight_quantizer``: ``rtn`` (round to nearest) or ``gptq`` (Hessian-aware, needs calibration inputs;
      runs after the method's input transform, so it stacks with every method); ``gptq_damp``: relative damping.
    """

    method: str = "rtn"
    wbits: int = 4
    abits: int = 8
    group_size: int | None = None
    a_group_size: int | None = None
    w_symmetric: bool = True
    a_symmetric: bool = False
    clip_ratio: float = 1.0
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    fold: bool = True
    hadamard: bool = False
    hadamard_seed: int = 0
    smoothquant_alpha: float = 0.5
    stamp_transform: str = "dwt"
    stamp_levels: int = 3
    stamp_k: int = 64
    stamp_high_bits: int = 8
    stamp_grid: tuple[int, int] | None = None
    stamp_pad: str = "reflect"
    seq_len: int | None = None
    serq_rank: int | None = None
    serq_alpha: float = 0.5
    lowrank_rank: int | None = None
    weight_quantizer: str = "rtn"
    gptq_damp: float = 0.01

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS.names()}, got {self.method!r}")
        _check_bits("wbits", self.wbits)
        _check_bits("abits", self.abits)
        _check_bits("stamp_high_bits", self.stamp_high_bits)
        _check_pos("group_size", self.group_size)
        _check_pos("a_group_size", self.a_group_size)
        _check_pos("seq_len", self.seq_len)
        _check_pos("stamp_k", self.stamp_k, allow_none=False)
        for name in ("serq_rank", "lowrank_rank"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
                raise ValueError(f"{name} must be a positive int (rank) or None for the default, got {v!r}")
        if not 0.0 < self.clip_ratio <= 1.0:
            raise ValueError(f"clip_ratio must be in (0, 1], got {self.clip_ratio}")
        for name in ("smoothquant_alpha", "serq_alpha"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.weight_quantizer not in WEIGHT_QUANTIZERS:
            raise ValueError(f"weight_quantizer must be one of {WEIGHT_QUANTIZERS}, got {self.weight_quantizer!r}")
        if not 0.0 <= self.gptq_damp < 1.0:
            raise ValueError(f"gptq_damp must be in [0, 1), got {self.gptq_damp}")
        if self.stamp_transform not in SEQUENCE_TRANSFORMS:
            raise ValueError(f"stamp_transform must be one of {SEQUENCE_TRANSFORMS}, got {self.stamp_transform!r}")
        if isinstance(self.stamp_levels, bool) or not isinstance(self.stamp_levels, int) or self.stamp_levels < 0:
            raise ValueError(f"stamp_levels must be an int >= 0, got {self.stamp_levels!r}")
        if self.stamp_pad not in ("reflect", "zero"):
            raise ValueError(f"stamp_pad must be 'reflect' or 'zero', got {self.stamp_pad!r}")
        if self.stamp_grid is not None:
            self.stamp_grid = tuple(self.stamp_grid)  # type: ignore[assignment]
            if len(self.stamp_grid) != 2 or any(not isinstance(v, int) or v <= 0 for v in self.stamp_grid):
                raise ValueError(f"stamp_grid must be (H, W) positive ints, got {self.stamp_grid!r}")
        if self.stamp_transform == "dwt2d" and self.stamp_grid is None:
            raise ValueError("stamp_transform='dwt2d' needs stamp_grid=(H, W)")
        if self.method == "stamp":
            tokens = self.seq_len or (self.stamp_grid[0] * self.stamp_grid[1] if self.stamp_grid else None)
            if tokens is not None and self.stamp_k > tokens:
                raise ValueError(f"stamp_k={self.stamp_k} exceeds the number of tokens ({tokens})")
        self.include, self.exclude = tuple(self.include), tuple(self.exclude)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (``from_dict`` inverts it)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QuantConfig:
        """Build from a dict; unknown keys raise ValueError."""
        known = {f.name for f in fields(cls)}
        bad = sorted(set(d) - known)
        if bad:
            raise ValueError(f"unknown QuantConfig fields: {bad}")
        return cls(**d)


def _match(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) or name == p or name.startswith(p + ".") for p in patterns)


def target_linears(model: nn.Module, config: QuantConfig) -> dict[str, nn.Linear]:
    """The ``nn.Linear`` modules selected by ``include`` / ``exclude`` (glob patterns or name prefixes).

    An ``include`` pattern that names a module that is not ``nn.Linear`` (and contains none) raises ValueError.
    """
    modules = dict(model.named_modules())
    for pat in config.include:
        hits = [n for n in modules if _match(n, (pat,))]
        if hits and not any(isinstance(modules[n], nn.Linear) for n in hits):
            kinds = sorted({type(modules[n]).__name__ for n in hits})
            raise ValueError(f"include pattern {pat!r} matches no nn.Linear (it matches {kinds}); "
                             "quantize_ only converts nn.Linear layers")
    out = {}
    for n, m in modules.items():
        if not isinstance(m, nn.Linear) or isinstance(m, QuantLinear):
            continue
        if config.include and not _match(n, config.include):
            continue
        if config.exclude and _match(n, config.exclude):
            continue
        out[n] = m
    return out


def _set_module(model: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, new)


@torch.no_grad()
def quantize_(model: nn.Module, config: QuantConfig, calib_inputs: Iterable[Any] | None = None) -> nn.Module:
    """Quantize ``model`` in place (calibrate -> fold -> convert) and return it.

    ``calib_inputs`` is an iterable of model inputs (a tensor, a tuple of positional args or a dict of keyword
    args per batch). Methods that need no statistics (rtn, quarot) accept ``None``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"quantize_ expects an nn.Module, got {type(model).__name__}")
    if not isinstance(config, QuantConfig):
        raise TypeError(f"config must be a QuantConfig, got {type(config).__name__}")
    targets = target_linears(model, config)
    if not targets:
        raise ValueError("no nn.Linear layers to quantize (check include/exclude)")
    method = METHODS.get(config.method)
    batches = list(calib_inputs) if calib_inputs is not None else []
    if batches:
        cal = calibrate(model, targets, batches, hessian=config.weight_quantizer == "gptq")
    elif config.weight_quantizer == "gptq":
        raise ValueError("weight_quantizer='gptq' needs calib_inputs (the input Hessian of every layer)")
    elif method.wants_input_transform or config.method in ("l2qer",):
        raise ValueError(f"method {config.method!r} needs calib_inputs (activation statistics)")
    else:
        cal = None
    if cal is not None and config.method == "stamp":
        short = {n: s.min_tokens for n, s in cal.stats.items() if s.min_ndim >= 3 and s.min_tokens < config.stamp_k}
        if short:
            n, t = next(iter(short.items()))
            raise ValueError(f"stamp_k={config.stamp_k} exceeds the number of tokens ({t}) at layer {n!r}")

    def stats_of(name: str) -> LayerStats:
        if cal is not None:
            return cal.stats[name]
        n = targets[name].in_features
        return LayerStats(torch.ones(n), torch.ones(n), 0, 0)

    transforms: dict[str, InputTransform] = {n: InputTransform() for n in targets}
    if method.wants_input_transform:
        assert cal is not None
        modules = dict(model.named_modules())
        groups: dict[str, list[str]] = {}
        for n in targets:
            prod, via = resolve_producer(n, cal.producer_of, modules)
            key = f"{prod}|{via}" if prod is not None else f"self:{n}"
            groups.setdefault(key, []).append(n)
        folder = Folder(model, batches[0]) if config.fold else None
        try:
            for key, names in groups.items():
                st = LayerStats.merge([cal.stats[n] for n in names])
                tf = method.input_transform([targets[n].weight for n in names], st, config)
                if folder is not None and not key.startswith("self:"):
                    prod, via = key.rsplit("|", 1)
                    tf = folder.try_fold(prod, via == "True", names, tf)
                for n in names:
                    transforms[n] = tf
        finally:
            if folder is not None:
                folder.close()
    for name, lin in targets.items():
        q = method.convert(lin, stats_of(name), config, transforms[name])
        q.release_calibration()
        if cal is not None:
            cal.stats[name].hessian = None  # free [in, in] per layer as soon as it is used
        _set_module(model, name, q)
    n_folded = sum(t.scale_folded or t.perm_folded for t in transforms.values())
    log.info("quantized %d linear layers with %s W%dA%d (%d with folded input transforms)",
             len(targets), config.method, config.wbits, config.abits, n_folded)
    model._quant_config = config  # type: ignore[assignment]
    return model


def quantized_layers(model: nn.Module) -> dict[str, QuantLinear]:
    """All ``QuantLinear`` modules of ``model`` by name."""
    return {n: m for n, m in model.named_modules() if isinstance(m, QuantLinear)}


def save_quantized(model: nn.Module, path: str | Path) -> Path:
    """Write ``path/quantized.safetensors`` (the whole state) and ``path/quant_config.json`` (config + layers)."""
    from safetensors.torch import save_file

    layers = quantized_layers(model)
    if not layers:
        raise ValueError("model has no QuantLinear layers: run quantize_ first")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    cfg = getattr(model, "_quant_config", None)
    meta = {
        "format_version": FORMAT_VERSION,
        "config": cfg.to_dict() if cfg is not None else None,
        "layers": {n: m.meta.to_dict() for n, m in layers.items()},
    }
    state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    save_file(state, str(out / WEIGHTS_FILE))
    (out / CONFIG_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True))
    return out


def read_quant_config(path: str | Path) -> dict[str, Any]:
    """The JSON written by :func:`save_quantized` (clear ValueError if missing or corrupt)."""
    p = Path(path) / CONFIG_FILE
    if not p.is_file():
        raise FileNotFoundError(f"{p} not found: not a save_quantized directory")
    try:
        meta = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{p} is not valid JSON (corrupt quantized checkpoint): {exc}") from exc
    if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION or "layers" not in meta:
        raise ValueError(f"{p}: unsupported or corrupt quant config (format_version {FORMAT_VERSION} expected)")
    return meta


@torch.no_grad()
def load_quantized(path: str | Path, model: nn.Module) -> nn.Module:
    """Load a :func:`save_quantized` directory into ``model``, a float model of the same architecture.

    The listed linears are replaced by empty ``QuantLinear`` modules, then the full state (including any
    producers the folds changed) is loaded strictly. Corrupt or mismatched files raise ValueError.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    meta = read_quant_config(path)
    wfile = Path(path) / WEIGHTS_FILE
    if not wfile.is_file():
        raise FileNotFoundError(f"{wfile} not found")
    try:
        state = load_file(str(wfile))
    except (SafetensorError, OSError, RuntimeError) as exc:
        raise ValueError(f"{wfile} could not be read (corrupt quantized checkpoint): {exc}") from exc
    modules = dict(model.named_modules())
    for name, d in meta["layers"].items():
        lm = LayerMeta.from_dict(d)
        old = modules.get(name)
        if not isinstance(old, (nn.Linear, QuantLinear)) or (old.in_features, old.out_features) != (
                lm.in_features, lm.out_features):
            raise ValueError(f"layer {name!r} in {path} does not match a linear of shape "
                             f"{lm.out_features}x{lm.in_features} in the model")
        device = next(itertools.chain(old.parameters(), old.buffers()), torch.empty(0)).device
        _set_module(model, name, QuantLinear(lm).to(device))
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ValueError(f"{wfile} does not match the model: {str(exc)[:500]}") from exc
    if meta.get("config") is not None:
        model._quant_config = QuantConfig.from_dict(  # type: ignore[assignment]
            {**meta["config"], "include": tuple(meta["config"]["include"]),
             "exclude": tuple(meta["config"]["exclude"])})
    return model

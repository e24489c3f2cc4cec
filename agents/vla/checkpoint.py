"""Policy directories: ``vla_policy.json`` (format, grammar version, base, adapter, config incl. codec token map)
next to either the model itself (``model/``) or a LoRA adapter (``adapter/``) over a base checkpoint.

``load_policy`` accepts a policy directory, a plain VLM checkpoint (``allday vla init-tiny``), or a base checkpoint
plus ``adapter=DIR`` (a peft LoRA directory); an adapter that does not fit the base raises
:class:`~agents.vlm.AdapterMismatchError`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.core.io import read_json_object, write_text
from agents.vla.action_language import GRAMMAR_VERSION
from agents.vla.config import VLAPolicyConfig
from agents.vlm import load_vlm, write_adapter_meta

if TYPE_CHECKING:
    from agents.core.verifier import Verifier
    from agents.vla.policy import VLAPolicy

log = logging.getLogger(__name__)

POLICY_FILE = "vla_policy.json"
FORMAT = 1


def save_policy(policy: "VLAPolicy", path: str | Path) -> Path:
    """Save ``policy``: a peft model -> ``adapter/`` (+ base fingerprint) referencing the base by absolute path;
    a plain model -> ``model/`` (weights + processor). The codec's token map goes into the config."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    bundle = policy.bundle
    state = {k: v for k, v in policy.codec.to_dict().items() if k != "name"}
    cfg = VLAPolicyConfig.from_dict({**policy.config.to_dict(), "codec_state": state})
    if hasattr(bundle.model, "peft_config"):
        bundle.model.save_pretrained(out / "adapter")
        write_adapter_meta(out / "adapter", bundle)
        base, adapter = str(Path(bundle.path).resolve()), "adapter"
    else:
        bundle.model.save_pretrained(out / "model")
        bundle.processor.save_pretrained(out / "model")
        base, adapter = "model", None
    meta = {"format": FORMAT, "grammar": GRAMMAR_VERSION, "family": bundle.family, "base": base,
            "adapter": adapter, "config": cfg.to_dict()}
    write_text(out / POLICY_FILE, json.dumps(meta, indent=1))
    log.info("saved VLA policy to %s (base %s, adapter %s)", out, base, adapter)
    return out


def _resolve(root: Path, p: str | None) -> Path | None:
    if p is None:
        return None
    q = Path(p)
    return q if q.is_absolute() else root / q


def load_policy(path: str | Path, adapter: str | Path | None = None, dtype: Any = "float32", device: str = "cpu",
                verifier: "Verifier | None" = None, **overrides: Any) -> "VLAPolicy":
    """Load a VLA policy. ``path``: a policy directory (``vla_policy.json``), a VLM checkpoint directory, or a
    peft adapter directory whose ``base_model_name_or_path`` is a local checkpoint. ``overrides`` replace
    :class:`VLAPolicyConfig` fields (e.g. ``resize_images=True``); ``verifier`` is a Verifier object or a
    :data:`~agents.core.verifier.VERIFIERS` name."""
    from agents.vla.policy import VLAPolicy

    if isinstance(verifier, str):  # a VERIFIERS name: a config override
        overrides["verifier"], verifier = verifier, None
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"no VLA policy or VLM checkpoint at {root}")
    meta_file = root / POLICY_FILE
    if meta_file.is_file():
        meta = read_json_object(meta_file, required=("base", "config"))
        if meta.get("format") != FORMAT:
            raise ValueError(f"{meta_file}: unsupported policy format {meta.get('format')!r} (expected {FORMAT})")
        if meta.get("grammar") != GRAMMAR_VERSION:
            raise ValueError(f"{meta_file}: action grammar {meta.get('grammar')!r}, this code speaks {GRAMMAR_VERSION}")
        base = _resolve(root, meta["base"])
        adapter = adapter if adapter is not None else _resolve(root, meta.get("adapter"))
        if not isinstance(meta["config"], dict):
            raise ValueError(f"{meta_file}: config must be an object, got {type(meta['config']).__name__}")
        cfg = VLAPolicyConfig.from_dict({**meta["config"], **overrides})
    elif (root / "adapter_config.json").is_file() and not (root / "config.json").is_file():
        base_name = read_json_object(root / "adapter_config.json").get("base_model_name_or_path")
        if not base_name or not Path(base_name).is_dir():
            raise FileNotFoundError(f"adapter {root} names base {base_name!r}, which is not a local directory; "
                                    "load the base and pass adapter=")
        base, adapter = Path(base_name), root
        cfg = VLAPolicyConfig.from_dict(overrides)
    else:
        base = root
        cfg = VLAPolicyConfig.from_dict(overrides)
    bundle = load_vlm(base, dtype=dtype, device=device, adapter=adapter)
    return VLAPolicy(bundle, cfg, verifier=verifier)


def policy_from_params(params: dict[str, Any]) -> "VLAPolicy":
    """Build a policy from ROS ``vla_node`` parameters: ``checkpoint`` (required), ``max_delta`` (m, caps the
    per-step move), optional ``verifier``/``device``. ValueError when no checkpoint is given."""
    ckpt = str(params.get("checkpoint") or "").strip()
    if not ckpt:
        raise ValueError("the vlm2vla policy needs the 'checkpoint' parameter (a policy or VLM directory)")
    overrides: dict[str, Any] = {}
    if params.get("verifier"):
        overrides["verifier"] = str(params["verifier"])
    pol = load_policy(ckpt, device=str(params.get("device", "cpu")), **overrides)
    if "max_delta" in params:  # the node's safety clamp also caps the policy's step size
        cap = float(params["max_delta"])
        if not (cap == cap and cap > 0):
            raise ValueError(f"max_delta must be a positive number of metres, got {params['max_delta']!r}")
        pol.config.max_step_m = min(pol.config.max_step_m, max(0.001, cap))
    return pol

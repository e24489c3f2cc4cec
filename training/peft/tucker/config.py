"""``TuKAConfig``: ranks, experts and targets of a TuKA adapter (validated at construction)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from agents.core.config import check_numbers

#: Version of the ``tuka_config.json`` written by ``save_tuka``.
TUKA_FORMAT = 1


@dataclass
class TuKAConfig:
    """Settings of the 4th-order Tucker adapter.

    Per adapted ``nn.Linear`` (out x in): core ``G`` (r1 x r2 x r3 x r4), shared ``U1`` (out x r1) and
    ``U2`` (in x r2), scene experts ``U3`` (num_scenes x r3), environment experts ``U4`` (num_envs x r4);
    ``delta W(s, e) = alpha / r1 * U1 (G x3 U3[s] x4 U4[e]) U2^T``.

    Defaults are the released layer's (ranks 16, 16, 8, 8; alpha 32; 5 scenes x 4 environments; expert rows
    N(0, 0.002^2)). The paper reports ranks 8, 8, 64, 64. ``target_modules`` is what peft takes: a regex
    (``re.fullmatch`` on the module name) or a list of module-name suffixes.
    """

    r1: int = 16
    r2: int = 16
    r3: int = 8
    r4: int = 8
    alpha: float = 32.0
    target_modules: str | list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    num_scenes: int = 5
    num_envs: int = 4
    expert_init_std: float = 0.002
    # A row grown as a copy of another gets a random part orthogonal to it, of this fraction of its norm (0: an
    # exact copy, the paper's rule; see ``add_expert``).
    expert_init_jitter: float = 0.0
    dropout: float = 0.0
    modules_to_save: list[str] | None = None

    def __post_init__(self) -> None:
        for name in ("r1", "r2", "r3", "r4", "num_scenes", "num_envs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TuKAConfig.{name} must be a positive int, got {value!r}")
        if not isinstance(self.alpha, (int, float)) or not math.isfinite(self.alpha) or self.alpha <= 0:
            raise ValueError(f"TuKAConfig.alpha must be a positive finite number, got {self.alpha!r}")
        self.alpha = float(self.alpha)
        if not math.isfinite(self.expert_init_std) or self.expert_init_std < 0:
            raise ValueError(f"TuKAConfig.expert_init_std must be finite and >= 0, got {self.expert_init_std!r}")
        check_numbers(self, {"expert_init_jitter": (0.0, 10.0)}, "TuKAConfig.")
        self.expert_init_jitter = float(self.expert_init_jitter)
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"TuKAConfig.dropout must be in [0, 1), got {self.dropout!r}")
        if isinstance(self.target_modules, str):
            if not self.target_modules:
                raise ValueError("TuKAConfig.target_modules must not be empty")
        elif isinstance(self.target_modules, (list, tuple)):
            if not self.target_modules or not all(isinstance(t, str) and t for t in self.target_modules):
                raise ValueError(f"TuKAConfig.target_modules must be a regex or non-empty list of names, "
                                 f"got {self.target_modules!r}")
            self.target_modules = list(self.target_modules)
        else:
            raise TypeError(f"TuKAConfig.target_modules must be str or list[str], got {type(self.target_modules)}")
        if self.modules_to_save is not None:
            self.modules_to_save = list(self.modules_to_save)

    @property
    def scaling(self) -> float:
        """The paper's ``alpha / r1``."""
        return self.alpha / self.r1

    def layer_param_count(self, in_features: int, out_features: int) -> int:
        """Adapter parameters of one adapted (out x in) linear layer."""
        return (self.r1 * self.r2 * self.r3 * self.r4 + out_features * self.r1 + in_features * self.r2
                + self.num_scenes * self.r3 + self.num_envs * self.r4)

    def to_dict(self) -> dict[str, Any]:
        return {"format": TUKA_FORMAT, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TuKAConfig:
        """Inverse of ``to_dict``; unknown keys or a newer format are an error."""
        if not isinstance(data, dict):
            raise ValueError(f"TuKA config must be a JSON object, got {type(data).__name__}")
        data = dict(data)
        fmt = data.pop("format", TUKA_FORMAT)
        if fmt != TUKA_FORMAT:
            raise ValueError(f"TuKA config format {fmt!r} is not supported (expected {TUKA_FORMAT})")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown TuKA config keys: {unknown}")
        return cls(**data)

"""``VLAPolicyConfig``: the inference-loop settings of a VLM2VLA policy (validated; saved with the policy)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from agents.core.config import check_ints, config_from_dict
from agents.vla.action_language import ChunkLimits


@dataclass
class VLAPolicyConfig:
    """Settings of :class:`~agents.vla.policy.VLAPolicy`.

    - ``codec``: an :data:`~agents.vla.codecs.CODECS` name; ``codec_state``: its saved token map (empty: fresh);
    - ``image_size``: required square input size (None: the model's); ``resize_images``: resize other sizes instead
      of rejecting them;
    - sampling (paper): temperatures 0.5 subtasks / 0.1 motion / 0.5 actions, top-p 0.95; ``greedy_first``: the
      first try of each generation is greedy, resamples (on malformed text) use the temperatures;
    - ``max_tries``: generations per level before :class:`~agents.vla.policy.VLAGenerationError`;
    - execution: each chunk element is split into steps of at most ``max_step_m`` per axis; an element that
      changes the gripper lasts at least ``gripper_steps`` steps; ``workspace_lo/hi`` (metres, base frame) bound
      the end-effector target when the observation has ``ee_pos``;
    - ``constrained``: grammar-constrained decoding (:mod:`agents.vla.constrained`): every generation step only
      allows tokens that keep the text a valid prefix of the level's grammar, so the language codecs always
      produce parseable subtasks / motion plans / chunks. Default False (the paper's protocol: free generation,
      resampled when malformed); not available for the flat ``binned`` codec;
    - ``replan_steps``: 0 runs each chunk to its end (the paper's protocol); k > 0 plans the current subtask again
      from the current image after every k control steps of a chunk (receding horizon; at most ``max_replans`` times
      per subtask, then the chunk runs out; never inside a gripper change's ``gripper_steps`` hold; the verifier is
      asked only when a chunk ends). Policies trained with
      ``build_samples(..., replan=True)`` have seen the rest-of-step targets this asks for;
    - ``camera``: the camera the policy was trained on ("" unknown; ``allday train vla`` records the episodes'
      one camera), so a serving node can refuse images from another view;
    - ``verifier``: a :data:`~agents.core.verifier.VERIFIERS` name; ``max_subtask_retries``: retries of one
      subtask before advancing anyway.
    """

    codec: str = "language"
    codec_state: dict[str, Any] = field(default_factory=dict)
    image_size: int | None = None
    resize_images: bool = False
    allow_non_english: bool = False
    greedy_first: bool = True
    temperature_subtasks: float = 0.5
    temperature_motion: float = 0.1
    temperature_actions: float = 0.5
    top_p: float = 0.95
    max_tries: int = 4
    constrained: bool = False
    max_new_tokens_subtasks: int = 64
    max_new_tokens_motion: int = 24
    max_new_tokens_actions: int = 192
    max_elements: int = 16
    max_abs_cm: float = 10.0
    max_step_m: float = 0.02
    gripper_steps: int = 6
    workspace_lo: tuple[float, float, float] | None = None
    workspace_hi: tuple[float, float, float] | None = None
    camera: str = ""
    replan_steps: int = 0
    max_replans: int = 8
    verifier: str = "always_advance"
    max_subtask_retries: int = 2
    seed: int = 0

    def __post_init__(self) -> None:
        from agents.vla.codecs import CODECS

        if self.codec not in CODECS:
            raise ValueError(f"codec must be one of {CODECS.names()}, got {self.codec!r}")
        if self.image_size is not None and (not isinstance(self.image_size, int) or not 16 <= self.image_size <= 4096):
            raise ValueError(f"image_size must be None or an int in [16, 4096], got {self.image_size!r}")
        for name in ("temperature_subtasks", "temperature_motion", "temperature_actions"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and 0.0 < v <= 5.0):
                raise ValueError(f"{name} must be in (0, 5], got {v!r}")
        if not isinstance(self.camera, str):
            raise ValueError(f"camera must be a camera name string ('' unknown), got {self.camera!r}")
        if not isinstance(self.constrained, bool):
            raise ValueError(f"constrained must be a bool, got {self.constrained!r}")
        if self.constrained and self.codec == "binned":
            raise ValueError("constrained decoding needs a language codec ('language' or 'action_tokens'), "
                             "not 'binned'")
        if not (math.isfinite(self.top_p) and 0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        ints = {"max_tries": (1, 100), "max_new_tokens_subtasks": (4, 4096), "max_new_tokens_motion": (2, 1024),
                "max_new_tokens_actions": (4, 8192), "gripper_steps": (1, 100), "max_subtask_retries": (0, 100),
                "replan_steps": (0, 1000), "max_replans": (0, 1000),
                "seed": (0, 2**31 - 1)}
        check_ints(self, ints)
        if not (math.isfinite(self.max_step_m) and 0.001 <= self.max_step_m <= 0.1):
            raise ValueError(f"max_step_m must be in [0.001, 0.1] m, got {self.max_step_m!r}")
        self.limits  # validates max_elements / max_abs_cm  # noqa: B018
        if (self.workspace_lo is None) != (self.workspace_hi is None):
            raise ValueError("workspace_lo and workspace_hi must be given together")
        if self.workspace_lo is not None:
            lo, hi = tuple(float(v) for v in self.workspace_lo), tuple(float(v) for v in self.workspace_hi)
            if len(lo) != 3 or len(hi) != 3 or not all(a < b for a, b in zip(lo, hi)):
                raise ValueError(f"workspace_lo must be 3 values each below workspace_hi, got {lo} / {hi}")
            self.workspace_lo, self.workspace_hi = lo, hi

    @property
    def limits(self) -> ChunkLimits:
        return ChunkLimits(max_elements=self.max_elements, max_abs_cm=float(self.max_abs_cm))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "VLAPolicyConfig":
        return config_from_dict(cls, d)

"""``VLNTrainConfig``: the AlldayWalker base-navigator training run (YAML under ``configs/vln/``)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agents.core.config import check_ints, check_numbers, config_from_dict
from agents.vln.configuration_vln import VLNAgentConfig
from training.config_io import apply_overrides, read_yaml_mapping

#: a milder night than the methods-file defaults (brightness x exposure 0.0225 against read noise 3 leaves almost
#: no signal): 10x more light before the gain, half the read noise. Still clearly dark and noisy (see docs).
MILD_NIGHT: dict[str, Any] = {"brightness_factor": 0.35, "exposure": 0.6, "gain": 3.0, "read_noise_sigma": 1.5}

# Fields added after base navigators were cached: hashed only when they differ from these defaults.
_HASHED_WHEN_SET: dict[str, Any] = {"physical_conditions": True}

TINY_BACKBONE: dict[str, Any] = {"hidden_size": 128, "num_layers": 3, "num_heads": 4, "num_kv_heads": 2,
                                 "intermediate_size": 384, "vision_hidden_size": 96, "vision_layers": 2,
                                 "vision_heads": 4, "vision_intermediate_size": 192, "bpe_vocab_size": 600}


@dataclass
class VLNTrainConfig:
    """Imitation of the shortest-path follower + DAgger rounds, on generated houses.

    Backbone: ``vlm_path`` (a saved/real VLM directory) or a tiny random-weight ``family`` model of sizes
    ``tiny``. Episodes: ``n_scenes`` houses, ``episodes_per_scene`` training and ``eval_per_scene`` held-out
    episodes of ``min_distance``..``max_distance`` m geodesic, at most ``max_steps`` steps, success within
    ``success_distance`` m, demonstrated by ``teacher`` (``sim.nav.follower.FOLLOWERS``: the shortest-path
    follower, the ``sightline`` one, which steers by where the goal is in the frame, or the ``search`` one, whose
    every action follows from the frame: turn left while the goal is out of view). ``train_conditions`` are
    rendered for training, ``eval_conditions`` for the drop measurement; ``condition_params`` override each
    condition's parameters (default: a milder night). ``physical_conditions``: a condition also changes the scene's
    lighting in MuJoCo (night lights, fog, ...) on top of its camera model; False applies the camera model to the
    normally lit frame only, as the paper's noise models do in Habitat.
    """

    out_dir: str = "runs/vln/base"
    seed: int = 0
    family: str = "paligemma"
    vlm_path: str | None = None
    tiny: dict[str, Any] = field(default_factory=lambda: dict(TINY_BACKBONE))
    grounding: dict[str, Any] | None = None
    scene_grounding: dict[str, Any] | None = None
    image_size: int = 64
    agent: dict[str, Any] = field(default_factory=lambda: {"num_history": 3, "num_future_steps": 4})
    n_scenes: int = 3
    scene_seed: int = 0
    episodes_per_scene: int = 40
    eval_per_scene: int = 6
    min_distance: float = 2.0
    max_distance: float = 5.0
    max_steps: int = 60
    success_distance: float = 1.0
    same_room: bool = False
    goal_side: str = "random"
    teacher: str = "geodesic"
    train_conditions: list[str] = field(default_factory=lambda: ["normal"])
    eval_conditions: list[str] = field(default_factory=lambda: ["normal", "low_light", "overexposure", "scattering"])
    condition_params: dict[str, dict[str, Any]] = field(default_factory=lambda: {"low_light": dict(MILD_NIGHT)})
    physical_conditions: bool = True
    steps: int = 600
    batch_size: int = 16
    lr: float = 1e-3
    dagger_rounds: int = 2
    dagger_steps: int = 300
    dagger_beta: float = 0.5
    dagger_episodes_per_scene: int = 12
    checkpoint_every: int = 200
    cache_dir: str = "runs/cache/vln"
    num_threads: int = 0

    def __post_init__(self) -> None:
        ints = {"seed": (0, 2**31 - 1), "image_size": (16, 1024), "n_scenes": (1, 64), "scene_seed": (0, 10**6),
                "episodes_per_scene": (1, 100000), "eval_per_scene": (1, 100000), "max_steps": (1, 5000),
                "steps": (0, 10**7), "batch_size": (1, 4096), "dagger_rounds": (0, 100), "dagger_steps": (0, 10**7),
                "dagger_episodes_per_scene": (1, 100000), "checkpoint_every": (1, 10**7),
                "num_threads": (0, 1024)}
        check_ints(self, ints, "VLNTrainConfig.")
        check_numbers(self, {"min_distance": (0.1, 100.0), "max_distance": (0.2, 200.0),
                             "success_distance": (0.05, 50.0), "lr": (1e-9, 10.0), "dagger_beta": (0.0, 1.0)},
                      "VLNTrainConfig.")
        if self.min_distance >= self.max_distance:
            raise ValueError(f"VLNTrainConfig.min_distance ({self.min_distance}) must be < max_distance "
                             f"({self.max_distance})")
        from sim.nav.conditions import available_conditions, make_condition
        from sim.nav.episode_gen import GOAL_SIDES

        if self.goal_side not in GOAL_SIDES:
            raise ValueError(f"VLNTrainConfig.goal_side must be one of {GOAL_SIDES}, got {self.goal_side!r}")
        from sim.nav.follower import FOLLOWERS

        if self.teacher not in FOLLOWERS:
            raise ValueError(f"VLNTrainConfig.teacher must be one of {sorted(FOLLOWERS)}, got {self.teacher!r}")

        known = available_conditions()
        for name in ("train_conditions", "eval_conditions"):
            conds = getattr(self, name)
            if not isinstance(conds, list) or not conds or any(c not in known for c in conds):
                raise ValueError(f"VLNTrainConfig.{name} must be a non-empty list of {known}, got {conds!r}")
        if not isinstance(self.physical_conditions, bool):
            raise ValueError(f"VLNTrainConfig.physical_conditions must be a bool, got {self.physical_conditions!r}")
        if not isinstance(self.condition_params, dict):
            raise ValueError("VLNTrainConfig.condition_params must be a mapping condition -> parameters")
        for cond, params in self.condition_params.items():
            if cond not in known:
                raise ValueError(f"VLNTrainConfig.condition_params: unknown condition {cond!r}; known: {known}")
            make_condition(cond, **params)  # validates the parameters (TypeError/ValueError naming the field)
        self.agent_config()  # validates the agent settings
        if self.grounding is not None:
            if not isinstance(self.grounding, dict):
                raise ValueError("VLNTrainConfig.grounding must be a mapping of GroundingConfig fields or null")
            big = [st[0] for st in self.grounding_config().stages if st[0] > self.image_size // 2]
            if big:
                raise ValueError(f"VLNTrainConfig.grounding: stage sizes {big} px do not fit {self.image_size} px "
                                 f"images (at most {self.image_size // 2})")
        if self.scene_grounding is not None:
            if not isinstance(self.scene_grounding, dict):
                raise ValueError("VLNTrainConfig.scene_grounding must be a mapping of SceneGroundingConfig fields or "
                                 "null")
            self.scene_grounding_config()
        if self.vlm_path is None:
            from agents.vlm.config import TinyVLMConfig

            TinyVLMConfig(family=self.family, image_size=self.image_size, **self.tiny)

    def grounding_config(self) -> Any:
        """The grounding pre-training of a tiny backbone (``training.vlm.GroundingConfig``), or None."""
        if self.grounding is None:
            return None
        from training.vlm.grounding import GroundingConfig

        return GroundingConfig.from_dict(dict(self.grounding))

    def scene_grounding_config(self) -> Any:
        """Scene-question pre-training on the simulator's frames (``training.vln.SceneGroundingConfig``), or None."""
        if self.scene_grounding is None:
            return None
        from training.vln.scene_grounding import SceneGroundingConfig

        return SceneGroundingConfig.from_dict(dict(self.scene_grounding))

    def agent_config(self) -> VLNAgentConfig:
        return VLNAgentConfig.from_dict(dict(self.agent))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def fingerprint(self) -> str:
        """Hash of everything that changes the trained navigator (not out_dir/cache_dir/checkpoint_every)."""
        skip = ("out_dir", "cache_dir", "checkpoint_every", "num_threads")
        d = {k: v for k, v in self.to_dict().items() if k not in skip}
        for k, default in _HASHED_WHEN_SET.items():  # fields added later: a default value keeps old cache keys
            if d.get(k) == default:
                del d[k]
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "VLNTrainConfig":
        return config_from_dict(cls, d)

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list[str] | None = None) -> "VLNTrainConfig":
        """Load a YAML file and apply ``key=value`` overrides (values parsed as YAML, dotted keys for dicts)."""
        return cls.from_dict(apply_overrides(read_yaml_mapping(path, "VLN config"), overrides or []))

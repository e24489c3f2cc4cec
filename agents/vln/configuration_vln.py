"""``VLNAgentConfig``: how the AlldayWalker navigator builds its prompt and reads the model's answer."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agents.core.config import check_ints, config_from_dict
from agents.core.types import NavAction

CONFIG_NAME = "vln_config.json"
FALLBACKS = ("stop", "forward", "left", "right", "error")
ROUTING_SOURCES = ("projector", "vision_tower")


@dataclass
class VLNAgentConfig:
    """Prompt/answer settings of the VLM navigator (validated at construction).

    - ``num_history``: past frames shown with the current one (tiled into one image, current frame first);
    - ``num_future_steps``: actions the model writes per call (StreamVLN: 4); ``execute_steps`` of them are
      executed before the model is called again (``0``: all it wrote);
    - ``action_history``: previous actions written into the prompt as words (0: none, the default: with them a
      small imitation-trained model copies its own past actions and turns in place forever);
    - ``goal_prefix``: the model first says where the goal object is in the current frame (``left`` / ``ahead`` /
      ``right`` / ``none``, then a colon), then the actions, so the actions follow its own grounding answer
      (trained from the simulator's segmentation; an answer without the prefix counts as malformed);
    - ``max_instruction_words``: longer instructions keep their first and last words (the goal is at the end);
    - ``fallback``: the action when an answer has no valid action word (``"error"``: raise instead);
    - ``route_every``: re-route the experts every N calls (0: once per episode, on its first frame);
    - ``routing_fallback``: when routing fails (no prototypes, bad features), act with the shared knowledge only
      (no expert update) instead of raising; the policy reports it in ``diagnostics()``;
    - ``routing_features``: where the routing features come from: ``"projector"`` (its output) or
      ``"vision_tower"`` (the projector's input: needed when an adapter changes the projector itself).
    """

    num_history: int = 3
    num_future_steps: int = 4
    execute_steps: int = 0
    action_history: int = 0
    goal_prefix: bool = False
    max_instruction_words: int = 48
    fallback: str = "stop"
    route_every: int = 0
    routing_fallback: bool = False
    routing_features: str = "projector"

    def __post_init__(self) -> None:
        limits = {"num_history": (0, 15), "num_future_steps": (1, 32), "execute_steps": (0, 32),
                  "action_history": (0, 64), "max_instruction_words": (1, 4096), "route_every": (0, 100000)}
        check_ints(self, limits, "VLNAgentConfig.")
        if self.execute_steps > self.num_future_steps:
            raise ValueError(f"VLNAgentConfig.execute_steps ({self.execute_steps}) must be <= num_future_steps "
                             f"({self.num_future_steps})")
        if self.fallback not in FALLBACKS:
            raise ValueError(f"VLNAgentConfig.fallback must be one of {list(FALLBACKS)}, got {self.fallback!r}")
        if not isinstance(self.goal_prefix, bool):
            raise TypeError(f"VLNAgentConfig.goal_prefix must be a bool, got {self.goal_prefix!r}")
        if self.routing_features not in ROUTING_SOURCES:
            raise ValueError(f"VLNAgentConfig.routing_features must be one of {list(ROUTING_SOURCES)}, got "
                             f"{self.routing_features!r}")
        if not isinstance(self.routing_fallback, bool):
            raise TypeError(f"VLNAgentConfig.routing_fallback must be a bool, got {self.routing_fallback!r}")

    @property
    def fallback_action(self) -> NavAction | None:
        """The NavAction of ``fallback`` (None for ``"error"``)."""
        if self.fallback == "error":
            return None
        return {"stop": NavAction.STOP, "forward": NavAction.MOVE_FORWARD, "left": NavAction.TURN_LEFT,
                "right": NavAction.TURN_RIGHT}[self.fallback]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "VLNAgentConfig":
        return config_from_dict(cls, d)

    def save(self, directory: str | Path) -> None:
        Path(directory, CONFIG_NAME).write_text(json.dumps(self.to_dict(), indent=2))

    @classmethod
    def load(cls, directory: str | Path) -> "VLNAgentConfig":
        path = Path(directory, CONFIG_NAME)
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: not an AlldayWalker checkpoint directory")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"corrupt {path}: {exc}") from exc
        return cls.from_dict(data)

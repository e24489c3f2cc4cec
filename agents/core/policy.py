"""The Policy ABC every agent implements (navigation and manipulation alike)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from agents.core.types import Observation


class Policy(ABC):
    """A policy maps observations to actions. Stateful policies reset between episodes."""

    name: str = "policy"

    def reset(self) -> None:  # noqa: B027 - optional hook
        """Clear per-episode state."""

    @abstractmethod
    def act(self, observation: Observation) -> Any:
        """Return the next action for ``observation``."""

    def save_pretrained(self, path: str | Path) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no weights to save")

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs: Any) -> "Policy":
        raise NotImplementedError(f"{cls.__name__} cannot be loaded from a checkpoint")

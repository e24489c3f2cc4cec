"""Reference navigation baselines of VLN-CE: a random agent and a forward-then-stop agent."""

from __future__ import annotations

import numpy as np

from agents.core.policy import Policy
from agents.core.types import NavAction, Observation

#: VLN-CE's random baseline samples the train-set action distribution (mostly forward, rare STOP).
RANDOM_ACTION_PROBS = (0.02, 0.68, 0.15, 0.15)


class RandomPolicy(Policy):
    """Samples actions from ``probs`` (STOP, FORWARD, LEFT, RIGHT); seeded per instance."""

    name = "random"

    def __init__(self, seed: int = 0, probs: tuple[float, float, float, float] = RANDOM_ACTION_PROBS) -> None:
        p = np.asarray(probs, dtype=float)
        if p.shape != (4,) or (p < 0).any() or not np.isclose(p.sum(), 1.0):
            raise ValueError(f"probs must be 4 non-negative numbers summing to 1, got {probs}")
        self.probs = p
        self._seed = seed
        self._rng = np.random.default_rng(seed)

    def act(self, observation: Observation) -> NavAction:
        return NavAction(int(self._rng.choice(4, p=self.probs)))


class ForwardPolicy(Policy):
    """VLN-CE's hand-crafted baseline: move forward ``steps`` times, then STOP."""

    name = "forward"

    def __init__(self, steps: int = 37) -> None:
        if steps < 0:
            raise ValueError(f"steps must be >= 0, got {steps}")
        self.steps = steps
        self._t = 0

    def reset(self) -> None:
        self._t = 0

    def act(self, observation: Observation) -> NavAction:
        self._t += 1
        return NavAction.MOVE_FORWARD if self._t <= self.steps else NavAction.STOP

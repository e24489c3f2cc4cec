"""training.vla.evaluate.rollout: closed-loop episodes, which of them succeed, and give-ups."""

from __future__ import annotations

import pytest

from agents.vla.policy import VLAAction, VLAGenerationError, VLAStats


class ExpertPolicy:
    """The scripted Lift expert behind the policy interface ``rollout`` drives (reset, reset_stats, act, stats);
    with ``give_up_on`` it raises :class:`VLAGenerationError` at the first step of those seeds' episodes."""

    def __init__(self, task, give_up_on=()) -> None:
        from sim.manip import make_expert

        self.expert, self.task, self.give_up_on = make_expert("lift"), task, set(give_up_on)
        self.stats = VLAStats()

    def reset_stats(self) -> None:
        self.stats = VLAStats()

    def reset(self) -> None:
        self.expert.reset()

    def act(self, obs) -> VLAAction:
        self.stats.generations += 1
        if obs["step"] == 0 and self.task.last_seed in self.give_up_on:
            self.stats.malformed += 1
            raise VLAGenerationError("no well-formed chunk")
        a = self.expert.act(obs)
        return VLAAction(tuple(a.delta), a.gripper, a.phase)


def test_rollout_reports_which_seeds_succeed_and_counts_give_ups():
    pytest.importorskip("robosuite")
    from sim.manip import ManipTask
    from training.vla.evaluate import rollout

    class SeedTask(ManipTask):  # remembers the reset seed, so the policy can fail on chosen episodes
        def reset(self, seed=None):
            self.last_seed = seed
            return super().reset(seed)

    task = SeedTask(task="lift", image_size=32)
    try:
        res = rollout(ExpertPolicy(task, give_up_on={11}), task, [10, 11, 12], max_steps=60)
        short = rollout(ExpertPolicy(task), task, [10], max_steps=3)  # too few steps to lift
    finally:
        task.close()
    assert res["succeeded"] == [10, 12] and res["success"] == pytest.approx(2 / 3)
    assert res["gave_up"] == 1 and res["episodes"] == 3 and res["malformed_rate"] > 0
    assert short["succeeded"] == [] and short["success"] == 0.0 and short["steps"] == 3

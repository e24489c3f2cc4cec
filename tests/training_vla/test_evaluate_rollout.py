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


def test_skill_retained_counts_only_the_skill_above_the_blind_baseline():
    import math

    from training.vla.evaluate import skill_retained

    assert skill_retained(0.6, 0.6, 0.4) == pytest.approx(1.0)  # all kept
    assert skill_retained(0.5, 0.6, 0.4) == pytest.approx(0.5)  # plain retention would say 83 %
    assert skill_retained(0.4, 0.6, 0.4) == pytest.approx(0.0)  # a constant answer per kind keeps nothing
    assert skill_retained(0.2, 0.6, 0.4) == pytest.approx(-1.0)  # worse than constants: the answer format lost
    assert math.isnan(skill_retained(0.5, 0.4, 0.4))  # nothing above the baseline to keep
    with pytest.raises(ValueError, match="accuracy in"):
        skill_retained(60.0, 0.6, 0.4)  # a percentage, not an accuracy
    with pytest.raises(ValueError, match="majority"):
        skill_retained(0.5, 0.6, float("nan"))


def test_benchmark_report_shows_the_skill_kept(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from vlm2vla_report import write_report

    ro = {"success": 0.3, "episodes": 50, "malformed_rate": 0.02, "gave_up": 1, "sec_per_action": 0.05,
          "sec_per_generation": 0.1}
    kinds = {"table": 0.9, "count": 0.6}
    res = {"vqa_pretrained": {"accuracy": 0.6, "by_kind": kinds}, "vqa_test_questions": 600,
           "vqa_majority_baseline": 0.4, "demos": 30, "seconds": 60.0,
           "settings": {"ft_steps": 10, "batch": 4, "ft_lr": 1e-3, "ft_schedule": "cosine", "ft_warmup": 0,
                        "episodes": 50, "max_steps": 40},
           "methods": {"VLM2VLA": {"first_loss": 3.0, "last_loss": 1.0, "retention": 0.5 / 0.6, "skill_retained": 0.5,
                                   "vqa": {"accuracy": 0.5, "by_kind": kinds}, **ro}}}
    write_report(res, tmp_path)
    md = (tmp_path / "vlm2vla.md").read_text()
    assert "| VLM2VLA | free | 3.00 -> 1.00 | 0.500 | 83% | 50% | 0.30 | 50 |" in md
    res["methods"]["VLM2VLA"]["skill_retained"] = float("nan")  # the pre-trained model not above the baseline
    write_report(res, tmp_path)
    assert "| VLM2VLA | free | 3.00 -> 1.00 | 0.500 | 83% | - | 0.30 |" in (tmp_path / "vlm2vla.md").read_text()
    assert (tmp_path / "vlm2vla.png").stat().st_size > 1000

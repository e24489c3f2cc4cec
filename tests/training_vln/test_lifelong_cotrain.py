"""Scene questions during lifelong adaptation (``LifelongConfig.cotrain``): asked about each task's own training
frames under its condition, answered from segmentation, and handed to every method's imitation loop."""

import numpy as np
import pytest

pytest.importorskip("torch")
import training.vln  # noqa: E402,F401 - preloads triton's LLVM before any EGL context
from training.vln.lifelong import LifelongConfig, prepare_data  # noqa: E402


def test_questions_are_about_the_tasks_own_frames_under_its_condition(tmp_path, lifelong_base) -> None:
    from training.vln.scene_grounding import ANSWERS

    cfg = LifelongConfig(base=lifelong_base(tmp_path), n_scenes=1, conditions=["normal", "low_light"], n_unseen=0,
                         train_per_task=2, eval_per_task=1, cotrain=0.3)
    tasks, _ = cfg.tasks()
    data = prepare_data(cfg, tasks)
    mean = {}
    for t in tasks:
        d = data[t.index]
        qs = d.questions
        assert len(qs) >= len(d.samples) // 2  # about every visited state names something
        assert all(q.prompt.startswith("where is the ") and q.target in ANSWERS for q in qs)
        assert all(q.image.shape == d.samples[0].image.shape for q in qs)
        # every question's image is one of the task's own (condition-rendered) training frames
        own = {s.frame.tobytes() for s in d.samples}
        assert all(q.image.tobytes() in own for q in qs)
        mean[t.condition] = float(np.mean([q.image.mean() for q in qs]))
    assert mean["low_light"] < 0.8 * mean["normal"]
    off = LifelongConfig(base=cfg.base, n_scenes=1, conditions=["normal", "low_light"], n_unseen=0,
                         train_per_task=1, eval_per_task=1)
    assert all(not d.questions for d in prepare_data(off, off.tasks()[0]).values())


@pytest.mark.parametrize("bad", [-0.1, 0.95, True, "0.3", float("nan")])
def test_cotrain_fraction_is_checked(bad, tmp_path, lifelong_base) -> None:
    with pytest.raises(ValueError, match="cotrain"):
        LifelongConfig(base=lifelong_base(tmp_path), n_scenes=1, n_unseen=0, cotrain=bad)


def test_every_method_trains_on_the_questions(tmp_path, monkeypatch, lifelong_base) -> None:
    from training.vln import lifelong
    from training.vln.navigator import build_backbone

    base = lifelong_base(tmp_path)
    build_backbone(base, tmp_path / "base" / "vlm", ["go to the sofa", "where is the object?"])
    cfg = LifelongConfig(base=base, n_scenes=1, conditions=["normal", "low_light"], n_unseen=0, train_per_task=1,
                         eval_per_task=1, steps_per_task=1, batch_size=4, fisher_batches=1, lora_rank=2,
                         cotrain=0.5)
    tasks, _ = cfg.tasks()
    data = prepare_data(cfg, tasks)
    seen = []

    def run(self, samples, steps, **kw):
        seen.append((len(samples), kw.get("cotrain"), kw.get("cotrain_fraction")))
        return []

    monkeypatch.setattr(lifelong.Imitation, "run", run)
    lifelong.run_method("seq_lora", cfg, tmp_path / "base", tasks, [], data)
    assert seen == [(len(data[t.index].samples), data[t.index].questions, 0.5) for t in tasks]
    assert data[tasks[0].index].questions != data[tasks[1].index].questions

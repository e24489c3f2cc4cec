"""The lifelong protocol's bookkeeping: the task sequence and its unseen pairs, LifelongConfig's validation, and the
forgetting measure (F-SR)."""

import math

import numpy as np
import pytest

pytest.importorskip("torch")
from tests.training_vln.test_vln_training import BASE  # noqa: E402
from training.vln.config import VLNTrainConfig  # noqa: E402
from training.vln.lifelong import LifelongConfig, forgetting  # noqa: E402


def test_task_sequence_and_unseen_pairs():
    base = VLNTrainConfig(**{**BASE, "n_scenes": 3})
    lc = LifelongConfig(base=base, n_scenes=3, n_unseen=2)
    tasks, unseen = lc.tasks()
    assert len(tasks) == 10 and len(unseen) == 2
    pairs = {(t.scene, t.condition) for t in tasks}
    assert not pairs & {(u.scene, u.condition) for u in unseen}
    assert {t.scene for t in tasks} == {0, 1, 2} and {t.condition for t in tasks} == set(lc.conditions)
    assert [t.name for t in lc.tasks()[0]] == [t.name for t in tasks]  # fixed order for a seed
    assert [t.name for t in LifelongConfig(base=base, n_scenes=3, order_seed=1).tasks()[0]] != [t.name for t in tasks]
    with pytest.raises(ValueError, match="n_scenes must be"):
        LifelongConfig(base=base, n_scenes=4)
    with pytest.raises(ValueError, match="conditions must be distinct"):
        LifelongConfig(base=base, conditions=["normal", "night"])
    with pytest.raises(ValueError, match="n_unseen"):
        LifelongConfig(base=base, n_scenes=1, conditions=["normal", "low_light"], n_unseen=1)
    with pytest.raises(ValueError, match="unknown lifelong VLN method 'magic'; known: .*tuka_dkil"):
        LifelongConfig(base=base, methods=["magic"])
    for bad in (-1, 2**32, 1.5):  # an int in numpy's seed range, nothing else
        with pytest.raises(ValueError, match="order_seed"):
            LifelongConfig(base=base, order_seed=bad)


def test_forgetting_definition():
    m = np.array([[0.8, np.nan, np.nan], [0.4, 0.5, np.nan], [0.2, 0.0, 0.9]])
    f = forgetting(m)
    assert f["per_task"] == pytest.approx([0.75, 1.0])
    assert f["relative"] == pytest.approx(0.875) and f["absolute"] == pytest.approx((0.6 + 0.5) / 2)
    z = forgetting(np.array([[0.0, np.nan], [0.0, 1.0]]))
    assert z["relative"] is None and math.isnan(z["per_task"][0])  # X[t, t] = 0 is excluded

"""FedPTE's cross-domain data: generated digit styles and simulator views under the all-day conditions."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch._dynamo  # noqa: F401  (imports triton now: importing it after MuJoCo's EGL rendering segfaulted)

from training.federated.fedpte.data import DATASETS, Domain, load_domains
from training.federated.fedpte.data.digits import DIGIT_DOMAINS, make_digit_set


def test_digit_domains_are_reproducible_balanced_and_distinct():
    doms = load_domains("digits", n_train=50, n_test=20, seed=1)
    assert [d.name for d in doms] == list(DIGIT_DOMAINS)
    for d in doms:
        assert d.x_train.shape == (50, 32, 32, 3) and d.x_train.dtype == np.uint8 and d.x_test.shape[0] == 20
        assert np.bincount(d.y_train, minlength=10).tolist() == [5] * 10
    x1, y1 = make_digit_set("svhn", 30, 4)
    x2, y2 = make_digit_set("svhn", 30, 4)
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(y1, y2)
    assert not np.array_equal(doms[0].x_train, load_domains("digits", n_train=50, n_test=20, seed=2)[0].x_train)
    # the styles differ in their pixel statistics (that is the domain shift)
    means = {d.name: float(d.x_train.mean()) for d in doms}
    assert means["mnist"] < 60 < means["svhn"] and means["mnist"] < means["mnistm"]
    with pytest.raises(ValueError, match="unknown digit style"):
        make_digit_set("kmnist", 3)


def test_domain_validation_and_registry():
    with pytest.raises(ValueError, match="x_train must be uint8"):
        Domain("d", np.zeros((2, 8, 8, 3), np.float32), np.zeros(2, np.int64), np.zeros((1, 8, 8, 3), np.uint8),
               np.zeros(1, np.int64), ("a",))
    with pytest.raises(ValueError, match="outside"):
        Domain("d", np.zeros((2, 8, 8, 3), np.uint8), np.array([0, 3]), np.zeros((1, 8, 8, 3), np.uint8),
               np.zeros(1, np.int64), ("a", "b"))
    assert DATASETS.names() == ["digits", "sim_views"]
    with pytest.raises(KeyError, match="unknown fedpte dataset"):
        load_domains("mnist")


def test_sim_views_render_one_domain_per_condition_and_cache(tmp_path):
    from training.federated.fedpte.data.sim_views import CLASSES, CONDITIONS, make_sim_view_domains

    doms = make_sim_view_domains(n_houses=4, views_per_class=3, cache_dir=tmp_path)
    assert [d.name for d in doms] == list(CONDITIONS) and doms[0].classes == CLASSES
    for d in doms:
        assert d.x_train.shape[1:] == (32, 32, 3) and len(d.x_test) == len(doms[0].x_test) > 0
        np.testing.assert_array_equal(d.y_test, doms[0].y_test)  # the same test viewpoints in every condition
    # same viewpoints, different conditions: the images differ (low light is darker than normal)
    assert doms[1].x_test.mean() < doms[0].x_test.mean() - 20
    assert not np.array_equal(doms[2].x_test, doms[0].x_test)
    assert len(list(tmp_path.glob("sim_views_*.npz"))) == 1
    from training.federated.fedpte.data.sim_views import sim_views_cache_path

    assert sim_views_cache_path(tmp_path, n_houses=4, views_per_class=3).is_file()  # where it was written
    assert not sim_views_cache_path(tmp_path).is_file()  # the full default set is another file
    t = time.perf_counter()
    again = make_sim_view_domains(n_houses=4, views_per_class=3, cache_dir=tmp_path)
    assert time.perf_counter() - t < 2.0  # served from the cache, no rendering
    np.testing.assert_array_equal(again[3].x_train, doms[3].x_train)
    (cache,) = tmp_path.glob("sim_views_*.npz")
    cache.write_bytes(cache.read_bytes()[:500])  # truncated: rendered again, not a BadZipFile
    rebuilt = make_sim_view_domains(n_houses=4, views_per_class=3, cache_dir=tmp_path)
    np.testing.assert_array_equal(rebuilt[3].x_train, doms[3].x_train)
    with pytest.raises(ValueError, match="n_houses"):
        make_sim_view_domains(n_houses=1, cache_dir=None)

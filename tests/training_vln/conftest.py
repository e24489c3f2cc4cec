"""Shared fixtures of the lifelong VLN tests."""

import pytest

TINY = dict(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=128, vision_hidden_size=32,
            vision_layers=1, vision_heads=2, vision_intermediate_size=64, bpe_vocab_size=400)


@pytest.fixture(scope="session")
def lifelong_base():
    """``make(cache_dir) -> VLNTrainConfig``: a tiny navigator on one small scene, camera-only conditions."""
    pytest.importorskip("torch")
    import training.vln  # noqa: F401 - preloads triton's LLVM before any EGL context
    from training.vln.config import VLNTrainConfig

    def make(cache_dir) -> VLNTrainConfig:
        return VLNTrainConfig(image_size=32, tiny=TINY, n_scenes=1, episodes_per_scene=1, eval_per_scene=1,
                              min_distance=1.5, max_distance=3.0, same_room=True, max_steps=12,
                              cache_dir=str(cache_dir), physical_conditions=False,
                              agent={"num_history": 0, "num_future_steps": 3})

    return make


@pytest.fixture(scope="session")
def lifelong_setup(lifelong_base):
    """``make(tmp, make_cfg) -> (cfg, tasks, data, base_dir)``: a tiny backbone saved under ``tmp/base`` and the
    task data of ``make_cfg(base)``, a LifelongConfig on :func:`lifelong_base`'s settings."""

    def make(tmp, make_cfg):
        from training.vln.lifelong import prepare_data
        from training.vln.navigator import build_backbone

        base = lifelong_base(tmp)
        build_backbone(base, tmp / "base" / "vlm", ["go to the sofa", "where is the object?"])
        cfg = make_cfg(base)
        tasks, _ = cfg.tasks()
        return cfg, tasks, prepare_data(cfg, tasks), tmp / "base"

    return make

"""AlldayWalker training: imitation lowers the loss, DAgger relabels the learner's states with the oracle,
checkpoints resume, and clear errors on bad configs (the lifelong protocol's bookkeeping: test_lifelong_config.py)."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import training.vln  # noqa: E402,F401 - preloads triton's LLVM before any EGL context (see its docstring)
from agents.core.types import NavAction  # noqa: E402
from agents.vln.actions import format_actions  # noqa: E402
from agents.vln.configuration_vln import VLNAgentConfig  # noqa: E402
from tests.training_vln.conftest import TINY  # noqa: E402
from training.vln.config import VLNTrainConfig  # noqa: E402

BASE = dict(image_size=32, tiny=TINY, n_scenes=1, episodes_per_scene=1, eval_per_scene=1, min_distance=1.5,
            max_distance=4.0, max_steps=12, steps=4, batch_size=4, dagger_rounds=1, dagger_steps=2,
            dagger_episodes_per_scene=1, checkpoint_every=2, eval_conditions=["normal"], num_threads=1,
            agent={"num_history": 1, "num_future_steps": 3, "action_history": 2})


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    return VLNTrainConfig(**BASE, cache_dir=str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def world(cfg):
    from training.vln.navigator import make_episodes

    return make_episodes(cfg, "train")


@pytest.fixture(scope="module")
def bundle(cfg, world, tmp_path_factory):
    from agents.vlm.bundle import load_vlm
    from training.vln.navigator import build_backbone

    return load_vlm(build_backbone(cfg, tmp_path_factory.mktemp("vlm"), [e.instruction_text for e in world[0]]))


def test_imitation_lowers_loss(cfg, world, bundle):
    from agents.vln.processor_vln import VLNProcessor
    from training.vln.data import collect
    from training.vln.navigator import make_env
    from training.vln.trainer import Imitation, eval_loss

    env = make_env(cfg, "normal", *world)
    try:
        samples = collect(env, [0], cfg.agent_config(), cfg.image_size)
    finally:
        env.close()
    assert samples and samples[-1].target == "stop"  # the oracle ends the episode on STOP
    model = bundle.model
    for p in model.parameters():
        p.requires_grad_(True)
    vproc = VLNProcessor(bundle.processor, bundle.family, bundle.image_size, cfg.agent_config())
    before = eval_loss(model, vproc, samples)
    losses = Imitation(model, vproc, lr=3e-3, batch_size=4).run(samples, 12)
    after = eval_loss(model, vproc, samples)
    assert len(losses) == 12 and all(math.isfinite(v) for v in losses)
    assert after < 0.8 * before, (before, after)


def test_sightline_teacher_demonstrations(cfg):
    """collect(teacher='sightline'): demonstrations steered by the frame thirds reach the goal (the last target is
    stop, within the success distance) and the labels differ from the shortest-path follower's somewhere."""
    import dataclasses

    from training.vln.data import collect, teacher_actions
    from training.vln.navigator import make_env, make_episodes

    eps = make_episodes(cfg, "eval", 6)
    env = make_env(dataclasses.replace(cfg, max_steps=80), "normal", *eps)
    try:
        differ = 0
        for i in range(len(eps[0])):
            def check(e):
                nonlocal differ
                differ += teacher_actions(e, 1, "sightline") != teacher_actions(e, 1, "geodesic")

            samples = collect(env, [i], cfg.agent_config(), cfg.image_size, teacher="sightline", on_state=check)
            assert samples[-1].target == "stop"
            assert env.geodesic_to_goal(env.pose.position) <= cfg.success_distance
    finally:
        env.close()
    assert differ > 0


def test_search_teacher_demonstrations(cfg, monkeypatch):
    """collect(teacher='search'): the teacher is given the goal object's centre as its aim, its demonstrations
    reach the goal, and where the goal object is out of the frame (goal word ``none``) it mostly turns left (by the
    map where the line of sight is blocked), far more often than the shortest-path follower on the same states."""
    import dataclasses

    import training.vln.data as data
    from training.vln.navigator import make_env, make_episodes

    aims = []
    real = data.make_follower

    def spy(name, grid, spec=None, hfov_deg=79.0, aim=None):
        aims.append((name, aim))
        return real(name, grid, spec, hfov_deg, aim)

    monkeypatch.setattr(data, "make_follower", spy)
    eps = make_episodes(cfg, "eval", 6)
    agent = dataclasses.replace(cfg.agent_config(), goal_prefix=True)
    env = make_env(dataclasses.replace(cfg, max_steps=80), "normal", *eps)
    hidden, by_map = [], []

    def geodesic_when_hidden(e):
        if data.goal_location(e) == "none":
            by_map.append(data.teacher_actions(e, 1, "geodesic")[0])

    try:
        for i in range(len(eps[0])):
            samples = data.collect(env, [i], agent, cfg.image_size, teacher="search", on_state=geodesic_when_hidden)
            assert samples[-1].target.endswith("stop")
            assert env.geodesic_to_goal(env.pose.position) <= cfg.success_distance
            item = env.house.furniture[env.goal_item()]
            assert ("search", (item.x, item.y)) in aims
            hidden += [s.target.split()[1] for s in samples if s.target.startswith("none")]
        assert ("geodesic", None) in aims  # the map-driven teachers get no aim
    finally:
        env.close()
    assert len(hidden) == len(by_map) > 10
    search_left = hidden.count("left") / len(hidden)
    map_left = by_map.count(NavAction.TURN_LEFT) / len(by_map)
    assert search_left >= 0.6 and search_left >= map_left + 0.2, (search_left, map_left)


def test_dagger_relabels_learner_states_with_the_oracle(cfg, world, bundle):
    from agents.vln.modeling_vln import AlldayWalkerPolicy
    from training.vln.data import collect, teacher_actions
    from training.vln.navigator import make_env

    # an untrained learner: its answers are unparsable, so it turns left every step (fallback) and never stops
    agent_cfg = VLNAgentConfig(num_history=1, num_future_steps=3, action_history=2, fallback="left")
    learner = AlldayWalkerPolicy(bundle, agent_cfg)
    learner.predict = lambda *a, **k: [([NavAction.TURN_LEFT], False)]  # deterministic learner, same interface
    env = make_env(cfg, "normal", *world)
    try:
        samples = collect(env, [0], agent_cfg, cfg.image_size, policy=learner, beta=0.0)
        assert len(samples) == cfg.max_steps  # the learner drove (the oracle would have stopped earlier)
        env.reset(options={"episode_index": 0})  # replay the learner's trajectory and recompute the labels
        for s in samples:
            assert s.target == format_actions(teacher_actions(env, 3))
            env.step(NavAction.TURN_LEFT)
    finally:
        env.close()
    assert len({s.target for s in samples}) > 1  # labels follow the state (corrective turns), not a constant
    with pytest.raises(ValueError, match="needs a learner policy"):
        collect(env, [0], agent_cfg, cfg.image_size, beta=0.5)


def test_checkpoint_resume(cfg, tmp_path, monkeypatch):
    import training.vln.navigator as nav

    calls = {"n": 0}
    real_run = nav.Imitation.run

    def flaky(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # killed after the first checkpoint
        return real_run(self, *a, **k)

    monkeypatch.setattr(nav.Imitation, "run", flaky)
    with pytest.raises(KeyboardInterrupt):
        nav.train_navigator(cfg, tmp_path, progress=False)
    state = json.loads((tmp_path / "checkpoint" / "state.json").read_text())
    assert state["phase"] == "bc" and state["phase_step"] == 2
    calls["n"] = 10
    result = nav.train_navigator(cfg, tmp_path, resume=True, progress=False)
    assert calls["n"] == 10 + 1 + 1  # one remaining BC chunk + one DAgger chunk, the first chunk not redone
    # the resumed run is the uninterrupted one: same model (weights, optimizer and batch draws restored)
    straight = tmp_path / "straight"
    assert nav.train_navigator(cfg, straight, progress=False)["samples"] == result["samples"]
    from safetensors.torch import load_file

    a = load_file(str(tmp_path / "checkpoint" / "model" / "model.safetensors"))
    b = load_file(str(straight / "checkpoint" / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert result["steps"] == cfg.steps + cfg.dagger_steps
    assert (tmp_path / "final" / "vln_config.json").is_file() and "normal" in result["metrics"]
    other = VLNTrainConfig(**{**BASE, "steps": 6})
    with pytest.raises(ValueError, match="different config"):
        nav.train_navigator(other, tmp_path, resume=True, progress=False)


def test_resume_under_other_numerics_is_said(cfg, tmp_path, monkeypatch, caplog):
    """A run records the CPU numerics it starts under; resumed under others, it warns that its weights will not be
    an uninterrupted run's (and does not warn when they are the same)."""
    import training.vln.navigator as nav

    real_run = nav.Imitation.run

    def killed(self, *a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(nav.Imitation, "run", killed)
    with pytest.raises(KeyboardInterrupt):
        nav.train_navigator(cfg, tmp_path, progress=False)
    path = tmp_path / "checkpoint" / "state.json"
    state = json.loads(path.read_text())
    assert state["numerics"]["threads"] == torch.get_num_threads()
    assert state["numerics"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    with caplog.at_level("WARNING", logger="training.vln.navigator"), pytest.raises(KeyboardInterrupt):
        nav.train_navigator(cfg, tmp_path, resume=True, progress=False)
    assert "other CPU numerics" not in caplog.text
    state["numerics"]["threads"] += 1
    path.write_text(json.dumps(state))
    monkeypatch.setattr(nav.Imitation, "run", real_run)
    with caplog.at_level("WARNING", logger="training.vln.navigator"):
        nav.train_navigator(cfg, tmp_path, resume=True, progress=False)
    assert "resumes under other CPU numerics" in caplog.text


def test_run_in_the_old_layout_resumes(cfg, tmp_path, monkeypatch):
    """Runs written before the checkpoint folder kept model/, optim.pt and state.json in the run folder."""
    import shutil

    import training.vln.navigator as nav

    real_run = nav.Imitation.run
    calls = {"n": 0}

    def flaky(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real_run(self, *a, **k)

    monkeypatch.setattr(nav.Imitation, "run", flaky)
    with pytest.raises(KeyboardInterrupt):
        nav.train_navigator(cfg, tmp_path, progress=False)
    for name in ("model", "optim.pt", "state.json"):
        shutil.move(str(tmp_path / "checkpoint" / name), str(tmp_path / name))
    (tmp_path / "checkpoint").rmdir()
    assert nav.checkpoint_dir(tmp_path) == tmp_path
    calls["n"] = 10
    result = nav.train_navigator(cfg, tmp_path, resume=True, progress=False)
    assert calls["n"] == 12 and result["steps"] == cfg.steps + cfg.dagger_steps  # resumed, not restarted
    assert nav.checkpoint_dir(tmp_path) == tmp_path / "checkpoint"


def test_resume_after_a_kill_between_samples_and_state_keeps_no_duplicates(cfg, tmp_path, monkeypatch):
    import training.vln.navigator as nav

    real_save, real_collect = nav.save_samples, nav._collect_phase
    collected: list[int] = []

    def collect(*a, **k):
        out = real_collect(*a, **k)
        collected.append(len(out))
        return out

    def killed_after_dagger_samples(path, samples):
        real_save(path, samples)
        if len(collected) == 2:
            raise KeyboardInterrupt  # the DAgger samples are on disk, the state does not list the phase yet

    monkeypatch.setattr(nav, "_collect_phase", collect)
    monkeypatch.setattr(nav, "save_samples", killed_after_dagger_samples)
    with pytest.raises(KeyboardInterrupt):
        nav.train_navigator(cfg, tmp_path, progress=False)
    assert json.loads((tmp_path / "checkpoint" / "state.json").read_text())["collected"] == ["bc"]
    assert len(nav.load_samples(tmp_path / "samples.npz")) == collected[0] + collected[1]
    monkeypatch.setattr(nav, "save_samples", real_save)
    result = nav.train_navigator(cfg, tmp_path, resume=True, progress=False)
    assert len(collected) == 3  # DAgger collected again on resume
    assert result["samples"] == collected[0] + collected[2]  # its first collection is not kept twice
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporaries left


def test_base_navigator_survives_a_kill_during_its_clean_up(tmp_path, monkeypatch):
    import training.vln.navigator as nav

    c = VLNTrainConfig(**BASE, cache_dir=str(tmp_path))
    real_drop, real_train = nav._drop_training_leftovers, nav.train_navigator

    def killed(root):  # the old clean-up's order: optimizer state, then samples, then (never reached) DONE
        (root / "checkpoint" / "optim.pt").unlink()
        (root / "samples.npz").unlink()
        raise KeyboardInterrupt

    monkeypatch.setattr(nav, "_drop_training_leftovers", killed)
    with pytest.raises(KeyboardInterrupt):
        nav.base_navigator(c, progress=False)
    root = tmp_path / f"base-{c.fingerprint()}"
    first = json.loads((root / "metrics.json").read_text())
    again = real_train(c, root, resume=True, progress=False)  # a finished run resumes without samples or optimizer
    assert again["steps"] == c.steps + c.dagger_steps and again["samples"] == first["samples"] > 0
    monkeypatch.setattr(nav, "_drop_training_leftovers", real_drop)
    monkeypatch.setattr(nav, "train_navigator", lambda *a, **k: pytest.fail("retrained a finished base navigator"))
    final, metrics = nav.base_navigator(c, progress=False)
    assert (final / "vln_config.json").is_file() and "normal" in metrics["metrics"]
    assert not (root / "checkpoint" / "optim.pt").exists() and not (root / "backbone").exists()
    import torch  # what decided the base's float reductions stays with it

    rec = metrics["numerics"]
    assert rec["threads"] == torch.get_num_threads()
    assert rec["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert metrics["backbone"] is None  # no pre-training in this config


def test_backbone_record_outlives_the_dropped_backbone(tmp_path, caplog):
    """``metrics.json`` keeps the backbone's pre-training record (the guard's draws) that the clean-up deletes."""
    import training.vln.navigator as nav

    assert nav._backbone_record(tmp_path) is None  # a backbone given as vlm_path: nothing pre-trained
    (tmp_path / "backbone").mkdir()
    record = {"draws": {"chosen": 1, "tried": [{"draw": 0, "val_accuracy": 0.5}, {"draw": 1, "val_accuracy": 0.7}]}}
    (tmp_path / "backbone" / "grounding.json").write_text(json.dumps(record))
    assert nav._backbone_record(tmp_path) == record
    (tmp_path / "backbone" / "grounding.json").write_text('{"draws": ')
    assert nav._backbone_record(tmp_path) is None and "record is not kept" in caplog.text


def test_samples_write_is_atomic(tmp_path, monkeypatch):
    from training.vln.data import Sample
    from training.vln.navigator import load_samples, save_samples

    img = np.zeros((4, 4, 3), np.uint8)
    path = tmp_path / "samples.npz"
    save_samples(path, [Sample(img, "go", "stop", 0, 0)])

    def dies_half_way(file, **arrays):
        Path(file).write_bytes(b"PK\x03\x04 half a zip")
        raise MemoryError

    monkeypatch.setattr(np, "savez_compressed", dies_half_way)
    with pytest.raises(MemoryError):
        save_samples(path, [Sample(img, "go", "forward", 0, 0)] * 3)
    assert [s.target for s in load_samples(path)] == ["stop"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["samples.npz"]


def test_samples_round_trip_and_a_truncated_file_is_a_clear_error(tmp_path):
    from training.vln.data import Sample
    from training.vln.navigator import load_samples, save_samples

    rng = np.random.default_rng(0)
    samples = [Sample(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8), f"go {i}", "forward stop", i, 1 - i)
               for i in range(2)]
    path = tmp_path / "samples.npz"
    save_samples(path, samples)
    back = load_samples(path)
    assert [(s.prompt, s.target, s.scene, s.env) for s in back] == [("go 0", "forward stop", 0, 1),
                                                                      ("go 1", "forward stop", 1, 0)]
    np.testing.assert_array_equal(back[1].image, samples[1].image)
    path.write_bytes(path.read_bytes()[:40])  # a file cut short by a crash of an older, non-atomic writer
    with pytest.raises(ValueError, match="unreadable imitation samples .*samples.npz"):
        load_samples(path)
    with pytest.raises(ValueError, match="unreadable imitation samples"):
        load_samples(tmp_path / "missing.npz")


@pytest.mark.parametrize("kw,field", [({"train_conditions": ["dusk"]}, "train_conditions"),
                                      ({"condition_params": {"fog": {}}}, "unknown condition 'fog'"),
                                      ({"condition_params": {"low_light": {"gain": -1}}}, "gain"),
                                      ({"min_distance": 5.0, "max_distance": 4.0}, "min_distance"),
                                      ({"agent": {"num_future_steps": 0}}, "num_future_steps"),
                                      ({"steps": -1}, "steps"),
                                      ({"grounding": {"stages": [[0, 1, 1.0]]}}, "stages"),
                                      ({"grounding": {"lrr": 1e-3}}, "lrr"),
                                      ({"grounding": [1]}, "grounding"),
                                      ({"grounding": {}}, "do not fit 32 px"),
                                      ({"goal_side": "far"}, "goal_side"), ({"teacher": "oracle"}, "teacher")])
def test_train_config_validation(kw, field):
    with pytest.raises((ValueError, TypeError), match=field):
        VLNTrainConfig(**{**BASE, **kw})


def test_yaml_overrides_and_unknown_keys(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("steps: 5\nagent: {num_history: 1}\n")
    c = VLNTrainConfig.from_yaml(p, ["steps=7", "agent.num_future_steps=2", "eval_conditions=[normal]"])
    assert c.steps == 7 and c.agent == {"num_history": 1, "num_future_steps": 2} and c.eval_conditions == ["normal"]
    with pytest.raises(ValueError, match="unknown VLNTrainConfig keys"):
        VLNTrainConfig.from_yaml(p, ["stepz=1"])
    with pytest.raises(ValueError, match="key=value"):
        VLNTrainConfig.from_yaml(p, ["steps"])


VLN_CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "vln"
#: cache keys of the base navigators docs/alldaywalker.md and docs/results.md report on: a config edit (or a change
#: to ``extends:``) that changes them makes the lifelong benchmark retrain its base without saying so
DOCUMENTED_FINGERPRINTS = {"same_room_scene": "03646046f029", "search_teacher": "e0987d29c7f3",
                           "search_fine_patches": "c1beb5904fbd", "search_fine_patches_guarded": "5716353cbf1c"}


@pytest.mark.parametrize("name", sorted(p.stem for p in VLN_CONFIG_DIR.glob("*.yaml")))
def test_shipped_configs_load(name):
    c = VLNTrainConfig.from_yaml(VLN_CONFIG_DIR / f"{name}.yaml")
    assert c.agent_config().num_future_steps == 4
    if name == "same_room":  # the diagnostic run: bind-grounded 16-token backbone, current frame only
        assert c.same_room and c.tiny["patch_size"] == 16 and c.agent_config().num_history == 0
        assert c.grounding_config().stage_list()[-1] == (12, 2, 1.0, "side_of")
    if name in DOCUMENTED_FINGERPRINTS:
        assert c.fingerprint() == DOCUMENTED_FINGERPRINTS[name]
    if name == "search_fine_patches":  # extends search_teacher.yaml -> same_room_scene.yaml -> same_room.yaml
        assert c.tiny["patch_size"] == 8 and c.tiny["hidden_size"] == 128 and c.teacher == "search"
        assert c.agent_config().goal_prefix and c.scene_grounding_config().cotrain == 0.3
    if name == "search_fine_patches_guarded":  # the parent's scene_grounding mapping, merged key by key
        sg = c.scene_grounding_config()
        assert (sg.draws, sg.accept, sg.cotrain, sg.steps) == (3, 0.65, 0.3, 800) and c.tiny["patch_size"] == 8


def test_unknown_scene_ids(cfg):
    from training.vln.navigator import make_episodes

    with pytest.raises(ValueError, match="unknown scene index"):
        make_episodes(cfg, "task", 1, [3])
    with pytest.raises(ValueError, match="split must be one of"):
        make_episodes(cfg, "bogus")


def test_grounded_backbone_is_pre_trained_and_saved(tmp_path):
    """``grounding`` runs the grounding curriculum on the tiny backbone before imitation; the saved weights differ
    from the plain random-init backbone of the same seed, and the tokenizer knows the grounding words."""
    from agents.vlm.bundle import load_vlm
    from training.vln.navigator import build_backbone

    grounded = VLNTrainConfig(**{**BASE, "grounding": {"stages": [[12, 1, 1.0]], "steps_per_stage": 3,
                                                       "samples_per_stage": 16, "batch_size": 4}})
    plain = VLNTrainConfig(**BASE)
    assert grounded.fingerprint() != plain.fingerprint()
    a = load_vlm(build_backbone(grounded, tmp_path / "g", ["go left"]))
    b = load_vlm(build_backbone(plain, tmp_path / "p", ["go left"]))
    wa, wb = dict(a.model.named_parameters()), dict(b.model.named_parameters())
    assert any(not torch.equal(wa[k], wb[k]) for k in wb if k in wa)
    assert "square" in a.tokenizer.decode(a.tokenizer("the red square")["input_ids"])


def test_same_room_episodes_start_in_the_goal_room():
    from sim.nav.episode_gen import EpisodeGenConfig, generate_episodes, scene_list
    from sim.nav.house import generate_house

    scenes = scene_list(1)
    eps, _, _ = generate_episodes(scenes, 4, seed=1, progress=False,
                                  cfg=EpisodeGenConfig(min_distance=1.0, max_distance=4.0, same_room=True))
    house = generate_house(scenes[0][1], scenes[0][0])
    from sim.core.frames import habitat_to_mj

    assert len(eps) == 4
    for ep in eps:
        x, y, _ = habitat_to_mj(ep.start_position)
        assert house.room_at(x, y).name == ep.info["goal_room"]

"""The AlldayWalker agent on a tiny random-weight VLM: acts on a rendered frame, saves/loads, routes experts,
and fails clearly on bad input (empty instruction, corrupt checkpoints, expert ids beyond the checkpoint)."""

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch._dynamo")  # load triton's LLVM before MuJoCo's EGL context (segfault otherwise)

from agents.core.types import NavAction, Observation, Pose  # noqa: E402
from agents.vln.configuration_vln import VLNAgentConfig  # noqa: E402
from agents.vln.experts import TuckerExpertBank, tucker_delta  # noqa: E402
from agents.vln.router import PrototypeTable, RoutingError  # noqa: E402

TINY = dict(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=128, vision_hidden_size=32,
            vision_layers=1, vision_heads=2, vision_intermediate_size=64, bpe_vocab_size=400)


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory):
    from agents.vlm.bundle import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("vlm"), image_size=32, corpus=["forward left right stop"], **TINY)


@pytest.fixture(scope="module")
def frame():
    """A real rendered first frame of a generated episode."""
    from sim.core.env import NavEnvConfig
    from sim.nav.env import MujocoNavEnv
    from sim.nav.episode_gen import EpisodeGenConfig, generate_episodes, scene_list

    eps, gts, _ = generate_episodes(scene_list(1), 1, cfg=EpisodeGenConfig(tries_per_episode=400), progress=False)
    env = MujocoNavEnv(NavEnvConfig(width=32, height=32, quality="fast", depth=False), eps, gts)
    try:
        obs, _ = env.reset(options={"episode_index": 0})
        return env.to_observation(obs)
    finally:
        env.close()


def _policy(vlm_dir, **kw):
    from agents.vlm.bundle import load_vlm
    from agents.vln.modeling_vln import AlldayWalkerPolicy

    return AlldayWalkerPolicy(load_vlm(vlm_dir), VLNAgentConfig(num_history=1, num_future_steps=3), **kw)


def test_acts_on_rendered_frame_and_plans_several_steps(vlm_dir, frame):
    pol = _policy(vlm_dir)
    assert frame.rgb.std() > 5  # a real image, not blank
    actions = [pol.act(frame) for _ in range(4)]
    assert all(isinstance(a, NavAction) for a in actions)
    d = pol.diagnostics()
    # one model call serves up to num_future_steps actions (unless it said stop / was unparsable -> fallback stop)
    assert 1 <= d["calls"] <= 4 and d["routing"] == "off"
    pol.reset()
    assert pol.diagnostics()["route"] is None


def test_goal_prefix_answers_are_read_after_the_goal_word(vlm_dir, frame):
    """A tiny model taught one answer with a goal word: the policy executes the actions after it, reports the goal
    word in its diagnostics and counts no parse failure; the same model read without goal_prefix is malformed."""
    from agents.vlm.bundle import load_vlm
    from agents.vln.modeling_vln import AlldayWalkerPolicy
    from agents.vln.processor_vln import VLNProcessor, build_prompt, tile_frames
    from training.vln.data import Sample
    from training.vln.trainer import Imitation

    cfg = VLNAgentConfig(num_history=0, num_future_steps=3, goal_prefix=True)
    bundle = load_vlm(vlm_dir)
    for p in bundle.model.parameters():
        p.requires_grad_(True)
    sample = Sample(tile_frames([frame.rgb], 0, 32), build_prompt(frame.instruction, [], cfg), "right: left forward")
    torch.manual_seed(0)
    Imitation(bundle.model, VLNProcessor(bundle.processor, bundle.family, 32, cfg), lr=3e-3,
              batch_size=1).run([sample], 60)
    pol = AlldayWalkerPolicy(bundle, cfg)
    assert [pol.act(frame), pol.act(frame)] == [NavAction.TURN_LEFT, NavAction.MOVE_FORWARD]
    d = pol.diagnostics()
    assert d["goal"] == "right" and d["parse_failures"] == 0 and d["calls"] == 1
    plain = AlldayWalkerPolicy(bundle, VLNAgentConfig(num_history=0, num_future_steps=3))
    assert plain.act(frame) == NavAction.STOP and plain.diagnostics()["parse_failures"] == 1  # "right:" is no action


def test_empty_instruction_is_a_clear_error(vlm_dir, frame):
    pol = _policy(vlm_dir)
    bad = Observation(rgb=frame.rgb, depth=None, pose=Pose((0.0, 0.0, 0.0), 0.0), instruction="   ")
    with pytest.raises(ValueError, match="instruction is empty"):
        pol.act(bad)


def test_save_load_round_trip_and_corrupt_checkpoints(vlm_dir, frame, tmp_path):
    from agents.vln.modeling_vln import AlldayWalkerPolicy

    pol = _policy(vlm_dir)
    pol.save_pretrained(tmp_path / "ck")
    again = AlldayWalkerPolicy.from_pretrained(tmp_path / "ck")
    assert again.config == pol.config
    for a, b in zip(pol.model.parameters(), again.model.parameters()):
        assert torch.equal(a, b)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        AlldayWalkerPolicy.from_pretrained(tmp_path / "nope")
    (tmp_path / "ck" / "vln_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="corrupt"):
        AlldayWalkerPolicy.from_pretrained(tmp_path / "ck")
    (tmp_path / "ck" / "vln_config.json").write_text(json.dumps(pol.config.to_dict()))
    (tmp_path / "ck" / "vlm" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="corrupt or incomplete navigator checkpoint"):
        AlldayWalkerPolicy.from_pretrained(tmp_path / "ck")


def test_vision_tower_routing_features_ignore_the_projector(vlm_dir, frame):
    from agents.vlm.bundle import load_vlm
    from agents.vln.modeling_vln import AlldayWalkerPolicy, image_features

    bundle = load_vlm(vlm_dir)
    pol = AlldayWalkerPolicy(bundle, VLNAgentConfig(num_history=1, routing_features="vision_tower"))
    frames = [frame.rgb, frame.rgb[::-1].copy()]
    pv = pol.processor.pixel_values(frames)
    tower = image_features(bundle.model, pv, "vision_tower", bundle.family)
    with torch.no_grad():
        ref = bundle.model.get_submodule("model.vision_tower")(pixel_values=pv).last_hidden_state.mean(1)
    torch.testing.assert_close(tower, ref.float())
    assert tower.shape[0] == 2 and not torch.allclose(tower[0], tower[1])
    projected = image_features(bundle.model, pv)
    assert projected.shape[1] != tower.shape[1] or not torch.allclose(projected, tower)
    with torch.no_grad():   # what an adapter on the projector does: the projector's output moves, its input not
        bundle.model.get_submodule("model.multi_modal_projector.linear").weight.mul_(2.0)
    torch.testing.assert_close(image_features(bundle.model, pv, "vision_tower", bundle.family), tower)
    assert not torch.allclose(image_features(bundle.model, pv), projected)
    torch.testing.assert_close(pol.features(frames), tower)
    with pytest.raises(ValueError, match="routing_features"):
        VLNAgentConfig(routing_features="language_model")
    with pytest.raises(ValueError, match="routing feature source"):
        image_features(bundle.model, pv, "pixels")


def test_prototype_routing():
    table = PrototypeTable(torch.eye(3, 4), torch.tensor([[0.0, 0.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0]]))
    assert table.route(torch.tensor([0.0, 2.0, 0.0, 0.1])) == (1, 1)
    assert table.route(torch.tensor([[0.0, 0.0, 1.0, 3.0]] * 2)) == (2, 0)
    with pytest.raises(RoutingError, match="D=4"):
        table.route(torch.ones(5))
    with pytest.raises(RoutingError, match="needs prototypes"):
        PrototypeTable(torch.zeros(0, 4), torch.zeros(0, 4)).route(torch.ones(4))
    with pytest.raises(ValueError, match="differ in feature size"):
        PrototypeTable(torch.ones(2, 3), torch.ones(2, 4))
    # centred cosine: both prototypes share a large offset, only the centred direction separates them
    off = torch.tensor([10.0, 0.0])
    centred = PrototypeTable(torch.stack([off + torch.tensor([1.0, 0.0]), off + torch.tensor([0.0, 1.0])]),
                             torch.stack([off, off + 1]), scene_origin=off, env_origin=off)
    q = off + torch.tensor([0.3, 0.4])
    assert centred.route(q)[0] == 1
    assert PrototypeTable(centred.scene, centred.env).route(q)[0] == 0  # uncentred cosine picks the other one
    with pytest.raises(ValueError, match="scene_origin must have shape"):
        PrototypeTable(torch.ones(2, 3), torch.ones(2, 3), scene_origin=torch.ones(4))


def _bank(model, m=2, n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    factors, scaling = {}, {}
    for name, mod in model.named_modules():
        if name.endswith("q_proj") and "language_model" in name:
            out_f, in_f = mod.weight.shape
            factors[name] = {"G": torch.randn(4, 4, 2, 2, generator=g), "U1": torch.randn(out_f, 4, generator=g),
                             "U2T": torch.randn(4, in_f, generator=g), "U3": torch.randn(m, 2, generator=g),
                             "U4": torch.randn(n, 2, generator=g)}
            scaling[name] = 0.5
    return TuckerExpertBank(factors, scaling, m, n)


def test_expert_bank_merges_routed_experts_and_checks_ids(vlm_dir, tmp_path):
    from agents.vlm.bundle import load_vlm

    model = load_vlm(vlm_dir).model
    bank = _bank(model)
    bank.attach(model)
    name = next(iter(bank.factors))
    w = dict(model.named_modules())[name].weight
    w0 = w.detach().clone()
    bank(1, 2)
    assert torch.allclose(w, w0 + tucker_delta(bank.factors[name], 0.5, 1, 2), atol=1e-5)
    bank(0, 0)
    assert torch.allclose(w, w0 + tucker_delta(bank.factors[name], 0.5, 0, 0), atol=1e-5)
    bank(None, None)  # shared knowledge only: the mean expert rows
    u3, u4 = bank.factors[name]["U3"].mean(0), bank.factors[name]["U4"].mean(0)
    want = 0.5 * bank.factors[name]["U1"] @ torch.einsum("ijkl,k,l->ij", bank.factors[name]["G"], u3, u4) \
        @ bank.factors[name]["U2T"]
    assert torch.allclose(w, w0 + want, atol=1e-5)
    with pytest.raises(ValueError, match="scene expert 2 out of range: the checkpoint has 2"):
        bank(2, 0)
    with pytest.raises(ValueError, match="env expert 3 out of range"):
        bank(0, 3)
    bank.save(tmp_path)
    loaded = TuckerExpertBank.load(tmp_path)
    assert loaded.num_scenes == 2 and torch.equal(loaded.factors[name]["G"], bank.factors[name]["G"])
    (tmp_path / "tuka_experts.json").write_text("[]")
    with pytest.raises(ValueError, match="corrupt TuKA expert files"):
        TuckerExpertBank.load(tmp_path)


def test_routed_checkpoint_without_prototypes_errors_or_falls_back(vlm_dir, frame, tmp_path):
    from agents.vln.modeling_vln import AlldayWalkerPolicy

    pol = _policy(vlm_dir)
    bank = _bank(pol.model)
    pol.save_pretrained(tmp_path / "ck", experts=bank)
    served = AlldayWalkerPolicy.from_pretrained(tmp_path / "ck")
    with pytest.raises(RoutingError, match="no routing prototypes"):
        served.act(frame)
    cfg = VLNAgentConfig(num_history=1, num_future_steps=3, routing_fallback=True)
    served = AlldayWalkerPolicy.from_pretrained(tmp_path / "ck", config=cfg)
    assert isinstance(served.act(frame), NavAction)
    assert served.diagnostics()["routing"].startswith("fallback: shared knowledge only")
    # with prototypes the served policy routes to the nearest ones
    feats = served.features([frame.rgb])
    PrototypeTable(torch.cat([-feats, feats]), torch.cat([feats, -feats, -feats])).save(tmp_path / "ck")
    served = AlldayWalkerPolicy.from_pretrained(tmp_path / "ck")
    served.act(frame)
    assert served.route == (1, 0) and served.diagnostics()["routing"] == "routed"


def test_vln_node_registry_serves_the_navigator(vlm_dir, frame, tmp_path, monkeypatch):
    """``vln_node agent:=alldaywalker checkpoint:=DIR`` builds the policy through allday_ros.policies."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "ros2_ws" / "src" / "allday_ros"))
    from agents.vln.modeling_vln import AlldayWalkerPolicy
    from allday_ros.policies import make_policy

    pol = _policy(vlm_dir)
    pol.save_pretrained(tmp_path / "ck", experts=_bank(pol.model))
    served = make_policy("alldaywalker", {"checkpoint": str(tmp_path / "ck"), "device": "cpu",
                                          "quantization": "none", "routing_fallback": True})
    assert isinstance(served, AlldayWalkerPolicy) and served.config.routing_fallback
    assert isinstance(served.act(frame), NavAction)  # no prototypes: configured fallback to the shared knowledge
    assert served.diagnostics()["route"] == (None, None)
    with pytest.raises(ValueError, match="needs the 'checkpoint' parameter"):
        make_policy("alldaywalker", {"checkpoint": ""})
    with pytest.raises(FileNotFoundError):
        make_policy("alldaywalker", {"checkpoint": str(tmp_path / "missing")})


def test_prototype_table_with_several_prototypes_per_expert(tmp_path):
    basis = torch.eye(3)
    # scene 0 has two prototypes, on either side of scene 1's
    table = PrototypeTable(torch.stack([basis[0], basis[1], -basis[0]]), basis[:2], scene_labels=[0, 1, 0])
    assert table.route(-basis[0])[0] == 0 and table.route(basis[0])[0] == 0 and table.route(basis[1])[0] == 1
    assert table.num_experts == (2, 2)
    table.save(tmp_path)
    again = PrototypeTable.load(tmp_path)
    assert again.scene_labels.tolist() == [0, 1, 0] and again.env_labels.tolist() == [0, 1]
    assert again.route(-basis[0]) == table.route(-basis[0])
    for bad in ([0, 1], [0.0, 1.0, 0.0], [0, -1, 0]):
        with pytest.raises(ValueError, match="scene_labels must be 3 expert ids"):
            PrototypeTable(torch.stack([basis[0], basis[1], -basis[0]]), basis[:2], scene_labels=bad)


def test_checkpoint_whose_prototypes_route_past_its_experts_is_rejected(vlm_dir, frame, tmp_path):
    from agents.vln.modeling_vln import AlldayWalkerPolicy

    pol = _policy(vlm_dir)
    pol.save_pretrained(tmp_path / "ck", experts=_bank(pol.model))  # 2 scene x 3 environment experts
    d = pol.features([frame.rgb]).shape[1]
    PrototypeTable(torch.randn(3, d), torch.randn(3, d), scene_labels=[0, 1, 2]).save(tmp_path / "ck")
    with pytest.raises(ValueError, match=r"route to \(3, 3\) .* expert bank has 2 x 3"):
        AlldayWalkerPolicy.from_pretrained(tmp_path / "ck")
    PrototypeTable(torch.randn(3, d), torch.randn(3, d), scene_labels=[0, 1, 1]).save(tmp_path / "ck")
    assert AlldayWalkerPolicy.from_pretrained(tmp_path / "ck").router.num_experts == (2, 3)

"""TuKA adapter: shapes, initial delta W ~ 0, the Tucker algebra, routing errors, growth, save/load, merge."""

from __future__ import annotations

import json

import pytest
import torch
from peft import PeftModel
from peft.tuners.lora.layer import Linear as LoraLinear

from training.peft.tucker import (
    TuKAConfig,
    TuKALinear,
    add_env,
    add_scene,
    apply_tuka,
    count_adapter_params,
    export_tuka_factors,
    get_tuka_config,
    iter_tuka,
    load_tuka,
    merge_tuka,
    num_experts,
    save_tuka,
    set_active,
    shared_route,
)

TARGETS = ["q_proj", "v_proj", "o_proj", "down_proj"]


def _cfg(**kw) -> TuKAConfig:
    base = dict(r1=4, r2=4, r3=3, r4=2, alpha=8.0, target_modules=TARGETS, num_scenes=3, num_envs=2)
    base.update(kw)
    return TuKAConfig(**base)


@torch.no_grad()
def _randomise(model, std: float = 0.5) -> None:
    """Give the experts non-trivial values (the init is ~0 by design)."""
    g = torch.Generator().manual_seed(7)
    for _, layer in iter_tuka(model):
        for p in (layer.lora_scene["default"], layer.lora_env["default"]):
            p.copy_(torch.randn(p.shape, generator=g) * std)


def _routes(model):
    m, n = num_experts(model)
    return [(s, e) for s in range(m) for e in range(n)]


def _explicit_delta(layer: TuKALinear, s: int, e: int) -> torch.Tensor:
    """Full 4th-order update tensor T = G x1 U1 x2 U2 x3 U3 x4 U4, sliced at (s, e), times alpha/r1."""
    f = layer.factors()
    t = torch.einsum("pqkl,ap,bq,sk,el->abse", f["G"], f["U1"], f["U2T"].T, f["U3"], f["U4"])
    return t[:, :, s, e] * layer.scaling["default"]


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="r3"):
        TuKAConfig(r3=0)
    with pytest.raises(ValueError, match="num_envs"):
        TuKAConfig(num_envs=0)
    with pytest.raises(ValueError, match="alpha"):
        TuKAConfig(alpha=float("nan"))
    with pytest.raises(ValueError, match="target_modules"):
        TuKAConfig(target_modules=[])
    with pytest.raises(ValueError, match="unknown TuKA config keys"):
        TuKAConfig.from_dict({"r1": 4, "bogus": 1})
    for bad in (-0.1, float("inf"), 11.0, True, "0.5"):
        with pytest.raises(ValueError, match="expert_init_jitter"):
            TuKAConfig(expert_init_jitter=bad)
    cfg = _cfg()
    assert TuKAConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


def test_shapes_param_count_and_initial_delta_near_zero(make_base, ids) -> None:
    base_out = make_base()(ids).logits
    cfg = _cfg(num_scenes=5, num_envs=4)
    model = apply_tuka(make_base(), cfg)
    layers = dict(iter_tuka(model))
    assert len(layers) == 2 * len(TARGETS)
    expected = 0
    for _, layer in layers.items():
        f = layer.factors()
        out_f, in_f = layer.out_features, layer.in_features
        assert f["G"].shape == (4, 4, 3, 2) and f["U1"].shape == (out_f, 4) and f["U2T"].shape == (4, in_f)
        assert f["U3"].shape == (5, 3) and f["U4"].shape == (5 - 1, 2)
        assert layer.scaling["default"] == pytest.approx(8.0 / 4)
        expected += cfg.layer_param_count(in_f, out_f)
        for s, e in [(0, 0), (4, 3)]:
            layer.set_route(s, e)
            rel = layer.get_delta_weight("default").norm() / layer.get_base_layer().weight.norm()
            assert rel < 1e-3  # experts N(0, 0.002^2): delta W starts at ~0
    assert count_adapter_params(model) == expected
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    set_active(model, 2, 1)
    assert torch.allclose(model(ids).logits, base_out, atol=1e-3)


def test_forward_is_the_tucker_product_per_route_and_per_sample(make_base) -> None:
    model = apply_tuka(make_base(), _cfg())
    _randomise(model)
    name, layer = next(iter_tuka(model))
    x = torch.randn(3, 5, layer.in_features)
    base_y = layer.get_base_layer()(x)
    outs = {}
    for s, e in _routes(model):
        layer.set_route(s, e)
        want = x @ _explicit_delta(layer, s, e).T
        got = layer(x) - base_y
        assert torch.allclose(got, want, atol=1e-5), (name, s, e)
        assert torch.allclose(layer.get_delta_weight("default"), _explicit_delta(layer, s, e), atol=1e-6)
        outs[(s, e)] = got
    assert not torch.allclose(outs[(0, 0)], outs[(1, 0)], atol=1e-4)  # experts matter
    # per-sample routes: row b uses (scenes[b], envs[b])
    scenes, envs = torch.tensor([2, 0, 1]), torch.tensor([1, 1, 0])
    layer.set_route(scenes, envs)
    got = layer(x) - base_y
    for b in range(3):
        assert torch.allclose(got[b], outs[(int(scenes[b]), int(envs[b]))][b], atol=1e-5)
    # mixing weights: a one-hot mixture equals the plain id, the uniform one is the mean expert
    layer.set_route(torch.tensor([0.0, 1.0, 0.0]), 1)
    assert torch.allclose(layer(x) - base_y, outs[(1, 1)], atol=1e-5)
    layer.set_route(shared_route(3, [0, 2]), 0)
    u3 = layer.lora_scene["default"]
    core = torch.einsum("pqkl,k,l->pq", layer.lora_core["default"], (u3[0] + u3[2]) / 2, layer.lora_env["default"][0])
    want = x @ (layer.lora_B["default"].weight @ core @ layer.lora_A["default"].weight).T * layer.scaling["default"]
    assert torch.allclose(layer(x) - base_y, want, atol=1e-5)


def test_route_errors(make_base, ids) -> None:
    model = apply_tuka(make_base(), _cfg())
    with pytest.raises(ValueError, match="route not set"):
        model(ids)
    with pytest.raises(ValueError, match="scene 3 out of range.*3 scene experts"):
        set_active(model, 3, 0)
    with pytest.raises(ValueError, match="env 2 out of range"):
        set_active(model, 0, 2)
    with pytest.raises(ValueError, match="scene ids .* out of range"):
        set_active(model, torch.tensor([0, 5]), 0)
    with pytest.raises(ValueError, match="mixing weights have 2 entries"):
        set_active(model, torch.tensor([0.5, 0.5]), 0)
    with pytest.raises(TypeError, match="scene must be an int"):
        set_active(model, "kitchen", 0)
    with pytest.raises(ValueError, match="no TuKA layers"):
        set_active(make_base(), 0, 0)


def test_backward_reaches_every_factor(make_base, ids) -> None:
    model = apply_tuka(make_base(), _cfg())
    _randomise(model)
    set_active(model, 1, 1)
    model(ids, labels=ids).loss.backward()
    for _, layer in iter_tuka(model):
        for role, p in layer.factors().items():
            assert p.grad is not None and p.grad.abs().sum() > 0, role


def test_growth_keeps_old_experts_outputs(make_base, ids) -> None:
    model = apply_tuka(make_base(), _cfg())
    _randomise(model)
    before = {}
    for s, e in _routes(model):
        set_active(model, s, e)
        before[(s, e)] = model(ids).logits.detach()
    new_s = add_scene(model, init_from=1)
    new_e = add_env(model)  # near-zero init
    assert (new_s, new_e) == (3, 2) and num_experts(model) == (4, 3)
    cfg = get_tuka_config(model)
    assert (cfg.num_scenes, cfg.num_envs) == (4, 3)
    for (s, e), want in before.items():
        set_active(model, s, e)
        assert torch.equal(model(ids).logits, want), (s, e)
    for e in range(2):  # copied from scene 1: same function as scene 1
        set_active(model, new_s, e)
        assert torch.equal(model(ids).logits, before[(1, e)])
    set_active(model, 0, new_e)
    assert model(ids).logits.shape == before[(0, 0)].shape
    with pytest.raises(ValueError, match="out of range"):
        add_scene(model, init_from=9)


def test_growth_with_jitter_adds_an_orthogonal_part_of_the_given_size(make_base) -> None:
    model = apply_tuka(make_base(), _cfg(expert_init_jitter=0.5))
    _randomise(model)
    new_s, new_e = add_scene(model, init_from=1), add_env(model, init_from=0)
    for _, layer in iter_tuka(model):
        for rows, new, src in ((layer.lora_scene["default"], new_s, 1), (layer.lora_env["default"], new_e, 0)):
            u, v = rows[src].detach(), rows[new].detach() - rows[src].detach()
            assert float(v @ u) == pytest.approx(0.0, abs=1e-5)  # the copy's own part is kept whole
            assert float(v.norm()) == pytest.approx(0.5 * float(u.norm()), rel=1e-4)
    plain = apply_tuka(make_base(), _cfg())
    _randomise(plain)
    add_scene(plain, init_from=1)
    for _, layer in iter_tuka(plain):
        assert torch.equal(layer.lora_scene["default"][3], layer.lora_scene["default"][1])  # default: exact copy


def test_save_load_exact_and_the_vanilla_lora_trap(make_base, ids, tmp_path) -> None:
    model = apply_tuka(make_base(), _cfg())
    _randomise(model)
    add_scene(model, init_from=0)  # the saved checkpoint has the grown M
    with torch.no_grad():
        for _, layer in iter_tuka(model):
            layer.lora_scene["default"][3] += 0.1
    outs = {}
    for s, e in _routes(model):
        set_active(model, s, e)
        outs[(s, e)] = model(ids).logits.detach()
    save_tuka(model, tmp_path / "tuka")

    loaded = load_tuka(make_base(), tmp_path / "tuka")
    assert num_experts(loaded) == (4, 2) and get_tuka_config(loaded).num_scenes == 4
    lora_layers = [m for _, m in loaded.named_modules() if isinstance(m, LoraLinear)]
    assert lora_layers and all(type(m) is TuKALinear for m in lora_layers)
    src = dict(model.named_parameters())
    for n, p in loaded.named_parameters():
        if "lora_" in n:
            assert torch.equal(p, src[n]), n
    for (s, e), want in outs.items():
        set_active(loaded, s, e)
        assert torch.equal(loaded(ids).logits, want), (s, e)

    # the trap: a plain reload silently builds vanilla LoRA (r1 == r2 here, so no shape error)
    plain = PeftModel.from_pretrained(make_base(), str(tmp_path / "tuka"))
    plain_layers = [m for _, m in plain.named_modules() if isinstance(m, LoraLinear)]
    assert plain_layers and not any(isinstance(m, TuKALinear) for m in plain_layers)
    assert not any("lora_core" in n for n, _ in plain.named_parameters())
    assert not torch.allclose(plain(ids).logits, outs[(0, 0)], atol=1e-4)
    with pytest.raises(ValueError, match="vanilla LoRA layers: reload with load_tuka"):
        set_active(plain, 0, 0)


def test_load_errors(make_base, tmp_path) -> None:
    model = apply_tuka(make_base(), _cfg())
    out = save_tuka(model, tmp_path / "ok")
    with pytest.raises(ValueError, match="requested 5 scene experts but the checkpoint .* has 3"):
        load_tuka(make_base(), out, num_scenes=5)
    # a plain LoRA / foreign directory
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="not a TuKA checkpoint"):
        load_tuka(make_base(), tmp_path / "empty")
    # tuka_config.json claims more experts than the tensors hold
    cfg = json.loads((out / "tuka_config.json").read_text())
    (out / "tuka_config.json").write_text(json.dumps({**cfg, "num_scenes": 7}))
    with pytest.raises(ValueError, match="has 3 rows, tuka_config.json says 7"):
        load_tuka(make_base(), out)
    (out / "tuka_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="corrupt"):
        load_tuka(make_base(), out)
    (out / "tuka_config.json").write_text(json.dumps(cfg))
    (out / "adapter_model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="corrupt TuKA checkpoint"):
        load_tuka(make_base(), out)


def test_merge_equals_adapter_forward_for_every_route(make_base, ids) -> None:
    base_w = {n: p.clone() for n, p in make_base(dtype=torch.float64).named_parameters()}
    model = apply_tuka(make_base(dtype=torch.float64), _cfg())
    _randomise(model)
    for s, e in _routes(model):
        set_active(model, s, e)
        want = model(ids).logits.detach()
        merge_tuka(model, s, e, unload=False)
        assert torch.allclose(model(ids).logits, want, rtol=0, atol=1e-10), (s, e)
        with pytest.raises(ValueError, match="merged"):
            set_active(model, 0, 0)
        model.unmerge_adapter()
    for n, p in model.get_base_model().named_parameters():
        if "lora_" not in n:
            key = n.replace(".base_layer", "")
            assert torch.allclose(p, base_w[key], rtol=0, atol=1e-12), n
    set_active(model, 2, 1)
    want = model(ids).logits.detach()
    merged = merge_tuka(model, 2, 1)
    assert not any(isinstance(m, LoraLinear) for m in merged.modules())
    assert torch.allclose(merged(ids).logits, want, rtol=0, atol=1e-10)


def test_export_factors_and_trainable_reload(make_base, ids, tmp_path) -> None:
    model = apply_tuka(make_base(), _cfg())
    _randomise(model)
    factors, scaling = export_tuka_factors(model)
    base = make_base()
    mods = dict(base.named_modules())
    assert set(factors) == {n.removeprefix("base_model.model.") for n, _ in iter_tuka(model)}
    set_active(model, 1, 1)
    want = model(ids).logits.detach()
    with torch.no_grad():  # plain-model serving: W + scaling * U1 (G x3 U3[s] x4 U4[e]) U2^T
        for name, f in factors.items():
            core = torch.einsum("ijkl,k,l->ij", f["G"], f["U3"][1], f["U4"][1])
            mods[name].weight += scaling[name] * f["U1"] @ core @ f["U2T"]
    assert torch.allclose(base(ids).logits, want, atol=1e-5)
    save_tuka(model, tmp_path / "t")
    resumed = load_tuka(make_base(), tmp_path / "t", is_trainable=True)
    trainable = [n for n, p in resumed.named_parameters() if p.requires_grad]
    assert len(trainable) == 5 * len(factors) and all("lora_" in n for n in trainable)
    frozen = load_tuka(make_base(), tmp_path / "t")
    assert not any(p.requires_grad for p in frozen.parameters())

"""Lifelong methods' scope: sequential full fine-tuning changes every weight (vision tower included), sequential
LoRA leaves the base weights as they were and trains only its adapter; with
``adapt_projector`` every method adapts the multimodal projector too (never the vision tower) and routing reads
vision-tower features."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import training.vln  # noqa: E402,F401 - preloads triton's LLVM before any EGL context
from training.vln.config import VLNTrainConfig  # noqa: E402
from training.vln.data import Sample  # noqa: E402

TINY = dict(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=128, vision_hidden_size=32,
            vision_layers=1, vision_heads=2, vision_intermediate_size=64, bpe_vocab_size=400)


@pytest.mark.parametrize("name", ["seq_ft", "seq_lora"])
def test_method_trains_what_it_says(name, tmp_path) -> None:
    from agents.vlm.bundle import load_vlm
    from agents.vln.processor_vln import VLNProcessor
    from training.vln.methods import METHODS
    from training.vln.navigator import build_backbone
    from training.vln.trainer import Imitation

    cfg = VLNTrainConfig(image_size=32, tiny=TINY, agent={"num_history": 0, "num_future_steps": 2})
    bundle = load_vlm(build_backbone(cfg, tmp_path / "b", ["go to the sofa"]))
    total = sum(p.numel() for p in bundle.model.parameters())
    before = {n: p.detach().clone() for n, p in bundle.model.named_parameters()}
    method = METHODS.get(name)(bundle, cfg.agent_config(), {"lora_rank": 4})
    vproc = VLNProcessor(bundle.processor, bundle.family, cfg.image_size, cfg.agent_config())
    rng = np.random.default_rng(0)
    samples = [Sample(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8), "go to the sofa next:", "forward stop")] * 2
    losses = Imitation(method.model, vproc, lr=1e-2, batch_size=2).run(samples, 5)
    assert losses[-1] < losses[0]
    after = {n.replace("base_model.model.", "").replace(".base_layer", ""): p.detach()
             for n, p in method.model.named_parameters() if "lora_" not in n}
    vision = [n for n in before if "vision_tower" in n and n.endswith("weight")]
    changed = [n for n in vision if not torch.equal(before[n], after[n])]
    if name == "seq_ft":
        assert method.adapter_params() == total and len(changed) == len(vision)
    else:
        assert not changed and all(torch.equal(before[n], after[n]) for n in before)
        assert 0 < method.adapter_params() < total // 5


@pytest.mark.parametrize("adapt_projector", [False, True])
@pytest.mark.parametrize("name", ["seq_lora", "ewc_lora", "oracle_multi_lora", "tuka_dkil"])
def test_projector_is_adapted_only_when_asked(name, adapt_projector, tmp_path) -> None:
    from agents.vlm.bundle import load_vlm
    from training.vln.lifelong import Task
    from training.vln.methods import METHODS
    from training.vln.navigator import build_backbone

    cfg = VLNTrainConfig(image_size=32, tiny=TINY, agent={"num_history": 0, "num_future_steps": 2})
    bundle = load_vlm(build_backbone(cfg, tmp_path / "b", ["go to the sofa"]))
    settings = {"lora_rank": 4, "tuka_ranks": (4, 4, 2, 2), "ewc_lambda": 1.0, "adapt_projector": adapt_projector}
    method = METHODS.get(name)(bundle, cfg.agent_config(), settings)
    method.start_task(Task(0, 0, "normal", 0))   # the multi-LoRA adds its first adapter here
    trained = [n for n, p in method.model.named_parameters() if p.requires_grad]
    assert any("language_model" in n for n in trained)
    assert any("multi_modal_projector" in n for n in trained) == adapt_projector
    assert not any("vision_tower" in n for n in trained)


def test_adapting_the_projector_routes_on_vision_tower_features() -> None:
    from training.vln.lifelong import LifelongConfig

    base = VLNTrainConfig(image_size=32, tiny=TINY, agent={"num_history": 0})
    assert LifelongConfig(base=base).agent_config().routing_features == "projector"
    on = LifelongConfig(base=base, adapt_projector=True)
    assert on.agent_config().routing_features == "vision_tower" and on.settings()["adapt_projector"] is True
    assert on.agent_config().num_history == 0
    with pytest.raises(TypeError, match="adapt_projector"):
        LifelongConfig(base=base, adapt_projector="yes")


def test_dkil_ewc_weight_reaches_tukas_penalty(tmp_path) -> None:
    from agents.vlm.bundle import load_vlm
    from training.vln.lifelong import LifelongConfig
    from training.vln.methods import METHODS
    from training.vln.navigator import build_backbone

    base = VLNTrainConfig(image_size=32, tiny=TINY, agent={"num_history": 0, "num_future_steps": 2})
    cfg = LifelongConfig(base=base, tuka_ranks=(4, 4, 2, 2), dkil_w_ewc=0.0)
    assert cfg.settings()["dkil_w_ewc"] == 0.0 and LifelongConfig(base=base).settings()["dkil_w_ewc"] == 0.2
    from training.peft.tucker import DKILConfig

    assert LifelongConfig(base=base).dkil_w_ewc == DKILConfig().w_ewc  # the benchmark's default is DKIL's
    bundle = load_vlm(build_backbone(base, tmp_path / "b", ["go to the sofa"]))
    method = METHODS.get("tuka_dkil")(bundle, cfg.agent_config(), cfg.settings())
    assert method.penalty.config.w_ewc == 0.0 and method.penalty.config.w_co == 0.2  # only the EWC weight moves
    for bad in (-0.1, float("nan"), True, "0.2"):
        with pytest.raises(ValueError, match="dkil_w_ewc"):
            LifelongConfig(base=base, dkil_w_ewc=bad)
    assert not method.penalty.config.anchor_reused
    held = LifelongConfig(base=base, tuka_ranks=(4, 4, 2, 2), dkil_anchor_reused=True)
    bundle = load_vlm(build_backbone(base, tmp_path / "c", ["go to the sofa"]))
    assert METHODS.get("tuka_dkil")(bundle, held.agent_config(), held.settings()).penalty.config.anchor_reused
    with pytest.raises(ValueError, match="anchor_reused"):
        LifelongConfig(base=base, dkil_anchor_reused="yes")
    pair = LifelongConfig(base=base, tuka_ranks=(4, 4, 2, 2), dkil_core_fisher="pair")
    bundle = load_vlm(build_backbone(base, tmp_path / "d", ["go to the sofa"]))
    assert METHODS.get("tuka_dkil")(bundle, pair.agent_config(), pair.settings()).penalty.config.core_fisher == "pair"
    with pytest.raises(ValueError, match="core_fisher"):
        LifelongConfig(base=base, dkil_core_fisher="kfac")
    jitter = LifelongConfig(base=base, tuka_ranks=(4, 4, 2, 2), tuka_init_jitter=0.5)
    bundle = load_vlm(build_backbone(base, tmp_path / "e", ["go to the sofa"]))
    method = METHODS.get("tuka_dkil")(bundle, jitter.agent_config(), jitter.settings())
    from training.peft.tucker import get_tuka_config

    assert get_tuka_config(method.model).expert_init_jitter == 0.5 and pair.settings()["tuka_init_jitter"] == 0.0
    for bad in (-0.5, float("nan"), 11.0, True):
        with pytest.raises(ValueError, match="tuka_init_jitter"):
            LifelongConfig(base=base, tuka_init_jitter=bad)

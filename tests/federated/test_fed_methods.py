"""Federated methods (plain math): init noise, hand-computed aggregation, bad uploads, faults, resume, config, CLI."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from training.federated.config import FedConfig, load_config
from training.federated.data import build_fed_data, make_examples, split_clients
from training.federated.faults import inject_fault
from training.federated.local import client_round, get_task, global_eval, lora_scale
from training.federated.loop import run_plain, run_round
from training.federated.methods.base import Upload
from training.federated.methods.flexlora import svd_factors
from training.federated.registry import FED_METHODS, make_method
from training.federated.server import FedServer
from training.peft.plora import iter_plora

METHODS = ["fedplora", "fedit", "hetlora", "flora", "flexlora"]


def _cfg(**kw) -> FedConfig:
    base = dict(num_clients=4, examples_per_client=48, test_size=64, rounds=2, fraction=0.5, min_clients=2,
                local_steps=4, batch_size=8, lr=5e-3, budgets=[2, 4, 8, 16])
    base.update(kw)
    return FedConfig(**base)


def _method(cfg: FedConfig):
    return make_method(cfg.method, rank=cfg.rank, scale=lora_scale(cfg), weighting=cfg.weighting)


def _trained_state(cfg: FedConfig):
    """A global state after one plain round (non-trivial modules / dW)."""
    server = FedServer(cfg.replace(rounds=1))
    run_round(server)
    return server.method, server.state


# ------------------------------------------------------------------------------------------------------ data
def test_data_is_deterministic_and_splits_partition_everything() -> None:
    t1, y1 = make_examples(50, seed=3)
    t2, y2 = make_examples(50, seed=3)
    assert t1 == t2 and np.array_equal(y1, y2) and set(y1.tolist()) <= set(range(16))
    labels = np.random.default_rng(0).integers(0, 16, 600)
    for split in ("iid", "dirichlet"):
        parts = split_clients(labels, 10, split, alpha=0.3, seed=1)
        assert sorted(np.concatenate(parts).tolist()) == list(range(600))
    skew = [np.bincount(labels[p], minlength=16).max() / len(p) for p in split_clients(labels, 10, "dirichlet")]
    flat = [np.bincount(labels[p], minlength=16).max() / len(p) for p in split_clients(labels, 10, "iid")]
    assert np.mean(skew) > np.mean(flat) + 0.1  # non-IID clients are dominated by few classes
    with pytest.raises(ValueError, match="split"):
        split_clients(labels, 10, "weird")
    d = build_fed_data(3, 10, "iid", test_size=20)
    assert [len(c) for c in d.clients] == [10, 10, 10] and len(set(d.label_ids)) == 16


# ----------------------------------------------------------------------------------------- registry / config
def test_registry_and_config_validation(tmp_path) -> None:
    assert set(METHODS) <= set(FED_METHODS.names())
    with pytest.raises(KeyError, match="known: .*fedplora"):
        make_method("nope", rank=4, scale=1.0)
    for bad, match in [(dict(method="x"), "method"), (dict(rounds=0), "rounds"), (dict(fraction=1.5), "fraction"),
                       (dict(budgets=[2, 32]), "budgets"), (dict(split="zipf"), "split"),
                       (dict(faults={1: "meteor"}), "faults"), (dict(min_clients=9), "min_clients")]:
        with pytest.raises(ValueError, match=match):
            _cfg(**bad)
    p = tmp_path / "c.yaml"
    p.write_text("method: hetlora\nrounds: 7\nbudgets: [2, 4]\n")
    cfg = load_config(p, ["lr=0.01", "faults={1: nan}", "split=dirichlet"])
    assert (cfg.method, cfg.rounds, cfg.budgets, cfg.lr, cfg.faults) == ("hetlora", 7, [2, 4], 0.01, {1: "nan"})
    with pytest.raises(ValueError, match="unknown FedConfig key"):
        load_config(p, ["colour=red"])
    with pytest.raises(FileNotFoundError):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ValueError, match=r"override 'budgets=\[2, 4': value is not valid YAML"):
        load_config(p, ["budgets=[2, 4"])  # a clear error on the command line, not a yaml traceback
    from training.federated.flower.runtimes import select_family

    with pytest.raises(ValueError, match="not valid YAML"):
        select_family(None, ["method=[fedpte"])


# ------------------------------------------------------------------------------------------------- init noise
@pytest.mark.parametrize("method", METHODS)
def test_initialisation_noise(method: str) -> None:
    """Fed-PLoRA/FedIT clients start from exactly the global function; HETLoRA/FlexLoRA truncation does not."""
    cfg = _cfg(method=method, rounds=1, fraction=1.0, min_clients=4)
    m, state = _trained_state(cfg)
    _, metrics = client_round(cfg, m, state, partition_id=0, budget=2, round_idx=2)
    if method in ("fedplora", "fedit", "flora"):
        assert metrics["init_noise"] < 1e-5
    else:
        assert metrics["init_noise"] > 1e-3


def test_fedplora_client_start_equals_global_model_outputs() -> None:
    cfg = _cfg(method="fedplora", rounds=1, fraction=1.0, min_clients=4)
    m, state = _trained_state(cfg)
    task = get_task(cfg)
    g = m.global_model(copy.deepcopy(task.base), state)
    client = m.start_client(copy.deepcopy(task.base), state, 4, np.random.default_rng(0))
    x = task.data.test.subset(np.arange(32))
    torch.testing.assert_close(client.model(x.input_ids, x.attention_mask), g(x.input_ids, x.attention_mask),
                               atol=1e-5, rtol=0)
    for _, layer in iter_plora(client.model):
        assert layer.active_indices == client.indices and len(client.indices) == 4


# ------------------------------------------------------------------------------------------------ aggregation
def _rand_up(cid: str, n: int, r: int, shapes: dict[str, tuple[int, int]], seed: int) -> Upload:
    g = torch.Generator().manual_seed(seed)
    t = {}
    for name, (d_in, d_out) in shapes.items():
        t[f"{name}.A"], t[f"{name}.B"] = torch.randn(r, d_in, generator=g), torch.randn(d_out, r, generator=g)
    return Upload(cid, n, r, t)


def test_fedplora_upload_round_trip_and_hand_aggregation() -> None:
    m = make_method("fedplora", rank=4, scale=1.0)
    g = {"l.A": torch.randn(4, 3), "l.B": torch.randn(2, 4)}
    u1 = Upload("a", 1, 2, {"l.0.A": torch.ones(3), "l.0.B": torch.ones(2), "l.2.A": 2 * torch.ones(3),
                            "l.2.B": 2 * torch.ones(2)})
    u2 = Upload("b", 3, 1, {"l.2.A": 6 * torch.ones(3), "l.2.B": 6 * torch.ones(2)})
    new = m.aggregate(g, [u1, u2])
    torch.testing.assert_close(new["l.A"][0], torch.ones(3))
    torch.testing.assert_close(new["l.A"][2], torch.full((3,), (1 * 2 + 3 * 6) / 4))
    assert torch.equal(new["l.A"][1], g["l.A"][1]) and torch.equal(new["l.B"][:, 3], g["l.B"][:, 3])
    bad = Upload("c", 1, 2, {"l.0.A": torch.ones(3), "l.0.B": torch.ones(2)})  # claims budget 2, sends 1 module
    assert "budget" in m.split_valid(g, [bad])[1]["c"]


def test_hetlora_zero_pad_average_matches_hand_computation() -> None:
    m = make_method("hetlora", rank=4, scale=1.0)
    g = {"l.A": torch.randn(4, 3), "l.B": torch.randn(2, 4)}
    u1, u2 = _rand_up("a", 1, 2, {"l": (3, 2)}, 1), _rand_up("b", 3, 3, {"l": (3, 2)}, 2)
    new = m.aggregate(g, [u2, u1])
    a1, a2 = u1.tensors["l.A"], u2.tensors["l.A"]
    torch.testing.assert_close(new["l.A"][:2], (a1 * 1 + a2[:2] * 3) / 4)
    torch.testing.assert_close(new["l.A"][2], a2[2] * 3 / 4)  # zero-padded by client a
    assert torch.equal(new["l.A"][3], g["l.A"][3])  # nobody has rank 4: kept


def test_flora_stacking_and_flexlora_svd_match_hand_computation() -> None:
    shapes = {"l": (5, 4)}
    u1, u2 = _rand_up("a", 1, 2, shapes, 1), _rand_up("b", 3, 3, shapes, 2)
    g = {"l.dW": torch.randn(4, 5)}
    expected = 0.5 * (0.25 * u1.tensors["l.B"] @ u1.tensors["l.A"] + 0.75 * u2.tensors["l.B"] @ u2.tensors["l.A"])
    flora = make_method("flora", rank=4, scale=0.5)
    torch.testing.assert_close(flora.aggregate(g, [u1, u2])["l.dW"], g["l.dW"] + expected)
    flex = make_method("flexlora", rank=4, scale=0.5)
    torch.testing.assert_close(flex.aggregate(g, [u2, u1])["l.dW"], expected)
    a, b, r_eff = svd_factors(expected, 4, 0.5)
    assert r_eff == 4 and torch.allclose(0.5 * b @ a, expected, atol=1e-5)
    a2, b2, _ = svd_factors(expected, 2, 0.5)
    s = torch.linalg.svdvals(expected)
    err = torch.linalg.matrix_norm(0.5 * b2 @ a2 - expected)
    assert float(err) == pytest.approx(float(torch.sqrt((s[2:] ** 2).sum())), rel=1e-4)  # Eckart-Young


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", ["nan", "shape", "rank"])
def test_bad_uploads_are_excluded_with_a_reason(method: str, kind: str) -> None:
    cfg = _cfg(method=method, rounds=1)
    m = _method(cfg)
    state = m.init_state(get_task(cfg).base)
    good, _ = client_round(cfg, m, state, 0, 2, 1)
    bad = inject_fault(Upload("1", good.num_samples, good.budget, good.tensors), kind, cfg.rank)
    valid, rejected = m.split_valid(state, [good, bad])
    assert [u.client_id for u in valid] == ["0"] and set(rejected) == {"1"}
    assert {"nan": "non-finite", "shape": "shape", "rank": "outside"}[kind] in rejected["1"]
    with pytest.raises(Exception, match="dropout"):
        inject_fault(good, "crash", cfg.rank)


# ---------------------------------------------------------------------------------------------- loop / faults
def test_faulty_clients_excluded_and_round_completes(caplog) -> None:
    cfg = _cfg(method="fedplora", rounds=1, fraction=1.0, min_clients=4, faults={1: "nan", 2: "crash", 3: "rank"})
    with caplog.at_level("WARNING"):
        server = run_plain(cfg)
    rec = server.history[0]
    assert rec.aggregated == ["0"] and set(rec.excluded) == {"1", "2", "3"}
    assert "dropped out" in rec.excluded["2"] and "excluding client 1" in caplog.text
    assert server.round == 1


def test_resume_from_checkpoint_loses_no_round(tmp_path) -> None:
    cfg = _cfg(method="fedplora", rounds=3, checkpoint_dir=str(tmp_path / "ck"))
    first = run_plain(cfg, max_rounds=2)  # "crash" after round 2
    assert first.round == 2 and (tmp_path / "ck" / "global.pt").is_file()
    resumed = FedServer(cfg)
    assert resumed.round == 2 and [r.round for r in resumed.history] == [1, 2]
    for k in first.state:
        assert torch.equal(resumed.state[k], first.state[k])
    done = run_plain(cfg)
    assert [r.round for r in done.history] == [1, 2, 3]
    straight = run_plain(cfg.replace(checkpoint_dir=""))
    for k in straight.state:
        torch.testing.assert_close(done.state[k], straight.state[k], atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="method"):
        FedServer(cfg.replace(method="hetlora"))
    with pytest.raises(ValueError, match=r"other settings \(lr\)"):
        FedServer(cfg.replace(lr=cfg.lr * 2))  # would silently report the old run's rounds as this one's
    assert FedServer(cfg.replace(rounds=5, torch_threads=2)).round == 3  # more rounds: resumes
    ck = tmp_path / "ck" / "global.pt"
    ck.write_bytes(ck.read_bytes()[:100])
    with pytest.raises(ValueError, match="corrupt federated checkpoint .*global.pt"):
        FedServer(cfg)
    torch.save({"weights": 1}, ck)
    with pytest.raises(ValueError, match="not a federated checkpoint"):
        FedServer(cfg)


def test_plain_loop_improves_global_loss_for_every_method() -> None:
    for method in METHODS:
        cfg = _cfg(method=method, rounds=3, fraction=1.0, min_clients=4, local_steps=12)
        m = _method(cfg)
        _, loss0 = global_eval(cfg, m, m.init_state(get_task(cfg).base))
        server = run_plain(cfg)
        assert server.history[-1].loss < loss0 - 0.02, (method, loss0, [r.loss for r in server.history])
        assert all(r.down_bytes > 0 and r.up_bytes > 0 for r in server.history)


def test_cli_plain_run_prints_json(tmp_path, capsys) -> None:
    import json

    from training.cli import main

    cfgp = tmp_path / "q.yaml"
    cfgp.write_text("num_clients: 4\nexamples_per_client: 16\ntest_size: 32\nlocal_steps: 2\nrounds: 1\n")
    rc = main(["fed", "run", "--config", str(cfgp), "--plain", "--rounds", "2", "--quiet",
               "--set", f"checkpoint_dir={tmp_path / 'ck'}"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and out["rounds_done"] == 2 and len(out["accuracy"]) == 2 and out["runtime"] == "plain"
    assert main(["fed", "run", "--config", str(cfgp), "--plain", "--set", "rank=0"]) == 2

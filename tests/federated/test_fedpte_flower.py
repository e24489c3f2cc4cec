"""FedPTE on real Flower 1.42: the ServerApp/ClientApp in Ray simulation (2 clients, 2 rounds) improve the global
model; message codecs round-trip; the plain loop runs every method; ``allday fed run`` runs a FedPTE config (plain;
deployment with a SuperLink + 2 SuperNodes in the slow test) and rejects bad configs clearly."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from training.federated.fedpte.app import decode_protos, decode_uploads, encode_protos, encode_uploads, parse_run_config
from training.federated.fedpte.config import ClientConfig
from training.federated.fedpte.data import load_domains
from training.federated.fedpte.evolve import ClassUpload, PrototypeSet
from training.federated.fedpte.loop import FedRunConfig, run_federated

DATASET = {"name": "digits", "n_train": 160, "n_test": 100, "domains": ["mnist", "usps"]}


def test_codecs_round_trip_and_reject_inconsistent_records():
    pytest.importorskip("flwr")
    from flwr.app import Array, ArrayRecord

    ups = {3: ClassUpload(np.ones((2, 4)), np.array([5.0, 6.0])), 1: ClassUpload(np.zeros((1, 4)), np.array([2.0]))}
    back = decode_uploads(encode_uploads(ups))
    assert sorted(back) == [1, 3]
    np.testing.assert_allclose(back[3].counts, [5, 6])
    np.testing.assert_allclose(back[1].points, np.zeros((1, 4)))
    assert decode_uploads(encode_uploads({})) == {} and decode_protos(encode_protos(None)) is None
    ps = PrototypeSet({0: np.eye(2)}, {0: np.array([1.0, 3.0])})
    np.testing.assert_allclose(decode_protos(encode_protos(ps)).centres[0], np.eye(2))
    bad = ArrayRecord({"points": Array(np.zeros((2, 3), np.float32)), "labels": Array(np.zeros(3, np.int64)),
                       "counts": Array(np.ones(3))})
    with pytest.raises(ValueError, match="disagree"):
        decode_uploads(bad)
    nan = ArrayRecord({"points": Array(np.full((1, 3), np.nan, np.float32)), "labels": Array(np.zeros(1, np.int64)),
                       "counts": Array(np.ones(1))})
    with pytest.raises(ValueError, match="finite"):
        decode_uploads(nan)


def test_run_config_parsing_and_validation():
    cfg, ds = parse_run_config({"fedpte": '{"run": {"method": "fedproto", "rounds": 3}}'})
    assert cfg.method == "fedproto" and cfg.rounds == 3 and ds["name"] == "digits"
    with pytest.raises(ValueError, match="method must be one of"):
        parse_run_config({"fedpte": '{"run": {"method": "fedsgd"}}'})
    with pytest.raises(ValueError, match="JSON object"):
        parse_run_config({"fedpte": '{"model": 1}'})


def test_plain_loop_runs_every_method_with_its_prototypes():
    doms = load_domains(**{**DATASET, "n_train": 60, "n_test": 40})
    counts = {}
    for m in ("fedavg", "fedproto", "fedpte"):
        hist = run_federated(doms, FedRunConfig(method=m, rounds=1, width=8, emb_dim=16,
                                                client=ClientConfig(local_epochs=1, local_k=2)))
        assert set(hist[0]["accuracy"]) == {"mnist", "usps"} and np.isfinite(hist[0]["train_loss"])
        counts[m] = hist[0]["prototypes"]
    assert counts["fedavg"] == {} and counts["fedproto"] == {c: 1 for c in range(10)}
    assert set(counts["fedpte"]) == set(range(10)) and all(1 <= k <= 4 for k in counts["fedpte"].values())


def test_flower_simulation_improves_the_global_model(monkeypatch):
    pytest.importorskip("flwr")
    pytest.importorskip("ray")
    from flwr.simulation import run_simulation

    from training.federated.fedpte.app import make_client_app, make_server_app

    tmp = tempfile.mkdtemp(prefix="fp", dir="/tmp")  # short: Ray's socket paths must stay < 108 chars
    for var, sub in (("FLWR_HOME", "flwr"), ("RAY_TMPDIR", "ray"), ("TMPDIR", "tmp")):
        os.makedirs(os.path.join(tmp, sub))
        monkeypatch.setenv(var, os.path.join(tmp, sub))
    run = FedRunConfig(method="fedpte", rounds=2, client=ClientConfig(local_epochs=2, local_k=2))
    results: list = []
    backend = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
               "init_args": {"num_cpus": 2, "include_dashboard": False}}  # no dashboard agent: less to fail
    try:
        run_simulation(server_app=make_server_app(run, DATASET, results), client_app=make_client_app(run, DATASET),
                       num_supernodes=2, backend_config=backend)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert len(results) == 1, "the ServerApp did not finish"
    res, strategy = results[0]
    central = res.evaluate_metrics_serverapp
    assert sorted(central) == [0, 1, 2]
    assert central[2]["loss"] < central[0]["loss"]
    assert central[2]["accuracy"] > central[0]["accuracy"] + 0.2
    assert sorted(res.evaluate_metrics_clientapp) == [1, 2]  # both clients evaluated their own domain
    assert len(strategy.history) == 2 and set(strategy.history[-1]) == set(range(10))  # prototypes evolved


# ---- `allday fed run` with a FedPTE config --------------------------------------------------------------------
QUICK = Path(__file__).resolve().parents[2] / "configs" / "fed" / "fedpte_quick.yaml"


def _last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_cli_plain_run_of_the_quick_config_prints_a_json_summary(capsys):
    from training.cli import main

    assert main(["fed", "run", "--config", str(QUICK), "--plain", "--quiet"]) == 0
    out = _last_json(capsys)
    assert (out["method"], out["runtime"], out["dataset"], out["clients"]) == ("fedpte", "plain", "digits", 2)
    assert out["rounds_done"] == 3 and len(out["accuracy"]) == 3
    assert set(out["domain_accuracy"]) == {"mnist", "usps"} and out["final_accuracy"] == out["accuracy"][-1]
    assert out["final_accuracy"] > 0.5 and set(out["prototypes"]) == {str(c) for c in range(10)}
    # --method / --rounds / dotted --set override the file; fedavg keeps no prototypes
    assert main(["fed", "run", "--config", str(QUICK), "--plain", "--quiet", "--method", "fedavg", "--rounds", "1",
                 "--set", "client.local_epochs=1"]) == 0
    out = _last_json(capsys)
    assert (out["method"], out["rounds_done"], out["prototypes"]) == ("fedavg", 1, {})


def test_family_selection_and_spec_round_trip(tmp_path):
    import yaml

    from training.federated.fedpte.runner import FEDPTE, load_spec
    from training.federated.flower.runtimes import PLORA, family_for, select_family

    assert select_family(QUICK, []) is FEDPTE and select_family(QUICK, ["method=fedproto"]) is FEDPTE
    assert select_family(QUICK.with_name("quick.yaml"), []) is PLORA and select_family(None, []) is PLORA
    assert {family_for(m).name for m in ("fedpte", "fedproto", "fedavg")} == {"fedpte"}
    spec = load_spec(QUICK, ["dataset.n_train=40", "client.lr=0.01", "rounds=1"])
    assert (spec.dataset["n_train"], spec.run.client.lr, spec.run.rounds) == (40, 0.01, 1)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(spec.to_dict()))
    assert load_spec(p) == spec


@pytest.mark.parametrize("text, extra, message", [
    ("method: fedsgd\ndataset: {name: digits}\n", [], "unknown federated method 'fedsgd'; known: fedavg, fedit"),
    ("method: fedpte\nrounds: 2\n", [], "needs a 'dataset:' section"),
    ("method: fedpte\ndataset: {n_train: 10}\n", [], "needs a 'dataset:' section with a 'name'"),
    ("method: fedpte\ndataset: {name: cifar}\n", [], "unknown dataset 'cifar'; known: digits, sim_views"),
    ("method: fedpte\ndataset: {name: sim_views, n_train: 10}\n", [], "dataset 'sim_views' does not take ['n_train']"),
    ("method: fedpte\nlayers: 3\ndataset: {name: digits}\n", [], "unknown FedPTE config keys ['layers']"),
    ("method: fedpte\ndataset: {name: digits}\n", ["--set", "client.lr=-1"], "lr must be in"),
    ("method: fedpte\ndataset: {name: digits}\n", ["--set", "client.rate=1"], "unexpected keyword argument 'rate'"),
    ("method: fedpte\ndataset: {name: digits}\n", ["--set", "model.width=1"], "only the sections"),
])
def test_cli_rejects_bad_fedpte_configs_with_a_clear_error(tmp_path, capsys, text, extra, message):
    from training.cli import main

    p = tmp_path / "bad.yaml"
    p.write_text(text)
    assert main(["fed", "run", "--config", str(p), "--plain", "--quiet", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("allday fed: error:") and message in err, err


@pytest.mark.slow  # ~1-2 min on 2 shared cores: every message starts a fresh ClientApp process (torch import)
def test_cli_deployment_fedpte_superlink_two_supernodes_completes_a_round(capsys):
    pytest.importorskip("flwr")
    from training.cli import main

    work = Path(tempfile.mkdtemp(prefix="fpd", dir="/tmp"))  # short: Flower's socket paths
    try:
        rc = main(["fed", "run", "--config", str(QUICK), "--deployment", "--rounds", "1", "--quiet",
                   "--workdir", str(work), "--set", "dataset.n_train=80", "--set", "dataset.n_test=40"])
        out = _last_json(capsys)
        logs = {p.name for p in work.glob("*.log")}
        leftovers = [d for d in Path("/proc").glob("[0-9]*")
                     if _environ_has(d, f"FLWR_HOME={work / 'flwr'}".encode())]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert rc == 0, out
    assert logs == {"superlink.log", "supernode0.log", "supernode1.log"}  # a real SuperLink + 2 SuperNodes
    assert (out["method"], out["runtime"], out["rounds_done"], out["clients"]) == ("fedpte", "deployment", 1, 2)
    assert set(out["domain_accuracy"]) == {"mnist", "usps"} and 0.0 <= out["final_accuracy"] <= 1.0
    assert set(out["prototypes"]) == {str(c) for c in range(10)}  # the ServerApp evolved prototypes from 2 nodes
    assert leftovers == []  # SuperLink, SuperNodes and Flower's detached children were terminated


def _environ_has(proc_dir: Path, entry: bytes) -> bool:
    try:
        return entry in (proc_dir / "environ").read_bytes().split(b"\0")
    except OSError:
        return False

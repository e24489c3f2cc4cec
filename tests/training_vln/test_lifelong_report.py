"""The lifelong benchmark's report: reference rows (un-adapted base, blind floor) with the standard error of the
average SR, merging keeps them (also from reports that stored only the base's), and the blind reference is what a
direct rollout of the blind policy scores."""

import json
import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
import training.vln  # noqa: E402,F401 - preloads triton's LLVM before any EGL context
from training.vln.config import VLNTrainConfig  # noqa: E402
from training.vln.lifelong import LifelongConfig, evaluate_blind, prepare_data  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import lifelong_vln as bench  # noqa: E402


class _T:
    def __init__(self, name: str) -> None:
        self.name = name


def _result(final_sr: list[float]) -> dict:
    T = len(final_sr)
    mat = [[final_sr[t] if k == T - 1 or t == k else None for t in range(T)] for k in range(T)]
    avg = sum(final_sr) / T
    return {"final": {"sr": final_sr}, "avg": {"sr": avg, "spl": avg / 2, "osr": avg},
            "forgetting": {"sr": {"relative": 0.1, "absolute": 0.05}}, "unseen": {"sr": 0.25},
            "routing_acc": None, "adapter_params": 1234, "seconds": 1.0, "matrices": {"sr": mat}}


def _on(srs: dict[str, float]) -> dict:
    return {k: {"sr": v, "spl": v / 2, "osr": v, "ne": 1.0} for k, v in srs.items()}


def test_standard_error_of_the_average_sr() -> None:
    assert bench.sr_se([0.5, 0.5], 4) == pytest.approx(math.sqrt(2 * 0.25 / 4) / 2)
    assert bench.sr_se([0.0, 1.0], 10) == 0.0  # all-or-nothing tasks have no binomial spread
    assert bench.sr_se([0.2], 100) == pytest.approx(0.04)


def test_table_has_reference_rows_and_standard_errors() -> None:
    tasks, unseen = [_T("S0-normal"), _T("S1-low_light")], [_T("S1-normal")]
    refs = {"base": _on({"S0-normal": 0.5, "S1-low_light": 0.0, "S1-normal": 0.25}),
            "blind": _on({"S0-normal": 0.25, "S1-low_light": 0.25, "S1-normal": 0.0})}
    md = bench.table({"seq_lora": _result([0.5, 0.5])}, tasks, unseen, refs, n_eval=4, blind_steps=6)
    rows: dict[str, str] = {}  # the first table's row of each name (the per-task table repeats the names)
    for line in md.splitlines():
        if line.startswith("| "):
            rows.setdefault(line.split(" | ")[0].strip("| "), line)
    assert "| seq_lora | 0.50 ± 0.18 |" in md
    base = rows["base, no adaptation"].split(" | ")
    assert base[1] == "0.25 ± 0.12" and base[6] == "0.25"  # average over the sequence; unseen separately
    assert rows["blind: forward 6 then stop"].split(" | ")[1].startswith("0.25")
    # the per-task table lists the references' SR in the order of learning
    assert md.splitlines()[-1] == "| blind: forward 6 then stop | 0.25 | 0.25 |"


def test_merge_keeps_reference_rows(tmp_path) -> None:
    names = {"tasks": ["S0-normal", "S1-low_light"], "unseen": ["S1-normal"], "config": {"eval_per_task": 4}}
    on = _on({"S0-normal": 0.5, "S1-low_light": 0.0, "S1-normal": 0.25})
    old = {**names, "results": {"seq_lora": _result([0.5, 0.0])}, "seconds": 5,
           "base_navigator": {"on_tasks": on}}  # a report written before the references existed
    new = {**names, "results": {}, "seconds": 3, "references": {"blind": on}}
    paths = []
    for i, r in enumerate((old, new)):
        paths.append(str(tmp_path / f"r{i}.json"))
        Path(paths[-1]).write_text(json.dumps(r))
    assert bench.merge(paths, tmp_path / "out") == 0
    merged = json.loads((tmp_path / "out" / "lifelong_vln.json").read_text())
    assert set(merged["references"]) == {"base", "blind"} and set(merged["results"]) == {"seq_lora"}
    md = (tmp_path / "out" / "lifelong_vln.md").read_text()
    assert "| base, no adaptation | 0.25 ± 0.12 |" in md and "| blind: forward 6 then stop |" in md


def test_blind_reference_is_a_direct_rollout(tmp_path) -> None:
    from agents.core.baselines import ForwardPolicy
    from sim import metrics
    from sim.nav.evaluate import run_episode
    from training.vln.navigator import make_env

    base = VLNTrainConfig(image_size=32, n_scenes=1, episodes_per_scene=1, eval_per_scene=1, min_distance=1.5,
                          max_distance=3.0, same_room=True, max_steps=12, cache_dir=str(tmp_path),
                          agent={"num_history": 0, "num_future_steps": 3})
    cfg = LifelongConfig(base=base, n_scenes=1, conditions=["normal", "low_light"], n_unseen=0, train_per_task=1,
                         eval_per_task=3, blind_forward_steps=4)
    tasks, _ = cfg.tasks()
    data = prepare_data(cfg, tasks)
    got = evaluate_blind(cfg, tasks, data)
    for t in tasks:
        d = data[t.index]
        env = make_env(base, t.condition, d.eval_episodes, d.eval_gts)
        try:
            rows = [run_episode(env, ForwardPolicy(4), i) for i in range(len(d.eval_episodes))]
        finally:
            env.close()
        want = metrics.aggregate(rows)
        assert got[t.name]["sr"] == pytest.approx(want["sr"]) and got[t.name]["ne"] == pytest.approx(want["ne"])
        # 4 forward moves of 0.25 m from a start >= 1.5 m away leave the agent at least 0.5 m from the goal
        assert got[t.name]["ne"] >= 0.5 - 1e-6
    with pytest.raises(ValueError, match="blind_forward_steps"):
        LifelongConfig(base=base, n_scenes=1, n_unseen=0, blind_forward_steps=0)


def test_merge_refuses_runs_rendered_differently(tmp_path) -> None:
    names = {"tasks": ["S0-normal"], "unseen": [], "config": {"eval_per_task": 4}, "seconds": 1,
             "references": {}}
    paths = []
    for i, phys in enumerate((True, False)):
        paths.append(str(tmp_path / f"r{i}.json"))
        Path(paths[-1]).write_text(json.dumps({**names, "results": {}, "physical_conditions": phys}))
    with pytest.raises(ValueError, match="physical_conditions"):
        bench.merge(paths, tmp_path / "out")
    for i, cfg in enumerate(({"eval_per_task": 4, "lr": 1e-3, "methods": ["tuka_dkil"]},
                             {"eval_per_task": 4, "lr": 3e-3, "methods": ["seq_lora"]})):
        Path(paths[i]).write_text(json.dumps({**names, "results": {}, "config": cfg}))
    with pytest.raises(ValueError, match="r1.json: runs to merge must share their settings .* differ in lr"):
        bench.merge(paths, tmp_path / "out")
    # a report that predates a field merges with one holding the field's default, not with another value
    Path(paths[0]).write_text(json.dumps({**names, "results": {"seq_lora": _result([0.5])},
                                          "config": {"eval_per_task": 4}}))
    for value, ok in (("diagonal", True), ("pair", False)):
        Path(paths[1]).write_text(json.dumps({**names, "results": {"tuka_dkil": _result([0.25])},
                                              "config": {"eval_per_task": 4, "dkil_core_fisher": value}}))
        if ok:
            assert bench.merge(paths, tmp_path / "out") == 0
        else:
            with pytest.raises(ValueError, match="differ in dkil_core_fisher"):
                bench.merge(paths, tmp_path / "out")
    Path(paths[1]).write_text('{"tasks": ["S0-normal"]')
    with pytest.raises(ValueError, match="r1.json: unreadable JSON"):
        bench.merge(paths, tmp_path / "out")


def test_camera_only_tasks_keep_the_scene_lit(tmp_path, monkeypatch) -> None:
    """``physical_conditions=False`` renders a task's condition as its camera model on the normally lit scene: the
    night frame is then brighter than with the night lights too, the cached base's key does not move for the
    default, and the flag is validated."""
    import dataclasses

    from training.vln.navigator import make_env, make_episodes

    base = VLNTrainConfig(image_size=32, n_scenes=1, episodes_per_scene=2, eval_per_scene=1, min_distance=1.5,
                          max_distance=3.0, same_room=True, max_steps=12, cache_dir=str(tmp_path),
                          agent={"num_history": 0, "num_future_steps": 3})
    camera = dataclasses.replace(base, physical_conditions=False)
    assert VLNTrainConfig(**{**dataclasses.asdict(base), "physical_conditions": True}).fingerprint() == \
        base.fingerprint() != camera.fingerprint()
    key = base.fingerprint()
    before = dataclasses.asdict(base)  # a config written before the field existed hashes to the same key
    before.pop("physical_conditions")
    with monkeypatch.context() as m:
        m.setattr(VLNTrainConfig, "to_dict", lambda self: dict(before))
        assert base.fingerprint() == key
    eps, gts = make_episodes(base, "train")
    means = {}
    for name, c in (("physical", base), ("camera", camera)):
        env = make_env(c, "low_light", eps, gts)
        try:
            assert env.config.physical_conditions is c.physical_conditions
            means[name] = sum(float(env.reset(options={"episode_index": i})[0]["rgb"].mean())
                              for i in range(len(eps)))
        finally:
            env.close()
    assert means["camera"] > 1.2 * means["physical"]
    with pytest.raises(ValueError, match="physical_conditions"):
        VLNTrainConfig(physical_conditions="no")


def test_routing_cell_splits_scene_and_environment() -> None:
    r = _result([0.5])
    assert bench.routing_cell(r) == "-"
    r.update(routing_acc=0.25, routing_scene_acc=0.5, routing_env_acc=1.0)
    assert bench.routing_cell(r) == "0.25 (0.50 / 1.00)"
    r.pop("routing_env_acc")  # a report written before the split: the joint figure alone
    assert bench.routing_cell(r) == "0.25"
    md = bench.table({"tuka_dkil": {**r, "routing_env_acc": 1.0}}, [_T("S0-normal")], [])
    assert "| 0.25 (0.50 / 1.00) |" in md and "routing acc. (scene / env" in md
    r.update(routing_env_acc=1.0, routing_scene_acc_seen=0.75, routing_env_acc_seen=1.0, routing_scene_acc_unseen=0.0,
             routing_env_acc_unseen=0.5)  # a run with unseen pairs: the scene part on seen tasks and unseen pairs
    assert bench.routing_cell(r) == "0.25 (0.50 / 1.00); seen 0.75 / 1.00, unseen 0.00 / 0.50"
    r.update(routing_scene_acc_unseen=None, routing_env_acc_unseen=None)  # no unseen pairs
    assert bench.routing_cell(r) == "0.25 (0.50 / 1.00); seen 0.75 / 1.00"


def test_routing_accuracy_is_joint_and_per_kind() -> None:
    from training.vln.routing import routing_accuracy

    got = routing_accuracy([(0, 1), (1, 1), (1, 1), (0, 0)], (0, 1))
    assert got == {"routing_acc": 0.25, "routing_scene_acc": 0.5, "routing_env_acc": 0.75}
    assert routing_accuracy([[2, 0]], [2, 0])["routing_acc"] == 1.0  # lists and tuples compare alike


def test_routing_accuracies_are_collected_per_kind() -> None:
    from training.vln.routing import ROUTING_KEYS, add_routing

    acc = {k: [] for k in ROUTING_KEYS}
    add_routing(acc, {"sr": 0.5})  # an un-routed method's metrics add nothing
    add_routing(acc, {"routing_acc": 0.5, "routing_scene_acc": 0.5, "routing_env_acc": 1.0})
    add_routing(acc, {"routing_acc": 0.0, "routing_scene_acc": 0.25, "routing_env_acc": 0.0})
    assert acc == {"routing_acc": [0.5, 0.0], "routing_scene_acc": [0.5, 0.25], "routing_env_acc": [1.0, 0.0]}


def test_tuka_ranks_flag_is_parsed_and_checked() -> None:
    import argparse

    p = argparse.ArgumentParser()
    assert bench._ranks(p, "8,8,4,16") == (8, 8, 4, 16)
    for bad in ("8,8,4", "8,8,4,0", "8,8,x,4", ""):
        with pytest.raises(SystemExit):
            bench._ranks(p, bad)


def test_report_has_oracle_expert_rows_and_the_offline_table() -> None:
    import numpy as np

    from training.vln.offline import summarise

    tasks = [_T("S0-normal"), _T("S0-low_light")]
    tuka = _result([0.0, 0.5])
    tuka["oracle_route"] = {"final": {"sr": [0.25, 0.75]}, "avg": {"sr": 0.5, "spl": 0.25, "osr": 0.5}}
    nan = float("nan")
    tuka["offline"] = summarise({"token_acc": np.array([[0.8, nan], [0.6, 0.9]]),
                                 "answer_acc": np.array([[0.4, nan], [0.2, 0.5]]),
                                 "loss": np.array([[0.5, nan], [0.9, 0.4]])})
    refs = {"base": {"S0-normal": {"sr": 0.5, "spl": 0.2, "osr": 0.5, "token_acc": 0.7, "answer_acc": 0.3, "loss": 0.6},
                     "S0-low_light": {"sr": 0.0, "spl": 0.0, "osr": 0.0, "token_acc": 0.5, "answer_acc": 0.1,
                                      "loss": 0.8}}}
    md = bench.report_md({"tuka_dkil": tuka, "seq_lora": _result([0.5, 0.5])}, tasks, [], refs, 4, 6)
    lines = md.splitlines()
    assert any(x.startswith("| tuka_dkil, oracle experts (no routing) | 0.50 ± ") for x in lines)
    assert "| tuka_dkil, oracle experts | 0.25 | 0.75 |" in lines
    tuka["oracle_route"]["unseen"] = {"sr": 0.375, "spl": 0.25, "osr": 0.5}  # the unseen pairs' own experts
    row = next(x for x in bench.report_md({"tuka_dkil": tuka}, tasks, [], refs, 4, 6).splitlines()
               if x.startswith("| tuka_dkil, oracle experts (no routing) |"))
    assert row.split(" | ")[6] == "0.38"  # the unseen SR column
    offline = next(x for x in lines if x.startswith("| tuka_dkil | 0.850 |")).split(" | ")
    # token acc. right after 0.85, final 0.75, F 0.25; whole answers 0.45, 0.35, 0.5; loss 0.45, 0.65, rise 0.4
    assert offline[1:] == ["0.850", "0.750", "0.250", "0.450", "0.350", "0.500", "0.450", "0.650", "0.400 |"]
    assert "| base, no adaptation | - | 0.600 | - | - | 0.200 | - | - | 0.700 | - |" in lines
    assert "| tuka_dkil | 0.800 -> 0.600 | 0.900 -> 0.900 |" in lines
    assert not any(x.startswith("| seq_lora | 0.") and "->" in x for x in lines)  # no offline figures, no row


def test_summary_line_carries_routing_parts_and_the_composed_unseen_sr() -> None:
    tasks = [_T("S0-normal"), _T("S1-low_light")]
    tuka = _result([0.5, 0.75])  # avg 0.625, routed unseen 0.25
    tuka.update(routing_acc=0.6, routing_env_acc=0.9, routing_acc_seen=0.7, routing_acc_unseen=0.4, offline=None,
                served_parity={"routes_equal": True}, oracle_route={"avg": {"sr": 0.8}, "unseen": {"sr": 0.375}})
    seq = {**_result([0.0, 0.5]), "offline": None, "oracle_route": None}
    line = bench.summary_line({"tuka_dkil": tuka, "seq_lora": seq},
                              {"base": _on({"S0-normal": 0.5, "S1-low_light": 0.0})}, tasks)
    assert line["avg_sr"] == {"tuka_dkil": 0.625, "seq_lora": 0.25} and line["unseen_sr"]["tuka_dkil"] == 0.25
    assert (line["routing_acc"], line["routing_acc_seen"], line["routing_acc_unseen"]) == (0.6, 0.7, 0.4)
    assert line["oracle_route_sr"] == {"tuka_dkil": 0.8}  # routed methods only
    assert line["oracle_route_unseen_sr"] == {"tuka_dkil": 0.375}  # composed experts, not the routed 0.25
    assert line["reference_avg_sr"] == {"base": 0.25} and line["served_parity"] == {"routes_equal": True}
    del tuka["oracle_route"]["unseen"]  # a run without unseen pairs
    assert bench.summary_line({"tuka_dkil": tuka}, {}, tasks)["oracle_route_unseen_sr"] == {}

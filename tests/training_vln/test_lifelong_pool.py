"""scripts/lifelong_pool.py: lifelong reports pooled over task orders (SR, binomial SE, lead over a reference on the
orders both ran), method settings as their own rows, and refusal of reports from another protocol."""

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import lifelong_pool as pool  # noqa: E402

N = 30


def _report(path: Path, order: int, results: dict[str, list[float]], base: list[float], **config) -> str:
    tasks = [f"S{i % 2}-{'normal' if i < 2 else 'low_light'}" for i in range(len(base))][::(1 if order % 2 else -1)]
    out = {}
    for method, final in results.items():
        T = len(final)
        right_after = [min(1.0, v + 0.2) for v in final]
        mat = [[right_after[t] if t == k else None for t in range(T)] for k in range(T - 1)] + [final]
        out[method] = {"matrices": {"sr": mat}, "forgetting": {"sr": {"relative": 1 - final[0] / right_after[0]}}}
    cfg = {"order_seed": order, "eval_per_task": N, "methods": list(results), **config}
    path.write_text(json.dumps({"tasks": tasks, "config": cfg, "results": out,
                                "references": {"base": {t: {"sr": v} for t, v in zip(tasks, base)}}}))
    return str(path)


def test_pooled_sr_se_and_lead_on_shared_orders(tmp_path, capsys):
    seq1, seq2 = [0.1, 0.2, 0.3, 0.4], [0.2, 0.2, 0.2, 0.2]
    tuka1, tuka2 = [0.5, 0.4, 0.3, 0.2], [0.6, 0.6, 0.5, 0.5]
    memo = [0.7, 0.7, 0.7, 0.7]  # tuka with another routing memory: its own row, on order 1 only
    paths = [_report(tmp_path / "a.json", 1, {"seq_lora": seq1}, [0.2] * 4),
             _report(tmp_path / "b.json", 1, {"tuka_dkil": tuka1}, [0.2] * 4, routing_memory=2048),
             _report(tmp_path / "c.json", 2, {"seq_lora": seq2, "tuka_dkil": tuka2}, [0.4] * 4, routing_memory=2048),
             _report(tmp_path / "d.json", 1, {"tuka_dkil": memo}, [0.2] * 4, routing_memory=64)]
    assert pool.main([*paths, "--out", str(tmp_path / "out")]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    s = json.loads((tmp_path / "out" / "lifelong_pool.json").read_text())
    assert (tmp_path / "out" / "lifelong_pool.png").stat().st_size > 1000
    assert set(s["methods"]) == {"seq_lora", "tuka_dkil[routing_memory=2048]", "tuka_dkil[routing_memory=64]"}
    t, q, m = (s["methods"][k] for k in ("tuka_dkil[routing_memory=2048]", "seq_lora", "tuka_dkil[routing_memory=64]"))
    assert t["sr"] == pytest.approx(sum(tuka1 + tuka2) / 8) == last["avg_sr"]["tuka_dkil[routing_memory=2048]"]
    se = lambda ps: math.sqrt(sum(p * (1 - p) / N for p in ps)) / len(ps)  # noqa: E731
    assert t["se"] == pytest.approx(se(tuka1 + tuka2)) and q["se"] == pytest.approx(se(seq1 + seq2))
    lead = t["vs_reference"]
    assert lead["orders"] == [1, 2]
    assert lead["diff"] == pytest.approx(sum(tuka1 + tuka2) / 8 - sum(seq1 + seq2) / 8)
    assert lead["z"] == pytest.approx(lead["diff"] / math.hypot(se(tuka1 + tuka2), se(seq1 + seq2)))
    # a row on one order is compared on that order only, not against the reference's pooled SR
    assert m["vs_reference"]["orders"] == [1] and m["vs_reference"]["diff"] == pytest.approx(0.7 - 0.25)
    assert "vs_reference" not in q
    assert t["f_sr_by_order"] == {"1": pytest.approx(1 - 0.5 / 0.7), "2": pytest.approx(1 - 0.6 / 0.8)}
    assert s["base"]["sr"] == pytest.approx(0.3) and s["base"]["sr_by_order"] == {"1": 0.2, "2": 0.4}
    # every row against the un-adapted base on its own orders (unpaired: these reports kept no outcomes)
    vb = t["vs_base"]
    assert vb["orders"] == [1, 2] and vb["paired"] is False
    assert vb["diff"] == pytest.approx(sum(tuka1 + tuka2) / 8 - 0.3)
    assert vb["se"] == pytest.approx(math.hypot(se(tuka1 + tuka2), se([0.2] * 4 + [0.4] * 4)))
    assert m["vs_base"]["orders"] == [1] and m["vs_base"]["diff"] == pytest.approx(0.5)


def test_reports_from_another_protocol_or_twice_are_refused(tmp_path, capsys):
    a = _report(tmp_path / "a.json", 1, {"seq_lora": [0.1] * 4}, [0.2] * 4)
    b = _report(tmp_path / "b.json", 2, {"seq_lora": [0.1] * 4}, [0.2] * 4, steps_per_task=5)
    with pytest.raises(SystemExit):
        pool.main([a, b])
    err = capsys.readouterr().err
    assert "must share the protocol" in err and "in steps_per_task" in err, err
    scored = json.loads(Path(b).read_text())  # same config, but successes counted within another distance
    scored["config"].pop("steps_per_task")
    Path(b).write_text(json.dumps({**scored, "success_distance": 2.0}))
    with pytest.raises(SystemExit):
        pool.main([a, b])
    assert "success_distance (unset against 2.0)" in capsys.readouterr().err
    c = _report(tmp_path / "c.json", 1, {"seq_lora": [0.3] * 4}, [0.2] * 4)
    with pytest.raises(SystemExit):
        pool.main([a, c])
    assert "seq_lora on order 1 appears twice" in capsys.readouterr().err
    d = _report(tmp_path / "d.json", 2, {"ewc_lora": [0.1] * 4}, [0.2] * 4)
    with pytest.raises(SystemExit):
        pool.main([a, d, "--reference", "oracle"])
    assert "--reference 'oracle' is not one of ['ewc_lora', 'seq_lora']" in capsys.readouterr().err


def test_a_report_without_a_final_sr_row_is_refused_by_name(tmp_path, capsys):
    a = _report(tmp_path / "a.json", 1, {"seq_lora": [0.1] * 4}, [0.2] * 4)
    rep = json.loads(Path(a).read_text())
    rep["results"]["seq_lora"]["matrices"]["sr"][-1][2] = None  # a task never evaluated at the end
    Path(a).write_text(json.dumps(rep))
    with pytest.raises(SystemExit):
        pool.main([a])
    assert f"{a}: seq_lora has no complete final SR row" in capsys.readouterr().err
    # a perfect score on both sides has no spread: the lead is reported without a z, not a crash
    b = _report(tmp_path / "b.json", 2, {"seq_lora": [1.0] * 4, "ewc_lora": [1.0] * 4}, [0.2] * 4)
    assert pool.main([b]) == 0
    assert "+0.00 ± 0.00 (n/a SE) on [2]" in capsys.readouterr().out


def _with_outcomes(path: str, outcomes: dict[str, list[list[int]]], base: list[list[int]] | None = None) -> str:
    """Add per-episode outcomes to a report written by ``_report`` (final SRs set from them), and the base's."""
    rep = json.loads(Path(path).read_text())
    for method, tasks in outcomes.items():
        rep["results"][method]["final_success"] = tasks
        rep["results"][method]["matrices"]["sr"][-1] = [sum(t) / len(t) for t in tasks]
    for name, episodes in zip(rep["tasks"], base or []):
        rep["references"]["base"][name] = {"sr": sum(episodes) / len(episodes), "success": episodes}
    Path(path).write_text(json.dumps(rep))
    return path


def test_paired_diff_by_hand_and_against_the_unpaired_se():
    from lifelong_report import paired_diff, sr_se

    d, se = paired_diff([[1, 1, 0, 0]], [[1, 0, 0, 0]])  # differences 0, 1, 0, 0: variance 3/16
    assert d == pytest.approx(0.25) and se == pytest.approx(math.sqrt(3 / 16 / 4))
    assert paired_diff([[1, 0, 1], [0, 0, 1]], [[1, 0, 1], [0, 0, 1]]) == (0.0, 0.0)
    # against a policy that solves nothing, pairing changes nothing: the unpaired (binomial) SE, tasks of any size
    a = [[1] * 10 + [0] * 20, [1] * 3 + [0] * 7]
    d, se = paired_diff(a, [[0] * 30, [0] * 10])
    assert d == pytest.approx((1 / 3 + 0.3) / 2)
    assert se == pytest.approx(math.sqrt((1 / 3) * (2 / 3) / 30 + 0.3 * 0.7 / 10) / 2)
    assert se == pytest.approx(math.hypot(sr_se([1 / 3], 30), sr_se([0.3], 10)) / 2)
    # two policies that solve nearly the same episodes: the paired SE is far below the unpaired one
    a = [[1] * 10 + [0] * 20, [1] * 15 + [0] * 15]
    b = [[1] * 8 + [0] * 22, [1] * 12 + [0] * 18]
    d, se = paired_diff(a, b)
    assert d == pytest.approx((2 / 30 + 3 / 30) / 2)
    assert se < 0.5 * math.hypot(sr_se([1 / 3, 0.5], 30), sr_se([8 / 30, 0.4], 30))
    with pytest.raises(ValueError, match="same tasks and episodes"):
        paired_diff([[1, 0]], [[1, 0, 1]])


def test_the_lead_is_paired_where_both_reports_kept_every_episode(tmp_path, capsys):
    n = 30
    seq = [[1] * 6 + [0] * 24, [1] * 9 + [0] * 21, [1] * 3 + [0] * 27, [1] * 12 + [0] * 18]
    tuka = [[1] * 9 + [0] * 21, [1] * 12 + [0] * 18, [1] * 3 + [1] + [0] * 26, [1] * 15 + [0] * 15]
    a = _with_outcomes(_report(tmp_path / "a.json", 1, {"seq_lora": [0.0] * 4}, [0.2] * 4), {"seq_lora": seq},
                       base=seq)  # the base solves what sequential LoRA solves: paired, their difference has no noise
    b = _with_outcomes(_report(tmp_path / "b.json", 1, {"tuka_dkil": [0.0] * 4}, [0.2] * 4), {"tuka_dkil": tuka})
    c = _report(tmp_path / "c.json", 2, {"seq_lora": [0.2] * 4, "tuka_dkil": [0.4] * 4}, [0.2] * 4)
    assert pool.main([a, b, "--out", str(tmp_path / "one")]) == 0
    lead = json.loads((tmp_path / "one" / "lifelong_pool.json").read_text())["methods"]["tuka_dkil"]["vs_reference"]
    # tuka solves every episode seq solves plus 3, 3, 1, 3 more: per task the differences are 0/1 with p = k / 30
    var = sum((k / n) * (1 - k / n) / n for k in (3, 3, 1, 3))
    assert lead["paired"] is True and lead["paired_orders"] == [1]
    assert lead["diff"] == pytest.approx((3 + 3 + 1 + 3) / 30 / 4)
    assert lead["se"] == pytest.approx(math.sqrt(var) / 4) and lead["z"] == pytest.approx(lead["diff"] / lead["se"])
    assert "SE, paired) on [1]" in capsys.readouterr().out
    one_json = json.loads((tmp_path / "one" / "lifelong_pool.json").read_text())
    assert one_json["base"]["sr"] == pytest.approx((6 + 9 + 3 + 12) / 30 / 4)  # the SRs that go with the outcomes
    s1 = one_json["methods"]
    assert s1["seq_lora"]["vs_base"] == {"orders": [1], "diff": 0.0, "se": 0.0, "z": None, "paired": True,
                                         "paired_orders": [1]}
    # b.json's base row (same order, no outcomes) does not replace a.json's, which has them
    assert s1["tuka_dkil"]["vs_base"]["paired"] and s1["tuka_dkil"]["vs_base"]["se"] == pytest.approx(lead["se"])
    assert pool.main([b, a, "--out", str(tmp_path / "ba")]) == 0
    s2 = json.loads((tmp_path / "ba" / "lifelong_pool.json").read_text())["methods"]
    assert s2["tuka_dkil"]["vs_base"] == s1["tuka_dkil"]["vs_base"]
    # order 2's report kept no outcomes: paired on order 1, binomial on order 2, the variances added
    assert pool.main([a, b, c, "--out", str(tmp_path / "two")]) == 0
    lead2 = json.loads((tmp_path / "two" / "lifelong_pool.json").read_text())["methods"]["tuka_dkil"]["vs_reference"]
    assert lead2["paired"] is False and lead2["paired_orders"] == [1] and lead2["orders"] == [1, 2]
    assert lead2["diff"] == pytest.approx((4 * lead["diff"] + 4 * 0.2) / 8)
    assert lead2["se"] == pytest.approx(math.sqrt(var + 4 * (0.4 * 0.6 + 0.2 * 0.8) / N) / 8)
    assert "SE, paired on [1]) on [1, 2]" in capsys.readouterr().out
    # outcomes that do not give the report's own final SR are refused by name
    rep = json.loads(Path(a).read_text())
    rep["results"]["seq_lora"]["matrices"]["sr"][-1][0] = 0.5
    Path(a).write_text(json.dumps(rep))
    with pytest.raises(SystemExit):
        pool.main([a, b])
    assert f"{a}: seq_lora's final_success does not match its final SR row" in capsys.readouterr().err
    rep["results"]["seq_lora"]["matrices"]["sr"][-1][0] = 0.2  # mended; now the base's outcomes go wrong
    rep["references"]["base"][rep["tasks"][1]]["success"] = [1] * 30
    Path(a).write_text(json.dumps(rep))
    with pytest.raises(SystemExit):
        pool.main([a, b])
    assert f"{a}: base's success does not match its final SR row" in capsys.readouterr().err

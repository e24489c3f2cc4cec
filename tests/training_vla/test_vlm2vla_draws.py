"""scripts/vlm2vla_draws.py: combining benchmark draws into one table, plot and JSON line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "vlm2vla_draws.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def _draw(tmp: Path, name: str, lang: tuple, at: tuple, blind: float, settings: dict | None = None) -> Path:
    def method(ret, succ, constr=None):
        m = {"retention": ret, "success": succ, "malformed_rate": 0.01, "episodes": 50, "vqa": {"accuracy": 0.6 * ret}}
        if constr is not None:
            m["constrained"] = {"success": constr}
        return m

    res = {"mode": "full", "seed": int(name[1:]), "settings": settings or {"ft_steps": 2000, "episodes": 50},
           "vqa_pretrained": {"accuracy": 0.6}, "vqa_majority_baseline": 0.4, "blind_replay": {"success": blind},
           "methods": {"VLM2VLA": method(*lang), "VLM2VLA-AT": method(*at), "binned (OpenVLA-style)": method(0.3, 0.0)}}
    run = tmp / name / "full"
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps(res))
    return tmp / name


def test_draws_are_combined(tmp_path):
    a = _draw(tmp_path, "s0", (0.7, 0.30, 0.30), (0.6, 0.16, 0.2), 0.40)
    b = _draw(tmp_path, "s1", (0.5, 0.50, 0.40), (0.8, 0.20, 0.2), 0.38)
    res = _run(str(a), str(b / "full" / "results.json"), "--md", str(tmp_path / "t.md"),  # labelled by seed
               "--png", str(tmp_path / "p.png"))
    assert res.returncode == 0, res.stderr
    line = json.loads(res.stdout.strip().splitlines()[-1])
    assert line["draws"] == 2 and line["retention"]["VLM2VLA"] == pytest.approx(0.6)
    assert line["success"]["VLM2VLA-AT"] == pytest.approx(0.18) and line["blind"] == pytest.approx(0.39)
    assert line["lang_over_at_retention"] == 1 and line["lang_over_at_success"] == 2
    assert line["above_blind"] == {"VLM2VLA": 1, "VLM2VLA-AT": 0, "binned (OpenVLA-style)": 0}
    md = (tmp_path / "t.md").read_text()
    assert "| method | measure | draw 0 | draw 1 | mean +- sd |" in md
    assert "| VLM2VLA | VQA retained | 70% | 50% | 60% +- 14 |" in md
    # accuracy 0.42 / 0.30 against the pre-trained 0.6 and the majority answers' 0.4: (acc - 0.4) / 0.2
    assert "| VLM2VLA | VQA skill above blind kept | 10% | -50% | -20% +- 42 |" in md
    assert "| constant answers (majority per kind) | VQA retained | 67% | 67% | 67% +- 0 |" in md  # 0.4 / 0.6
    assert line["skill_retained"]["VLM2VLA-AT"] == pytest.approx(((0.36 - 0.4) + (0.48 - 0.4)) / 0.2 / 2)
    assert "- VLM2VLA above the blind floor (free) in 1 of 2 draws" in md  # 0.30 < 0.40, 0.50 > 0.38
    assert "| VLM2VLA | Lift success (constrained) | 0.30 | 0.40 |" in md
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_mixed_settings_and_bad_files_are_refused(tmp_path):
    a = _draw(tmp_path, "s0", (0.7, 0.3), (0.6, 0.1), 0.4)
    b = _draw(tmp_path, "s1", (0.7, 0.3), (0.6, 0.1), 0.4, settings={"ft_steps": 500, "episodes": 50})
    res = _run(str(a), str(b))
    assert res.returncode == 2 and "settings differ in ['ft_steps']" in res.stderr
    assert _run(str(a), str(b), "--allow-mixed").returncode == 0
    bad = tmp_path / "bad.json"
    bad.write_text('{"mode": "quick"}')
    res = _run(str(a), str(bad))
    assert res.returncode == 2 and "not the results of a full" in res.stderr
    assert _run(str(a), "--labels", "x,y").returncode == 2
    res = _run(str(a), str(a), "--labels", "x,y")  # the same draw twice under two labels
    assert res.returncode == 2 and "the same seed" in res.stderr
    part = tmp_path / "part.json"
    part.write_text(json.dumps({"mode": "full", "methods": {"VLM2VLA": {"success": 0.1}}}))
    res = _run(str(a), str(part))
    assert res.returncode == 2 and "incomplete results (missing settings, vqa_pretrained" in res.stderr
    assert "usage" in _run("--help").stdout


def _split(tmp: Path, src: Path, name: str, methods: list[str], **change) -> Path:
    """A copy of the draw ``src`` holding only ``methods`` (a run with ``--methods``), with fields changed."""
    res = json.loads((src / "full" / "results.json").read_text())
    res["methods"] = {m: v for m, v in res["methods"].items() if m in methods}
    res.update(change)
    (tmp / name / "full").mkdir(parents=True)
    (tmp / name / "full" / "results.json").write_text(json.dumps(res))
    return tmp / name


def test_runs_of_one_draw_are_joined_with_plus(tmp_path):
    whole = _draw(tmp_path, "s0", (0.7, 0.30, 0.30), (0.6, 0.16, 0.2), 0.40)
    lang = _split(tmp_path, whole, "lang", ["VLM2VLA"])
    rest = _split(tmp_path, whole, "rest", ["VLM2VLA-AT", "binned (OpenVLA-style)"])
    joined, ref = _run(f"{lang}+{rest}"), _run(str(whole))
    assert joined.returncode == 0, joined.stderr
    assert joined.stdout == ref.stdout  # the same table and line as the draw run in one process
    # not one draw: another seed, another pre-trained model, a method twice
    for bad, why in ((_split(tmp_path, whole, "seed", ["VLM2VLA-AT"], seed=1), "seed"),
                     (_split(tmp_path, whole, "pre", ["VLM2VLA-AT"], vqa_pretrained={"accuracy": 0.5}),
                      "pre-trained model"),
                     (lang, "VLM2VLA already in this draw")):
        res = _run(f"{lang}+{bad}")
        assert res.returncode == 2 and why in res.stderr, res.stderr


def test_draws_missing_a_method_count_only_the_draws_that_have_it(tmp_path):
    a = _draw(tmp_path, "s0", (0.7, 0.50, 0.50), (0.6, 0.16, 0.2), 0.40)
    b = _draw(tmp_path, "s1", (0.5, 0.50, 0.40), (0.8, 0.20, 0.2), 0.38)
    b_lang = _split(tmp_path, b, "s1_lang", ["VLM2VLA"])  # AT and binned not run on this draw
    res = _run(str(a), str(b_lang), "--md", str(tmp_path / "t.md"))
    assert res.returncode == 0, res.stderr
    line = json.loads(res.stdout.strip().splitlines()[-1])
    assert line["paired_draws"] == 1 and line["lang_over_at_retention"] == 1
    md = (tmp_path / "t.md").read_text()
    assert "- VLM2VLA above the blind floor (free) in 2 of 2 draws" in md
    assert "- VLM2VLA-AT above the blind floor (free) in 0 of 1 draws" in md
    assert "retains more VQA than VLM2VLA-AT in 1 of 1 draws and succeeds more often in 1 of 1" in md


def test_sign_test_by_hand():
    sys.path.insert(0, str(SCRIPT.parent))
    from vlm2vla_draws import sign_test

    assert sign_test(6, 0) == pytest.approx(2 / 64)  # all six discordant pairs one way
    assert sign_test(3, 3) == 1.0 and sign_test(0, 0) == 1.0
    assert sign_test(1, 4) == pytest.approx(2 * (1 + 5) / 32)  # P(X <= 1) of Binomial(5, 1/2), both tails
    assert sign_test(4, 1) == sign_test(1, 4)


def test_lifts_are_compared_episode_by_episode(tmp_path):
    """Draws that record which episodes each rollout lifted get a paired comparison per draw and per episode."""
    runs = []
    for i, (lang, at, blind) in enumerate((([1, 2, 3, 4], [1], [1, 2, 5, 6, 7]), ([1, 2], [3], [1, 2, 3]))):
        p = _draw(tmp_path, f"s{i}", (0.7, len(lang) / 50), (0.6, len(at) / 50), len(blind) / 50)
        f = p / "full" / "results.json"
        res = json.loads(f.read_text())
        res["methods"]["VLM2VLA"]["succeeded"] = lang
        res["methods"]["VLM2VLA-AT"]["succeeded"] = at
        res["blind_replay"].update(succeeded=blind, episodes=50)
        f.write_text(json.dumps(res))
        runs.append(str(p))
    res = _run(*runs, "--md", str(tmp_path / "t.md"))
    assert res.returncode == 0, res.stderr
    line = json.loads(res.stdout.strip().splitlines()[-1])["paired_lift"]
    d = line["VLM2VLA - VLM2VLA-AT"]  # differences 3 and 1 episodes; only VLM2VLA 3 + 2, only AT 0 + 1
    assert d["draws"] == 2 and d["episodes"] == 100 and d["mean_diff"] == 2.0
    assert d["sd_diff"] == pytest.approx(2 ** 0.5) and d["t"] == pytest.approx(2.0 / (2 ** 0.5 / 2 ** 0.5))
    assert (d["only_first"], d["only_second"]) == (5, 1) and d["sign_p"] == pytest.approx(2 * 7 / 64)
    b = line["VLM2VLA - the blind replay"]  # only VLM2VLA: {3, 4} + {}, only blind: {5, 6, 7} + {3}
    assert (b["only_first"], b["only_second"], b["mean_diff"]) == (2, 4, -1.0)
    md = (tmp_path / "t.md").read_text()
    assert ("- Lift (free), VLM2VLA against VLM2VLA-AT on the same episodes: +2.0 +- 1.4 episodes per draw (paired "
            "t = 2.0 over 2 draws); of 100 episodes 5 lifted by VLM2VLA only and 1 by VLM2VLA-AT only (exact sign "
            "test p = 0.219)") in md
    # runs without episode lists (the older ones) get no such line
    assert "episodes per draw" not in _run(*[str(_draw(tmp_path / "old", f"s{i}", (0.7, 0.3), (0.6, 0.2), 0.4))
                                             for i in range(2)]).stdout

"""The `allday` command end to end on small generated data (real MuJoCo rendering)."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from training.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ds")
    assert main(["sim", "episodes", "--scenes", "3", "--per-scene", "17", "--split", "val", "--out", str(out),
                 "--quiet"]) == 0
    return out


def test_help_everywhere():
    for argv in (["--help"], ["sim", "--help"], ["sim", "episodes", "--help"], ["sim", "eval", "--help"],
                 ["sim", "render", "--help"], ["sim", "bench", "--help"], ["demo", "--help"], ["bringup", "--help"],
                 ["train", "--help"], ["quantize", "--help"], ["export-onnx", "--help"], ["fed", "--help"],
                 ["fed", "run", "--help"], ["vla", "--help"], ["vla", "init-tiny", "--help"], ["vla", "act", "--help"],
                 ["config", "--help"], ["config", "show", "--help"]):
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args(argv)
        assert exc.value.code == 0


def test_console_script_installed():
    exe = Path(sys.executable).with_name("allday")
    res = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "sim" in res.stdout and "demo" in res.stdout


def test_episodes_are_r2r_ce_files(dataset):
    data = json.loads(gzip.open(dataset / "val" / "val.json.gz").read())
    gt = json.loads(gzip.open(dataset / "val" / "val_gt.json.gz").read())
    assert set(data) == {"episodes", "instruction_vocab"}
    ep = data["episodes"][0]
    for key in ("episode_id", "trajectory_id", "scene_id", "start_position", "start_rotation", "info", "goals",
                "instruction", "reference_path"):
        assert key in ep
    assert ep["goals"][0]["radius"] == 3.0 and "geodesic_distance" in ep["info"]
    assert len(data["episodes"]) == 51 and set(gt) == {str(e["episode_id"]) for e in data["episodes"]}
    assert {"locations", "actions", "forward_steps"} <= set(gt[str(ep["episode_id"])])


def test_oracle_is_perfect_and_random_fails(dataset, capsys):
    assert main(["sim", "eval", "--agent", "oracle", "--episodes", str(dataset), "--json", "--quiet",
                 "--size", "32", "--quality", "fast", "--no-depth"]) == 0
    oracle = _last_json(capsys.readouterr().out)
    assert oracle["episodes"] == 51
    assert oracle["sr"] == 1.0 and oracle["spl"] >= 0.95 and oracle["ne"] < 0.5 and oracle["ndtw"] > 0.99
    assert main(["sim", "eval", "--agent", "random", "--episodes", str(dataset), "--json", "--quiet", "--limit",
                 "20", "--size", "32", "--quality", "fast", "--no-depth"]) == 0
    rnd = _last_json(capsys.readouterr().out)
    assert rnd["episodes"] == 20 and rnd["sr"] <= 0.1 and rnd["ne"] > oracle["ne"] + 2.0
    assert set(rnd) >= {"ne", "sr", "osr", "spl", "ndtw", "sdtw", "tl", "episodes"}


def test_eval_with_condition_override(dataset, capsys):
    assert main(["sim", "eval", "--agent", "forward", "--episodes", str(dataset), "--json", "--quiet", "--limit",
                 "2", "--size", "32", "--condition", "scattering"]) == 0
    res = _last_json(capsys.readouterr().out)
    assert res["condition"] == "scattering" and res["episodes"] == 2


def test_render_writes_video_frames_and_plot(dataset, tmp_path, capsys):
    assert main(["sim", "render", "--episodes", str(dataset), "--index", "1", "--out", str(tmp_path),
                 "--size", "64", "--quality", "fast", "--png-every", "20"]) == 0
    files = {p.suffix for p in tmp_path.iterdir()}
    assert {".mp4", ".png"} <= files
    assert (tmp_path / "episode_1.mp4").stat().st_size > 1000
    assert (tmp_path / "episode_1_topdown.png").exists()


def test_bench_json(capsys):
    assert main(["sim", "bench", "--size", "128", "--frames", "10", "--repeats", "1", "--json"]) == 0
    res = _last_json(capsys.readouterr().out)
    assert res["size"] == 128 and res["fps"] > 0 and res["raw_fps"] > 0 and 0 < res["ratio"] < 2


def test_corrupt_episode_file_is_a_clear_error(tmp_path, capsys):
    split = tmp_path / "val"
    split.mkdir()
    (split / "val.json.gz").write_bytes(b"this is not gzip")
    assert main(["sim", "eval", "--agent", "oracle", "--episodes", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "val.json.gz" in err and "error" in err


def test_wrong_schema_is_a_clear_error(tmp_path, capsys):
    split = tmp_path / "val"
    split.mkdir()
    with gzip.open(split / "val.json.gz", "wt") as f:
        json.dump({"episodes": [{"episode_id": 1}]}, f)
    assert main(["sim", "eval", "--agent", "oracle", "--episodes", str(split), "--quiet"]) == 2
    assert "missing field" in capsys.readouterr().err


def test_foreign_scene_is_a_clear_error(dataset, tmp_path, capsys):
    from sim.core.episodes import load_split, load_vocab, save_split

    eps, gts = load_split(dataset, "val")
    eps[0].scene_id = "mp3d/zsNo4HB9uLZ/zsNo4HB9uLZ.glb"
    save_split(tmp_path, "val", eps[:1], {str(eps[0].episode_id): gts[str(eps[0].episode_id)]},
               vocab=load_vocab(dataset, "val"))
    assert main(["sim", "eval", "--agent", "oracle", "--episodes", str(tmp_path), "--quiet"]) == 2
    assert "habitat" in capsys.readouterr().err


def test_unknown_condition_rejected(dataset):
    with pytest.raises(SystemExit) as exc:
        main(["sim", "eval", "--agent", "oracle", "--episodes", str(dataset), "--condition", "foggy"])
    assert exc.value.code == 2


def test_config_show_resolves_extends_overrides_and_defaults(capsys):
    import yaml

    from training.vln.config import VLNTrainConfig

    path = ROOT / "configs" / "vln" / "search_fine_patches.yaml"
    assert main(["config", "show", "vln", "--config", str(path), "--set", "seed=3"]) == 0
    out = capsys.readouterr().out
    shown = yaml.safe_load(out)
    want = VLNTrainConfig.from_yaml(path, ["seed=3"])
    assert shown == want.to_dict() and shown["seed"] == 3 and shown["tiny"]["patch_size"] == 8
    assert shown["teacher"] == "search" and shown["dagger_steps"] == 300  # from the parent file / a default
    assert out.strip().splitlines()[-1] == f"# fingerprint (cache key): {want.fingerprint()}"
    assert main(["config", "show", "fed", "--config", str(ROOT / "configs" / "fed" / "quick.yaml")]) == 0
    assert "fingerprint" not in capsys.readouterr().out
    assert main(["config", "show", "vln", "--config", str(path), "--set", "lr=-1"]) == 2
    assert "lr must be" in capsys.readouterr().err


def test_train_pins_cpu_numerics_by_default_and_rejects_unknown_choices(capsys):
    args = build_parser().parse_args(["train", "vln", "--config", "c.yaml"])
    assert args.pin_numerics == "auto"
    assert build_parser().parse_args(["train", "vln", "--config", "c.yaml", "--pin-numerics", "none"]).pin_numerics \
        == "none"
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["train", "vln", "--config", "c.yaml", "--pin-numerics", "fast"])
    assert exc.value.code == 2 and "invalid choice: 'fast'" in capsys.readouterr().err

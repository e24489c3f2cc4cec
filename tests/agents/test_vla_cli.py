"""``allday vla init-tiny`` / ``allday vla act``: help, a real tiny model written and loaded, clear failures."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from training.cli import main


def test_help(capsys):
    for argv in (["vla", "--help"], ["vla", "init-tiny", "--help"], ["vla", "act", "--help"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 0
    out = capsys.readouterr().out
    assert "init-tiny" in out and "--instruction" in out and "--family" in out


def test_init_tiny_then_act(tmp_path, capsys):
    model = tmp_path / "tiny"
    assert main(["vla", "init-tiny", str(model), "--image-size", "32", "--patch-size", "8", "--hidden-size", "64",
                 "--layers", "2"]) == 0
    assert (model / "config.json").is_file() and (model / "allday_tiny_vlm.json").is_file()
    assert "wrote a tiny paligemma VLM" in capsys.readouterr().out
    # a non-empty dir is refused (exit 2, message names the problem)
    assert main(["vla", "init-tiny", str(model)]) == 2
    assert "not empty" in capsys.readouterr().err
    img = tmp_path / "frame.png"
    Image.fromarray(np.full((32, 32, 3), 100, np.uint8)).save(img)
    # untrained random weights write malformed text: bounded retries, then a clear failure (exit 1)
    rc = main(["vla", "act", "--model", str(model), "--image", str(img), "--instruction", "pick up the red cube",
               "--max-tries", "2"])
    out = capsys.readouterr().out
    assert rc == 1 and "no well-formed subtasks after 2 tries" in out
    # the same random model with grammar-constrained decoding: every level parses on the first try
    rc = main(["vla", "act", "--model", str(model), "--image", str(img), "--instruction", "pick up the red cube",
               "--max-tries", "1", "--constrained"])
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and res["malformed"] == 0 and res["subtasks"] and len(res["delta_m"]) == 3
    assert all(abs(v) <= 0.05 + 1e-9 for v in res["delta_m"]) and -1.0 <= res["gripper"] <= 1.0
    # bad input -> exit 2 with the field named
    big = tmp_path / "big.png"
    Image.fromarray(np.zeros((48, 48, 3), np.uint8)).save(big)
    assert main(["vla", "act", "--model", str(model), "--image", str(big), "--instruction", "lift"]) == 2
    assert "32x32" in capsys.readouterr().err
    assert main(["vla", "act", "--model", str(model), "--image", str(img), "--instruction", " "]) == 2
    assert "instruction is empty" in capsys.readouterr().err
    assert main(["vla", "act", "--model", str(tmp_path / "none"), "--image", str(img), "--instruction", "x"]) == 2

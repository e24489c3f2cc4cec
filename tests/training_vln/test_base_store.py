"""Exporting a finished base navigator and starting from it elsewhere: the fingerprint and every file are checked,
the exported navigator loads and acts like the cached one, and bad folders give clear errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import training.vln  # noqa: E402,F401 - preloads triton's LLVM before any EGL context
from tests.training_vln.test_vln_training import BASE  # noqa: E402
from training.vln.base_store import MANIFEST, export_base, use_base  # noqa: E402
from training.vln.config import VLNTrainConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from training.vln.navigator import base_navigator

    cfg = VLNTrainConfig(**BASE, cache_dir=str(tmp_path_factory.mktemp("cache")))
    final, metrics = base_navigator(cfg, progress=False)
    return cfg, final.parent, metrics


def test_export_then_use_gives_the_same_navigator(built, tmp_path):
    from agents.vln.modeling_vln import AlldayWalkerPolicy

    cfg, root, metrics = built
    dest = export_base(root, tmp_path / "shipped")
    final, record = use_base(dest, cfg)
    assert record == metrics and record["fingerprint"] == cfg.fingerprint()
    manifest = json.loads((dest / MANIFEST).read_text())
    assert "final/vlm/model.safetensors" in manifest["files"] and "metrics.json" in manifest["files"]
    a = AlldayWalkerPolicy.from_pretrained(root / "final")
    b = AlldayWalkerPolicy.from_pretrained(final)
    sa, sb = a.bundle.model.state_dict(), b.bundle.model.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    with pytest.raises(FileExistsError):
        export_base(root, dest)


def test_use_base_refuses_another_config_a_corrupt_file_and_extra_files(built, tmp_path):
    cfg, root, _ = built
    dest = export_base(root, tmp_path / "shipped")
    other = VLNTrainConfig(**{**BASE, "steps": BASE["steps"] + 1}, cache_dir=cfg.cache_dir)
    with pytest.raises(ValueError, match="another config"):
        use_base(dest, other)
    weights = dest / "final" / "vlm" / "model.safetensors"
    blob = bytearray(weights.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    weights.write_bytes(bytes(blob))
    with pytest.raises(ValueError, match="model.safetensors does not match"):
        use_base(dest, cfg)
    shutil.copy2(root / "final" / "vlm" / "model.safetensors", weights)  # repaired
    use_base(dest, cfg)
    (dest / "final" / "stray.txt").write_text("x")
    with pytest.raises(ValueError, match="unlisted"):
        use_base(dest, cfg)
    with pytest.raises(ValueError, match="not an exported base"):
        use_base(root, cfg)  # a cache folder has no manifest
    with pytest.raises(ValueError, match="does not exist"):
        use_base(tmp_path / "nowhere", cfg)
    with pytest.raises(ValueError, match="not a finished base"):
        export_base(tmp_path / "nowhere", tmp_path / "x")


def test_export_script_and_lifelong_base_dir_errors(built, tmp_path, capsys):
    cfg, root, _ = built
    yaml_path = tmp_path / "base.yaml"
    yaml_path.write_text(json.dumps(cfg.to_dict()))  # JSON is YAML
    script = [sys.executable, str(ROOT / "scripts" / "export_vln_base.py")]
    assert "--base-dir" in subprocess.run(script + ["--help"], capture_output=True, text=True, check=True).stdout
    run = subprocess.run(script + [str(yaml_path), str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    line = json.loads(run.stdout.strip().splitlines()[-1])
    assert line["fingerprint"] == cfg.fingerprint() and line["bytes"] > 0
    use_base(tmp_path / "out", cfg)
    again = subprocess.run(script + [str(yaml_path), str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT)
    assert again.returncode == 2 and "exists" in again.stderr
    from benchmarks.lifelong_vln import main

    with pytest.raises(SystemExit) as exc:  # the default base config is not the one this base was built from
        main(["--base-dir", str(tmp_path / "out"), "--methods", ""])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--base-dir:" in err and "another config" in err, err


def test_the_shipped_base_matches_its_config_and_manifest():
    """The base in benchmarks/bases is intact and is the bind-guarded config's (what --base-dir will accept)."""
    cfg = VLNTrainConfig.from_yaml(ROOT / "configs/vln/search_fine_patches_bind_guarded.yaml")
    final, record = use_base(ROOT / "benchmarks/bases/vln_bind_guarded_1d3232da7ee4", cfg)
    assert (final / "vlm" / "model.safetensors").is_file()
    assert record["metrics"]["normal"]["episodes"] == 60 and record["metrics"]["normal"]["sr"] >= 0.4

"""Ship a finished base navigator to another machine and use it there instead of rebuilding it.

A base is built once per config (``base_navigator``), but its training is not bit-identical across CPU vendors and
takes about 1.5 h on 2 cores, so a base that passed its checks travels as a folder: ``final/`` (the navigator),
``metrics.json`` (its build record: fingerprint, config, numerics, evaluation) and ``manifest.json`` (a SHA-256 per
file). ``use_base`` checks the fingerprint against the config it is asked for and every file against the manifest
before anything loads it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Any

from agents.core.io import atomic_dir, read_json_object, write_text
from training.vln.config import VLNTrainConfig

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
METRICS = "metrics.json"
FINAL = "final"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def export_base(root: str | Path, dest: str | Path) -> Path:
    """Copy a finished cached base (``cache_dir/base-<hash>``: ``final/`` and ``metrics.json``) to ``dest`` with a
    manifest; ``dest`` must not exist yet. Returns ``dest``."""
    root, dest = Path(root), Path(dest)
    if not (root / FINAL).is_dir() or not (root / METRICS).is_file():
        raise ValueError(f"{root} is not a finished base navigator (needs {FINAL}/ and {METRICS})")
    if dest.exists():
        raise FileExistsError(f"{dest} exists; export to a new folder")
    metrics = read_json_object(root / METRICS, required=("fingerprint", "config", "metrics"))
    with atomic_dir(dest) as tmp:
        shutil.copytree(root / FINAL, tmp / FINAL)
        shutil.copy2(root / METRICS, tmp / METRICS)
        manifest = {"fingerprint": metrics["fingerprint"],
                    "files": {p.relative_to(tmp).as_posix(): _sha256(p) for p in _files(tmp)}}
        write_text(tmp / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    log.info("exported base %s to %s (%d files)", metrics["fingerprint"], dest, len(manifest["files"]))
    return dest


def use_base(folder: str | Path, cfg: VLNTrainConfig) -> tuple[Path, dict[str, Any]]:
    """``(final dir, build record)`` of an exported base, after checking it was built from ``cfg`` (same fingerprint)
    and that every file matches its manifest. Raises ValueError with the reason otherwise."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"base folder {folder} does not exist")
    try:
        manifest = read_json_object(folder / MANIFEST, required=("fingerprint", "files"))
        metrics = read_json_object(folder / METRICS, required=("fingerprint", "metrics"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{folder} is not an exported base navigator: {exc}") from None
    want = cfg.fingerprint()
    if metrics["fingerprint"] != want or manifest["fingerprint"] != want:
        raise ValueError(f"{folder} holds the base of another config (fingerprint {metrics['fingerprint']}); "
                         f"this config's is {want}")
    listed = manifest["files"]
    present = {p.relative_to(folder).as_posix() for p in _files(folder)} - {MANIFEST}
    if set(listed) != present:
        raise ValueError(f"{folder}: files missing {sorted(set(listed) - present)} or unlisted "
                         f"{sorted(present - set(listed))} against its manifest")
    for rel, digest in listed.items():
        if _sha256(folder / rel) != digest:
            raise ValueError(f"{folder}: {rel} does not match its manifest (corrupt or changed)")
    return folder / FINAL, metrics

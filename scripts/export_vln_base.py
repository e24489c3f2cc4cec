#!/usr/bin/env python3
"""Export a finished base navigator from the cache so another machine can start from it (`lifelong_vln.py
--base-dir`) instead of rebuilding it (about 1.5 h on 2 cores, and not bit-identical across CPU vendors).

    python scripts/export_vln_base.py configs/vln/search_fine_patches_bind_guarded.yaml benchmarks/bases/NAME

The folder gets ``final/`` (the navigator), ``metrics.json`` (fingerprint, config, numerics, evaluation) and
``manifest.json`` (SHA-256 per file), which ``--base-dir`` checks before loading. Prints one JSON line last.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", help="the base navigator's config (YAML); its cached base must be finished")
    p.add_argument("dest", help="new folder to write")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    from training.vln.base_store import export_base
    from training.vln.config import VLNTrainConfig
    from training.vln.navigator import DONE

    try:
        cfg = VLNTrainConfig.from_yaml(a.config)
    except (OSError, ValueError, TypeError) as exc:
        p.error(f"{a.config}: {exc}")
    root = Path(cfg.cache_dir) / f"base-{cfg.fingerprint()}"
    if not (root / DONE).is_file():
        p.error(f"no finished base for {a.config} in {root}: build it first (allday train vln, or lifelong_vln.py)")
    try:
        dest = export_base(root, a.dest)
    except (ValueError, FileExistsError) as exc:
        p.error(str(exc))
    size = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
    print(json.dumps({"fingerprint": cfg.fingerprint(), "dest": str(dest), "bytes": size}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

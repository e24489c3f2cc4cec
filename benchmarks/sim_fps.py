#!/usr/bin/env python
"""Embedded simulator throughput: env steps/s with RGB-D at 128/224 px, default and fast render settings,
and the ratio env-step rate / raw renderer rate (target >= 0.8 at 128x128). Last line: one JSON object."""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

os.environ.setdefault("MUJOCO_GL", "egl")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="few frames (under a minute on 2 cores)")
    ap.add_argument("--frames", type=int, default=None, help="steps per block (default 300, quick 60)")
    ap.add_argument("--repeats", type=int, default=None, help="blocks per setting (default 5, quick 3)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 224])
    ap.add_argument("--qualities", nargs="+", default=["default", "fast"])
    args = ap.parse_args()
    from sim.nav.bench import bench_sim

    frames = args.frames or (60 if args.quick else 300)
    repeats = args.repeats or (3 if args.quick else 5)
    rows = []
    for q in args.qualities:
        for s in args.sizes:
            r = bench_sim(s, frames, q, repeats=repeats)
            rows.append(r)
            print(f"{q:>8} {s:>4}px  env {r['fps']:7.1f} steps/s   raw RGB-D {r['raw_fps']:7.1f} fps   "
                  f"ratio {r['ratio']:.2f}", flush=True)
    out = {"benchmark": "sim_fps", "date": time.strftime("%Y-%m-%d"), "machine": platform.machine(),
           "cpus": os.cpu_count(), "quick": args.quick, "frames": frames, "repeats": repeats,
           "results": [{k: r[k] for k in ("size", "quality", "fps", "raw_fps", "ratio")} for r in rows]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""``allday train vln --config configs/vln/<name>.yaml``: train the AlldayWalker base navigator.

Behaviour cloning of the shortest-path follower plus DAgger rounds in the simulator; checkpoints every
``checkpoint_every`` steps (``--resume`` continues from the last one), then evaluates SR/SPL/OSR under each
``eval_conditions`` entry and saves an AlldayWalker checkpoint to ``<out>/final`` (servable by ``vln_node``
with ``agent:=alldaywalker checkpoint:=<out>/final``).
"""

from __future__ import annotations

import argparse
import json
import logging

from training.config_io import add_override_argument
from training.vln.config import VLNTrainConfig
from training.vln.navigator import train_navigator

log = logging.getLogger(__name__)


def run_from_args(args: argparse.Namespace) -> int:
    """Entry point of ``allday train vln`` (args: config, out, resume, overrides, quiet)."""
    cfg = VLNTrainConfig.from_yaml(args.config, list(getattr(args, "overrides", []) or []))
    out = args.out or cfg.out_dir
    result = train_navigator(cfg, out, resume=bool(getattr(args, "resume", False)),
                             progress=not getattr(args, "quiet", False))
    summary = {c: {k: round(float(m[k]), 3) for k in ("sr", "spl", "osr", "ne") if k in m}
               for c, m in result["metrics"].items()}
    log.info("trained navigator -> %s/final: %s", out, summary)
    print(json.dumps({"out": str(out), "steps": result["steps"], "metrics": summary}))  # CLI output
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", required=True)
    p.add_argument("--out", default=None)
    p.add_argument("--resume", action="store_true")
    add_override_argument(p)
    p.add_argument("--quiet", action="store_true")
    return run_from_args(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())

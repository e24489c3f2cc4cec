"""``allday fed run --config configs/fed/<name>.yaml``: federated fine-tuning (Fed-PLoRA and baselines) on Flower.

Runtimes: Flower's simulation engine (default; Ray, 1 CPU per virtual client), ``--deployment`` (a real SuperLink
and SuperNodes started on localhost, or ``--connection NAME`` for an existing federation in ``$FLWR_HOME/config.toml``)
or ``--plain`` (the same math in one process, no Flower). The last stdout line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


def _summary(server, runtime: str) -> dict:
    h = server.history
    return {
        "method": server.cfg.method, "runtime": runtime, "rounds_done": server.round,
        "accuracy": [round(r.accuracy, 4) for r in h], "final_accuracy": h[-1].accuracy if h else None,
        "excluded": {r.round: r.excluded for r in h if r.excluded},
        "bytes": sum(r.down_bytes + r.up_bytes for r in h),
        "checkpoint": str(server.checkpoint_path) if server.checkpoint_path else None,
    }


def _run(args: argparse.Namespace) -> int:
    from training.federated.config import load_config

    overrides = list(args.overrides)
    if args.rounds is not None:
        overrides.append(f"rounds={args.rounds}")
    if args.method is not None:
        overrides.append(f"method={args.method}")
    cfg = load_config(args.config, overrides)
    if cfg.checkpoint_dir:
        cfg = cfg.replace(checkpoint_dir=str(Path(cfg.checkpoint_dir).resolve()))
    if not cfg.resume and cfg.checkpoint_dir and (Path(cfg.checkpoint_dir) / "global.pt").exists():
        (Path(cfg.checkpoint_dir) / "global.pt").unlink()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="allday-fed-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    from training.federated.server import FedServer

    if args.plain:
        from training.federated.loop import run_plain

        server, runtime = run_plain(cfg, progress=not args.quiet), "plain"
    elif args.deployment or args.connection:
        from training.federated.flower.deploy import LocalFleet

        if not cfg.checkpoint_dir:
            cfg = cfg.replace(checkpoint_dir=str(workdir / "checkpoint"))
        # the run config travels as a path + overrides: the server and every node read the same file
        resolved = workdir / "run.yaml"
        import yaml

        resolved.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=True))
        if args.connection:
            from training.federated.flower.deploy import run_on_connection

            proc = run_on_connection(args.connection, resolved, workdir)
        else:
            nodes = args.nodes or min(cfg.num_clients, 2)
            with LocalFleet(workdir, [cfg.budget_for(i) for i in range(nodes)]) as fleet:
                proc = fleet.run_app(resolved, [])
        if proc.returncode != 0:
            raise ValueError(f"flwr run failed ({proc.returncode}): {proc.stderr[-2000:] or proc.stdout[-2000:]}")
        server, runtime = FedServer(cfg.replace(resume=True)), "deployment"
    else:
        from training.federated.flower.simulation import run_simulation

        server, runtime = run_simulation(cfg, workdir, num_supernodes=args.nodes), "simulation"
    print(json.dumps(_summary(server, runtime), sort_keys=True, default=float), flush=True)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fed", help="federated fine-tuning on Flower (Fed-PLoRA, FedIT, HETLoRA, FLoRA, FlexLoRA)",
                       description=__doc__)
    fsub = p.add_subparsers(dest="fed_command", metavar="SUBCOMMAND", required=True)
    r = fsub.add_parser("run", help="run (or resume) a federated training from a YAML config", description=__doc__)
    r.add_argument("--config", required=True, help="YAML FedConfig (see configs/fed/quick.yaml)")
    r.add_argument("--rounds", type=int, default=None, help="total number of rounds (overrides the config)")
    r.add_argument("--method", default=None, help="method name from FED_METHODS (overrides the config)")
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--deployment", action="store_true",
                      help="Flower deployment engine: start a SuperLink + --nodes SuperNodes on localhost")
    mode.add_argument("--connection", default=None,
                      help="deployment on an existing federation: a connection name in $FLWR_HOME/config.toml")
    mode.add_argument("--plain", action="store_true", help="same math in one process without Flower (fast)")
    r.add_argument("--nodes", type=int, default=None,
                   help="SuperNodes (deployment, default 2) / virtual clients (simulation, default num_clients)")
    r.add_argument("--workdir", default=None, help="folder for FLWR_HOME, Ray/Flower temp files and logs")
    r.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field (repeatable), e.g. --set split=iid")
    r.add_argument("--quiet", action="store_true", help="no progress bars")
    r.set_defaults(func=_run)

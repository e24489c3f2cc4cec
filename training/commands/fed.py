"""``allday fed run --config configs/fed/<name>.yaml``: federated training on Flower.

Method families (``training.federated.registry.FED_FAMILIES``), chosen by the config's ``method``: Fed-PLoRA and
baselines (fedplora, fedit, hetlora, flora, flexlora; ``configs/fed/quick.yaml``) and FedPTE with its baselines
(fedpte, fedproto, fedavg; needs a ``dataset:`` section, ``configs/fed/fedpte_quick.yaml``).
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

from training.config_io import add_override_argument

log = logging.getLogger(__name__)


def _runtime(args: argparse.Namespace) -> str:
    if args.plain:
        return "plain"
    return "deployment" if args.deployment or args.connection else "simulation"


def _run(args: argparse.Namespace) -> int:
    from training.federated.flower.runtimes import RunOptions, select_family

    overrides = list(args.overrides)
    if args.rounds is not None:
        overrides.append(f"rounds={args.rounds}")
    if args.method is not None:
        overrides.append(f"method={args.method}")
    family = select_family(args.config, overrides)
    cfg = family.load(args.config, overrides)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="allday-fed-"))
    opts = RunOptions(workdir=workdir, nodes=args.nodes, connection=args.connection, progress=not args.quiet)
    summary = family.run(cfg, _runtime(args), opts)
    print(json.dumps(summary, sort_keys=True, default=float), flush=True)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fed", help="federated training on Flower (Fed-PLoRA & baselines; FedPTE, FedProto, FedAvg)",
                       description=__doc__)
    fsub = p.add_subparsers(dest="fed_command", metavar="SUBCOMMAND", required=True)
    r = fsub.add_parser("run", help="run (or resume) a federated training from a YAML config", description=__doc__)
    r.add_argument("--config", required=True,
                   help="YAML config (configs/fed/quick.yaml, configs/fed/fedpte_quick.yaml)")
    r.add_argument("--rounds", type=int, default=None, help="total number of rounds (overrides the config)")
    r.add_argument("--method", default=None, help="method name of the config's family (overrides the config)")
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--deployment", action="store_true",
                      help="Flower deployment engine: start a SuperLink + --nodes SuperNodes on localhost")
    mode.add_argument("--connection", default=None,
                      help="deployment on an existing federation: a connection name in $FLWR_HOME/config.toml")
    mode.add_argument("--plain", action="store_true", help="same math in one process without Flower (fast)")
    r.add_argument("--nodes", type=int, default=None,
                   help="SuperNodes (deployment, default 2) / virtual clients (simulation, default num_clients)")
    r.add_argument("--workdir", default=None, help="folder for FLWR_HOME, Ray/Flower temp files and logs")
    add_override_argument(r, "--set split=iid or --set client.lr=0.001")
    r.add_argument("--quiet", action="store_true", help="no progress bars")
    r.set_defaults(func=_run)

"""``allday config show KIND --config FILE [--set KEY=VALUE ...]``: the config a run would use, resolved.

Follows ``extends:`` chains, applies the overrides, fills every default and validates (a bad config is the same
clear error the run would give); prints it as YAML, and for a VLN base navigator its cache key (fingerprint).
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from agents.core.registry import Registry
from training.config_io import add_override_argument

#: config kind -> "module:function(path, overrides) -> config object with to_dict()"
CONFIG_KINDS: Registry[str] = Registry("config kind")
CONFIG_KINDS.register("vla")("training.vla.config:VLATrainConfig.from_yaml")
CONFIG_KINDS.register("vln")("training.vln.config:VLNTrainConfig.from_yaml")
CONFIG_KINDS.register("fed")("training.federated.config:load_config")


def resolve(kind: str, path: str, overrides: list[str]) -> Any:
    """The validated config object of ``kind`` read from ``path`` with ``overrides`` applied."""
    module, _, attr = CONFIG_KINDS.get(kind).partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj(path, overrides)


def _show(args: argparse.Namespace) -> int:
    import yaml

    cfg = resolve(args.kind, args.config, args.overrides)
    print(yaml.safe_dump(cfg.to_dict(), sort_keys=False, default_flow_style=None, width=120), end="")
    if hasattr(cfg, "fingerprint"):
        print(f"# fingerprint (cache key): {cfg.fingerprint()}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="show the config a run would use (extends, overrides and defaults resolved)",
                       description=__doc__)
    csub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    show = csub.add_parser("show", help="print the resolved config as YAML", description=__doc__)
    show.add_argument("kind", choices=list(CONFIG_KINDS), help="what the config is for")
    show.add_argument("--config", required=True, help="YAML config (see configs/<kind>/)")
    add_override_argument(show, "--set seed=1 (as the run's --set)")
    show.set_defaults(func=_show)

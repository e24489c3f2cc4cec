"""Reading YAML configs for the ``allday`` commands: the top-level mapping of a file (``agents.core.config``,
shared with the ROS bringup), and ``key=value`` overrides (values parsed as YAML; dotted keys reach into nested
mappings: ``tiny.patch_size=8``)."""

from __future__ import annotations

import argparse
import copy
from typing import Any

import yaml

from agents.core.config import read_yaml_mapping

__all__ = ["add_override_argument", "apply_overrides", "override_value", "read_yaml_mapping"]


def override_value(raw: str, item: str) -> Any:
    """The YAML value of one ``key=value`` override (``item``, for the message); ``ValueError`` when not YAML."""
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ValueError(f"override {item!r}: value is not valid YAML ({exc})") from exc


def add_override_argument(parser: argparse.ArgumentParser, example: str = "") -> None:
    """The commands' repeatable ``--set KEY=VALUE`` (into ``args.overrides``); ``example``: shown in the help."""
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field (repeatable)" + (f", e.g. {example}" if example else ""))


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A copy of ``data`` with ``["lr=1e-4", "tiny.patch_size=8", ...]`` applied (values parsed as YAML)."""
    out = copy.deepcopy(data)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"override {item!r} must look like key=value (KEY=VALUE, the value in YAML)")
        *parents, leaf = key.strip().split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"override {item!r}: {part!r} is not a mapping")
        node[leaf] = override_value(value, item)
    return out

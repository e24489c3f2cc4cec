"""The ``allday`` command. Subcommands register themselves in ``COMMANDS`` and delegate to library code."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Callable, Sequence

from agents.core.registry import Registry

log = logging.getLogger("allday")

#: top-level command name -> "module:function" that adds its parser to the subparsers object
COMMANDS: Registry[str] = Registry("command")
COMMANDS.register("sim")("training.commands.sim:add_parser")
COMMANDS.register("demo")("training.commands.demo:add_parser")
COMMANDS.register("bringup")("training.commands.bringup:add_parser")
COMMANDS.register("train")("training.commands.train:add_parser")
COMMANDS.register("vla")("training.commands.vla:add_parser")
COMMANDS.register("quantize")("training.commands.quantize:add_parser")  # quantize + export-onnx
COMMANDS.register("fed")("training.commands.fed:add_parser")
COMMANDS.register("config")("training.commands.config:add_parser")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="allday", description="allday: embodied-agent stack (simulation, policies, compression, ROS 2).")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module, _, fn = COMMANDS.get(name).partition(":")
        adder: Callable[[argparse._SubParsersAction], None] = getattr(importlib.import_module(module), fn)
        adder(sub)
    return parser


def print_json(obj: object) -> None:
    """Print one JSON line (the machine-readable last line of a command)."""
    print(json.dumps(obj, sort_keys=True, default=float), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, KeyError, ImportError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"allday {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""``allday train TARGET --config FILE``: train a policy from a YAML config (``configs/<target>/*.yaml``).

Each target's trainer is imported only when it runs, so ``allday --help`` stays fast and needs no ML extras.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable

from agents.core.numerics import PIN_CHOICES, PIN_HELP, pin_choice
from agents.core.registry import Registry
from training.config_io import add_override_argument

#: target -> "module:function"; the function takes the parsed arguments and returns an exit code
TRAIN_TARGETS: Registry[str] = Registry("train target")
TRAIN_TARGETS.register("vla")("training.vla.train:run_from_args")
TRAIN_TARGETS.register("vln")("training.vln.train:run_from_args")


def _run(args: argparse.Namespace) -> int:
    pin_choice(getattr(args, "pin_numerics", "none"))  # before the trainer's module loads torch
    module, _, fn = TRAIN_TARGETS.get(args.target).partition(":")
    runner: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module), fn)
    return int(runner(args) or 0)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a policy (vla: VLM2VLA; vln: AlldayWalker) from a YAML config",
                       description=__doc__)
    p.add_argument("target", choices=list(TRAIN_TARGETS), help="what to train")
    p.add_argument("--config", required=True, help="YAML config (see configs/<target>/)")
    p.add_argument("--out", default=None, help="output directory (overrides the config's)")
    p.add_argument("--resume", action="store_true", help="resume from the last checkpoint in the output directory")
    add_override_argument(p, "--set max_steps=10")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--pin-numerics", default="auto", choices=PIN_CHOICES,
                   help=PIN_HELP)
    p.set_defaults(func=_run)

"""``bringup``: start a configured set of nodes, each in its own process, as ``ros2 launch`` would.

Config (YAML)::

    params_file: demo_params.yaml        # per-node sections (node_name: ros__parameters: ...), relative to this file
    nodes:
      - executable: sim_node             # an allday_ros executable
      - executable: vln_node
        name: vln_node                   # optional: remaps the node name
        required: true                   # default true: if it exits, everything is shut down

Each node gets ``--ros-args --params-file <params_file>``. SIGINT/SIGTERM are forwarded; children get
10 s to exit cleanly before SIGKILL. Nodes run as ``python -m allday_ros.<exe>`` with the same interpreter
when the package is importable (a venv), else as the installed ``<prefix>/lib/allday_ros/<exe>``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.core.config import read_yaml_mapping

log = logging.getLogger("allday_ros.bringup")
EXECUTABLES = ("sim_node", "vln_node", "vla_node", "recorder", "manip_sim_node")


@dataclass
class NodeSpec:
    executable: str
    name: str | None = None
    required: bool = True
    args: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.executable not in EXECUTABLES:
            raise ValueError(f"unknown executable {self.executable!r}; known: {list(EXECUTABLES)}")


@dataclass
class BringupConfig:
    params_file: Path | None
    nodes: list[NodeSpec]

    @classmethod
    def load(cls, path: str | Path) -> "BringupConfig":
        path = Path(path)
        data = read_yaml_mapping(path, "bringup config")
        if not isinstance(data.get("nodes"), list) or not data["nodes"]:
            raise ValueError(f"{path}: expected a mapping with a non-empty 'nodes' list")
        params = data.get("params_file")
        params_path = (path.parent / params).resolve() if params else None
        if params_path is not None and not params_path.is_file():
            raise FileNotFoundError(f"{path}: params_file {params_path} not found")
        nodes = []
        for i, n in enumerate(data["nodes"]):
            if not isinstance(n, dict) or "executable" not in n:
                raise ValueError(f"{path}: nodes[{i}] needs an 'executable'")
            unknown = set(n) - {"executable", "name", "required", "args"}
            if unknown:
                raise ValueError(f"{path}: nodes[{i}] has unknown keys {sorted(unknown)}")
            nodes.append(NodeSpec(**n))
        return cls(params_path, nodes)


def resolve_command(executable: str) -> list[str]:
    """``python -m allday_ros.<exe>`` with this interpreter (the venv case), else the installed executable."""
    import importlib.util

    if importlib.util.find_spec(f"allday_ros.{executable}") is not None:
        return [sys.executable, "-m", f"allday_ros.{executable}"]
    for prefix in filter(None, os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)):
        exe = Path(prefix) / "lib" / "allday_ros" / executable
        if exe.is_file() and os.access(exe, os.X_OK):
            return [str(exe)]
    return [sys.executable, "-m", f"allday_ros.{executable}"]


class Bringup:
    """Owns the node processes of one bringup."""

    def __init__(self, config: BringupConfig, env: dict[str, str] | None = None, quiet: bool = False) -> None:
        self.config = config
        self.procs: list[tuple[NodeSpec, subprocess.Popen]] = []
        self.env = env
        self.quiet = quiet

    def start(self) -> "Bringup":
        for spec in self.config.nodes:
            cmd = resolve_command(spec.executable) + ["--ros-args"]
            if self.config.params_file is not None:
                cmd += ["--params-file", str(self.config.params_file)]
            if spec.name:
                cmd += ["-r", f"__node:={spec.name}"]
            cmd += spec.args
            log.info("starting %s", " ".join(cmd))
            out = subprocess.DEVNULL if self.quiet else None
            self.procs.append((spec, subprocess.Popen(cmd, env=self.env, stdout=out, stderr=out,
                                                      start_new_session=True)))
        return self

    def poll(self) -> int | None:
        """The exit code of the first required node that exited, else None."""
        for spec, p in self.procs:
            rc = p.poll()
            if rc is not None and spec.required:
                return rc
        return None

    def stop(self, timeout: float = 10.0) -> None:
        for _, p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        deadline = time.monotonic() + timeout
        for _, p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(5)

    def __enter__(self) -> "Bringup":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bringup", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("config", help="bringup YAML (nodes + params_file)")
    args, _ = ap.parse_known_args(argv)  # tolerate --ros-args from ros2 run
    logging.basicConfig(level=logging.INFO, format="[bringup] %(message)s")
    try:
        cfg = BringupConfig.load(args.config)
    except (ValueError, FileNotFoundError) as exc:
        print(f"bringup: error: {exc}", file=sys.stderr)
        return 2
    stop = {"flag": False}

    def on_signal(signum: int, _frame: Any) -> None:
        stop["flag"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    b = Bringup(cfg)
    rc = 0
    try:
        b.start()
        while not stop["flag"]:
            code = b.poll()
            if code is not None:
                log.error("a required node exited with code %s: shutting down", code)
                rc = code or 1
                break
            time.sleep(0.2)
    finally:
        b.stop()
    return rc


if __name__ == "__main__":
    sys.exit(main())

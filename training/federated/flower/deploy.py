"""Flower deployment engine on localhost: a real ``flower-superlink`` and N ``flower-supernode`` processes.

``LocalFleet`` starts them on free ports (insecure, no runtime dependency installation, FLWR_HOME/TMPDIR under a
work folder), writes ``$FLWR_HOME/config.toml`` with a ``local-deploy`` connection, and ``run_app`` runs
``flwr run APPDIR local-deploy --stream --run-config ...``. ``close`` always terminates what it started (SIGTERM,
then SIGKILL). For real machines see ``docs/federated.md`` (TLS certificates instead of ``--insecure``).
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from training.federated.flower.simulation import flower_env

log = logging.getLogger(__name__)
#: the Flower app directory (pyproject.toml with [tool.flwr.app] components -> our ServerApp/ClientApp)
APP_DIR = Path(__file__).resolve().parents[3] / "configs" / "fed" / "app"
CONNECTION = "local-deploy"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bin(name: str) -> str:
    cand = Path(sys.executable).parent / name
    return str(cand) if cand.exists() else name


def wait_port(port: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before port {port} opened")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"port {port} did not open within {timeout} s")


def toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class LocalFleet:
    """SuperLink + SuperNodes on localhost; use as a context manager.

    One SuperNode per entry of ``budgets`` (node config ``partition-id=i num-partitions=n rank-budget=b``), or, for
    methods without rank budgets, ``nodes`` SuperNodes with ``partition-id=i num-partitions=n`` only.
    """

    def __init__(self, workdir: str | Path, budgets: list[int] | None = None, *, nodes: int | None = None,
                 startup_timeout: float = 60.0) -> None:
        if (budgets is None) == (nodes is None):
            raise ValueError("give either budgets (one rank budget per SuperNode) or nodes (a count), not both")
        n = len(budgets) if budgets is not None else int(nodes or 0)
        if n < 1:
            raise ValueError("a fleet needs at least one SuperNode")
        extra = [f" rank-budget={b}" for b in budgets] if budgets is not None else [""] * n
        self.node_configs = [f"partition-id={i} num-partitions={n}{e}" for i, e in enumerate(extra)]
        self.workdir = Path(workdir).resolve()
        self.budgets = list(budgets or [])
        self.startup_timeout = startup_timeout
        # Flower spawns flower-superexec & co. by name: put this interpreter's bin folder first on PATH
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        self.env = {**os.environ, **flower_env(self.workdir), "PYTHONUNBUFFERED": "1", "PATH": path}
        self.port = free_port()
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []

    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen:
        logf = self.workdir / f"{name}.log"
        self.logs.append(logf)
        log.info("starting %s: %s", name, shlex.join(cmd))
        with open(logf, "wb") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=self.env, cwd=self.workdir,
                                    start_new_session=True)
        self.procs.append(proc)
        return proc

    def start(self) -> LocalFleet:
        home = Path(self.env["FLWR_HOME"])
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
            f'address = "127.0.0.1:{self.port}"\ninsecure = true\n'
        )
        link = self._spawn("superlink", [
            _bin("flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
            "--port", str(self.port), "--database", str(self.workdir / "superlink.db"),
        ])
        wait_port(self.port, self.startup_timeout, link)
        for i, node_config in enumerate(self.node_configs):
            self._spawn(f"supernode{i}", [
                _bin("flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{self.port}",
                "--node-config", node_config, "--port", str(free_port()),
            ])
        return self

    def run_app(self, config_path: str | Path | None, overrides: list[str], *, timeout: float = 600.0,
                app_dir: Path = APP_DIR) -> subprocess.CompletedProcess:
        """``flwr run APPDIR local-deploy --stream`` with ``config-path``/``overrides`` run config; waits."""
        rc = f"config-path={toml_str(str(Path(config_path).resolve()) if config_path else '')} " \
             f"overrides={toml_str(';'.join(overrides))}"
        cmd = [_bin("flwr"), "run", str(app_dir), CONNECTION, "--stream", "--run-config", rc]
        log.info("running: %s", shlex.join(cmd))
        return subprocess.run(cmd, env=self.env, cwd=self.workdir, capture_output=True, text=True, timeout=timeout)

    def _strays(self) -> list[int]:
        """Pids of processes Flower detached into their own sessions (superexec, flwr-serverapp, flwr-clientapp):
        descendants of what we started, or any process whose ``FLWR_HOME`` is this fleet's (orphans)."""
        home = f"FLWR_HOME={self.env['FLWR_HOME']}".encode()
        out = []
        for d in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
            if not d.name.isdigit() or int(d.name) == os.getpid():
                continue
            try:
                if home in (d / "environ").read_bytes().split(b"\0"):
                    out.append(int(d.name))
            except OSError:
                continue
        return out

    def close(self) -> None:
        """Terminate every started process group and Flower's detached children (SIGTERM, then SIGKILL)."""
        strays = self._strays()
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for pid in strays:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=5)
        for pid in strays:
            while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
                time.sleep(0.1)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.procs.clear()

    def __enter__(self) -> LocalFleet:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def run_on_connection(connection: str, config_path: str | Path, workdir: str | Path, *, timeout: float = 86400.0,
                      app_dir: Path = APP_DIR) -> subprocess.CompletedProcess:
    """``flwr run APPDIR <connection> --stream`` against an existing SuperLink (``$FLWR_HOME/config.toml``).

    ``config_path`` must be readable at the same path by the SuperLink's ServerApp and by every SuperNode.
    """
    rc = f"config-path={toml_str(str(Path(config_path).resolve()))} overrides={toml_str('')}"
    cmd = [_bin("flwr"), "run", str(app_dir), connection, "--stream", "--run-config", rc]
    log.info("running: %s", shlex.join(cmd))
    return subprocess.run(cmd, cwd=Path(workdir), capture_output=True, text=True, timeout=timeout)


def deploy(config_path: str | Path, workdir: str | Path, *, budgets: list[int] | None = None,
           nodes: int | None = None, connection: str | None = None,
           timeout: float = 86400.0) -> subprocess.CompletedProcess:
    """Run the app on ``config_path`` (a resolved YAML that the ServerApp and every node read): on an existing
    federation if ``connection`` is given, else on a ``LocalFleet`` (``budgets`` or ``nodes``). Raises ``ValueError``
    with the tail of Flower's output when ``flwr run`` fails."""
    if connection:
        proc = run_on_connection(connection, config_path, workdir, timeout=timeout)
    else:
        with LocalFleet(workdir, budgets, nodes=nodes) as fleet:
            proc = fleet.run_app(config_path, [], timeout=timeout)
    if proc.returncode != 0:
        raise ValueError(f"flwr run failed ({proc.returncode}): {proc.stderr[-2000:] or proc.stdout[-2000:]}")
    return proc

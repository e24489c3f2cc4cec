"""Resumable lifelong runs: a method's whole state after each task, so a long sequence can stop and go on.

A progress file holds the method object (model with its adapters or experts, penalty state, router), the metric
matrices so far, the torch RNG state and the run's configuration and task order. ``run_method`` writes one after
every task when given a path, replaces it by the finished result at the end, and goes on from it (or returns the
result) on the next call with the same path; resuming reproduces the uninterrupted run exactly. The benchmark
removes the files once its report is written, and holds :class:`DirLock` on the directory meanwhile, so a second run
given the same directory stops at once instead of writing over the first one's files. The file is a pickle
(``torch.load(weights_only=False)``): resume only from files you wrote.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from agents.core.config import differing_keys

log = logging.getLogger(__name__)

#: bumped when the file's layout changes; older files are refused with a clear error
FORMAT = 1


class ResumeError(ValueError):
    """A progress file that cannot be resumed from: unreadable, of another layout, method, config or task order."""


def save_progress(path: Path, *, name: str, config: dict[str, Any], tasks: list[str], done: int, method: Any,
                  mats: dict[str, Any], offline: dict[str, Any], elapsed: float,
                  result: dict[str, Any] | None = None) -> None:
    """Write the state after ``done`` tasks to ``path`` atomically (a crash mid-write keeps the previous file).
    ``result``: the method's finished result (then ``method`` may be None)."""
    import torch

    state = {"format": FORMAT, "method_name": name, "config": config, "tasks": list(tasks), "done": int(done),
             "method": method, "mats": mats, "offline": offline, "torch_rng": torch.get_rng_state(),
             "elapsed": float(elapsed), "result": result}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_progress(path: Path, *, name: str, config: dict[str, Any], tasks: list[str]) -> dict[str, Any] | None:
    """The state saved at ``path`` for this method, config and task order; None when there is no file.

    Raises :class:`ResumeError` for a file that is unreadable or belongs to another run (the differences named)."""
    import torch

    path = Path(path)
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means a corrupt or foreign file
        raise ResumeError(f"{path}: not a readable lifelong progress file ({type(exc).__name__}: {exc})") from exc
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        got = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise ResumeError(f"{path}: progress file format {got!r}, this version reads {FORMAT}")
    if state["method_name"] != name:
        raise ResumeError(f"{path}: progress of method {state['method_name']!r}, not {name!r}")
    if state["tasks"] != list(tasks):
        raise ResumeError(f"{path}: task order {state['tasks']} differs from this run's {list(tasks)}")
    diff = differing_keys(state["config"], config)
    if diff:
        shown = ", ".join(f"{k}: {state['config'].get(k)!r} -> {config.get(k)!r}" for k in diff)
        raise ResumeError(f"{path}: written under another configuration ({shown})")
    if not 0 < state["done"] <= len(tasks):
        raise ResumeError(f"{path}: {state['done']} tasks done out of {len(tasks)}")
    if state.get("result") is None:
        log.info("%s: resuming after %d of %d tasks (%s)", name, state["done"], len(tasks), path)
    return state


def progress_files(directory: Path | None, identities: dict[str, dict[str, Any]], resume: bool
                   ) -> dict[str, Path | None]:
    """Each method's progress file under ``directory`` (None everywhere when ``directory`` is None), checked
    before any training. ``identities``: per method, ``load_progress``'s keyword arguments (name, config, tasks).
    An existing file needs ``resume`` (else :class:`ResumeError`, so nothing is overwritten) and must belong to this
    run; ``resume`` without a directory is an error too."""
    if directory is None:
        if resume:
            raise ResumeError("--resume needs a progress directory (--progress-dir; quick mode has none by default)")
        return {m: None for m in identities}
    files = {m: Path(directory) / f"{m}.pt" for m in identities}
    for m, f in files.items():
        if f.exists() and not resume:
            raise ResumeError(f"{f}: progress of an earlier run exists; pass --resume to go on from it or delete it")
        if resume:
            load_progress(f, **identities[m])
    return files


class DirLock:
    """An exclusive lock on a progress directory (``DIR/.lock``, holding the owner's pid) for one run's lifetime.

    Taken at construction; a directory another process (or another ``DirLock`` in this one) holds raises
    :class:`ResumeError` naming that pid. The OS drops the lock if the process dies; :meth:`release` (or leaving a
    ``with`` block) also deletes the lock file. A lock taken on a file that its holder deleted meanwhile is dropped
    and taken again on the new file, so two runs never hold the same directory. POSIX ``flock``: a lock is only as
    good as the file system's (local disks: fine)."""

    def __init__(self, directory: Path) -> None:
        import fcntl

        self.path = Path(directory) / ".lock"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fh = open(self.path, "a+")  # noqa: SIM115 - held open until release()
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.seek(0)
                owner = fh.read().strip() or "?"
                fh.close()
                raise ResumeError(f"{self.path.parent}: in use by another lifelong run (pid {owner}); give each run "
                                  f"its own --progress-dir") from None
            try:  # the holder may have deleted the file between our open and our lock
                same = os.stat(self.path).st_ino == os.fstat(fh.fileno()).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            fh.close()
        self._fh = fh
        fh.truncate(0)
        fh.write(str(os.getpid()))
        fh.flush()

    def release(self) -> None:
        """Delete the lock file and drop the lock (idempotent)."""
        if self._fh.closed:
            return
        self.path.unlink(missing_ok=True)
        self._fh.close()  # closing the last descriptor drops the flock

    def __enter__(self) -> DirLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def remove_progress(path: Path) -> None:
    """Delete a progress file and any half-written ``.tmp`` beside it."""
    path = Path(path)
    path.unlink(missing_ok=True)
    path.with_name(path.name + ".tmp").unlink(missing_ok=True)

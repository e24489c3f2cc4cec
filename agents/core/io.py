"""Atomic file writes: a reader, or a resume after a crash, sees the old file or the new one, never half of one.

Caches, training checkpoints and state, and the files AlldayWalker adds to a saved policy are written through
these helpers (Hugging Face ``save_pretrained`` folders are swapped whole with :func:`atomic_dir` where the project
owns the folder), so a write interrupted by an exception (Ctrl-C included) leaves the previous file in place and
removes its temporary. A process killed outright
(SIGKILL, the OOM killer) can leave a temporary behind: hidden (``.name.<pid>.<token>.tmp...``), never read in
place of the target (:func:`is_temporary` tells readers that list folders to skip it), and swept by the next write
of the same target once its process is gone and it is an hour old.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import time
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["NPZ_READ_ERRORS", "atomic_dir", "atomic_path", "is_temporary", "load_npz", "load_torch_file",
           "read_json_object", "restore_interrupted", "save_npz", "write_bytes", "write_text"]

_TMP_MARK = ".tmp"

#: What ``np.load`` of a missing, truncated or corrupt ``.npz`` raises (plus ``KeyError`` for a missing array):
#: catch these to turn an unreadable cache into a rebuild or a clear error.
NPZ_READ_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile,
                                                    zlib.error)


def _temporary(path: Path, suffix: str) -> Path:
    """A hidden sibling of ``path``, unique per process and per call, ending with ``suffix``."""
    return path.with_name(f".{path.stem}.{os.getpid()}.{secrets.token_hex(4)}{_TMP_MARK}{suffix}")


#: A killed writer's temporary is swept by the next write of the same target once it is this old (seconds) and its
#: process is gone: a writer on another host sharing the folder has a pid unknown here, but not an hour-old file.
STALE_AFTER_S = 3600.0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, another user's
        return True
    return True


def _sweep_stale(path: Path) -> None:
    """Delete temporaries (and folders moved aside) of ``path`` left by writers that were killed: their process is
    gone and they are older than :data:`STALE_AFTER_S`. POSIX only (``os.kill(pid, 0)`` probes there)."""
    if os.name != "posix" or not path.parent.is_dir():
        return
    pattern = re.compile(rf"^\.(?:{re.escape(path.stem)}|{re.escape(path.name)})\.(\d+)\.[0-9a-f]{{8}}"
                         rf"{re.escape(_TMP_MARK)}")
    now = time.time()
    for p in path.parent.iterdir():
        m = pattern.match(p.name)
        if not m or int(m.group(1)) == os.getpid():
            continue
        try:
            old = now - p.lstat().st_mtime > STALE_AFTER_S
        except OSError:
            continue
        if old and not _pid_alive(int(m.group(1))):
            log.info("removing %s, left by a writer that was killed", p)
            _remove(p)


def is_temporary(path: str | Path) -> bool:
    """Whether ``path`` is a temporary of these helpers (left by a killed writer); folder readers skip these."""
    name = Path(path).name
    return name.startswith(".") and _TMP_MARK in name


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDWR)  # write access: Windows' FlushFileBuffers needs it
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    try:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    except OSError as exc:  # never hide the writer's own error behind a clean-up failure
        log.warning("could not remove the temporary %s: %s", path, exc)


@contextmanager
def atomic_path(path: str | Path, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary file path beside ``path``; when the block ends without an exception the file is flushed
    to disk and replaces ``path`` (``os.replace``: atomic on POSIX and Windows), otherwise it is deleted and
    ``path`` is left untouched.

    The temporary ends with ``suffix`` (default: ``path``'s own, for writers that choose a format by the name).
    Parent folders are created. ``path`` ends up a regular file (a symlink there is replaced, not followed).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _sweep_stale(path)
    tmp = _temporary(path, path.suffix if suffix is None else suffix)
    try:
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            _remove(tmp)


def _aside(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{_TMP_MARK}.old")


def restore_interrupted(path: str | Path) -> bool:
    """Undo a folder swap of :func:`atomic_dir` killed between moving the old folder aside and moving the new one
    in: when ``path`` is missing and a folder moved aside from it is there, put that one back. Readers of such
    folders call this first; returns whether it restored one."""
    path = Path(path)
    if path.exists() or not path.parent.is_dir():
        return False
    aside = [p for p in path.parent.glob(f".{path.name}.*{_TMP_MARK}.old") if p.is_dir()]
    if not aside:
        return False
    newest = max(aside, key=lambda p: p.stat().st_mtime_ns)
    os.replace(newest, path)
    log.warning("restored %s from %s (a write of its replacement was interrupted)", path, newest.name)
    return True


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; when the block ends without an exception its files are
    flushed to disk and it takes ``path``'s place (an existing folder there is moved aside, then deleted: a kill
    between the two renames is undone by :func:`restore_interrupted`), otherwise it is deleted and ``path`` is
    left untouched. For writers that produce a folder (``save_pretrained``, checkpoints)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    restore_interrupted(path)
    _sweep_stale(path)
    tmp = _temporary(path, "")
    tmp.mkdir()
    try:
        yield tmp
        for f in tmp.rglob("*"):
            if f.is_file() and not f.is_symlink():
                _fsync_file(f)
        old = None
        if path.exists() or path.is_symlink():
            old = _aside(path)
            os.replace(path, old)
        try:
            os.replace(tmp, path)
        except OSError:
            if old is not None:
                os.replace(old, path)
            raise
        if old is not None:
            _remove(old)
    finally:
        if tmp.exists():
            _remove(tmp)


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns the path."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return path


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns the path."""
    return write_bytes(path, text.encode("utf-8"))


def load_npz(path: str | Path) -> Any:
    """``np.load`` of an ``.npz`` archive (no pickles), to use as a context manager; ``ValueError`` naming ``path``
    when it cannot be opened or is not an archive (a plain ``.npy``). Reading a member of a damaged archive can
    still raise one of :data:`NPZ_READ_ERRORS`."""
    import numpy as np

    try:
        d = np.load(path, allow_pickle=False)
    except NPZ_READ_ERRORS as exc:
        raise ValueError(f"{path}: unreadable .npz ({type(exc).__name__}: {exc})") from exc
    if not isinstance(d, np.lib.npyio.NpzFile):
        raise ValueError(f"{path}: not an .npz archive")
    return d


def load_torch_file(path: str | Path, what: str, weights_only: bool = False) -> Any:
    """``torch.load(path)`` on the CPU; ``ValueError`` naming ``what`` and ``path`` for a truncated or foreign file
    (``FileNotFoundError`` when it is missing)."""
    import torch

    try:
        return torch.load(str(path), map_location="cpu", weights_only=weights_only)
    except FileNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 - truncated or foreign files raise several unpickling error types
        raise ValueError(f"corrupt {what} {path}: {type(exc).__name__}: {exc}") from exc


def save_npz(path: str | Path, compressed: bool = True, **arrays: Any) -> Path:
    """``np.savez[_compressed](path, **arrays)`` written atomically; ``path`` is used as given (numpy would append
    ``.npz`` to a name without it). Returns the path."""
    import numpy as np

    path = Path(path)
    save = np.savez_compressed if compressed else np.savez
    with atomic_path(path, suffix=".npz") as tmp:  # numpy keeps a name ending in .npz as it is
        save(tmp, **arrays)  # by name, not an open file: numpy does not close its zip when a write fails
    return path


def read_json_object(path: str | Path, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JSON object in ``path``; ``ValueError`` naming the file when it is unreadable, truncated, not an object
    or lacks one of the ``required`` keys (``FileNotFoundError`` when it is missing)."""
    import json

    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable JSON ({exc})") from exc
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in required if k not in obj]
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)}")
    return obj

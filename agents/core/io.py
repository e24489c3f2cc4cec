"""Atomic file writes: a reader, or a resume after a crash, sees the old file or the new one, never half of one.

Every cache, checkpoint and recording the project writes goes through these helpers, so a write killed part way
(Ctrl-C, out of memory, a pre-empted job) leaves the previous file in place and no stray temporary files.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["atomic_path", "save_npz", "write_bytes", "write_text"]


@contextmanager
def atomic_path(path: str | Path, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; when the block ends without an exception it replaces ``path``
    (``os.replace``, atomic on POSIX and Windows), otherwise it is deleted and ``path`` is left untouched.

    The temporary name is hidden, unique per process and ends with ``suffix`` (default: ``path``'s own, for
    writers that choose a format by the name: ``.x.<pid>.tmp.npz``). Parent folders are created.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix if suffix is None else suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (flushed to disk before the rename); returns the path."""
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return path


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns the path."""
    return write_bytes(path, text.encode("utf-8"))


def save_npz(path: str | Path, compressed: bool = True, **arrays: Any) -> Path:
    """``np.savez[_compressed](path, **arrays)`` written atomically; ``path`` is used as given (numpy would append
    ``.npz`` to a name without it). Returns the path."""
    import numpy as np

    path = Path(path)
    save = np.savez_compressed if compressed else np.savez
    with atomic_path(path, suffix=".npz") as tmp:  # numpy keeps a name ending in .npz as it is
        save(tmp, **arrays)  # by name, not an open file: numpy does not close its zip when a write fails
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return path

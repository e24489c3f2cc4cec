"""Atomic writes (agents.core.io): an interrupted write leaves the old file and no temporary behind."""

from __future__ import annotations

import numpy as np
import pytest

from agents.core.io import atomic_path, save_npz, write_bytes, write_text


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if ".tmp" in p.name)


def test_save_npz_round_trips_and_keeps_the_name(tmp_path):
    path = tmp_path / "sub" / "cache.bin"  # no .npz suffix: numpy alone would write cache.bin.npz
    out = save_npz(path, a=np.arange(5), b=np.array(["x", "y"]))
    assert out == path and path.is_file() and not (tmp_path / "sub" / "cache.bin.npz").exists()
    with np.load(path) as d:
        np.testing.assert_array_equal(d["a"], np.arange(5))
        assert list(d["b"]) == ["x", "y"]
    assert _leftovers(path.parent) == []


def test_uncompressed_npz_is_stored_not_deflated(tmp_path):
    big = np.zeros(100_000, np.float32)
    small = save_npz(tmp_path / "z.npz", a=big).stat().st_size
    plain = save_npz(tmp_path / "p.npz", compressed=False, a=big).stat().st_size
    assert plain > 10 * small


def test_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "state.json"
    write_text(path, '{"step": 1}')

    class Boom(Exception):
        pass

    with pytest.raises(Boom), atomic_path(path) as tmp:
        tmp.write_text('{"step": 2, "trunc')
        raise Boom
    assert path.read_text() == '{"step": 1}'
    assert _leftovers(tmp_path) == []


def test_failed_npz_write_keeps_the_old_arrays(tmp_path):
    path = tmp_path / "samples.npz"
    save_npz(path, a=np.ones(3))

    class Unsaveable:
        def __array__(self, *args, **kwargs):
            raise RuntimeError("cannot convert")

    with pytest.raises(RuntimeError, match="cannot convert"):
        save_npz(path, a=np.zeros(3), b=Unsaveable())
    with np.load(path) as d:
        np.testing.assert_array_equal(d["a"], np.ones(3))
    assert _leftovers(tmp_path) == []


def test_replace_overwrites_and_temporary_is_hidden_and_per_process(tmp_path):
    import os

    path = tmp_path / "x.pt"
    write_bytes(path, b"old")
    with atomic_path(path) as tmp:
        assert tmp.parent == path.parent and tmp.name.startswith(".") and str(os.getpid()) in tmp.name
        assert tmp.suffix == ".pt"
        tmp.write_bytes(b"new")
        assert path.read_bytes() == b"old"  # not visible before the block ends
    assert path.read_bytes() == b"new"

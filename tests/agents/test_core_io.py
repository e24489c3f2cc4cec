"""Atomic writes (agents.core.io): an interrupted write leaves the old file and no temporary behind."""

from __future__ import annotations

import numpy as np
import pytest

from agents.core.io import atomic_dir, atomic_path, is_temporary, save_npz, write_bytes, write_text


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


def test_replace_overwrites_and_temporaries_are_hidden_and_unique(tmp_path):
    import os

    path = tmp_path / "x.pt"
    write_bytes(path, b"old")
    with atomic_path(path) as tmp, atomic_path(path) as tmp2:
        assert tmp.parent == path.parent and tmp.name.startswith(".") and str(os.getpid()) in tmp.name
        assert tmp.suffix == ".pt" and tmp != tmp2 and is_temporary(tmp) and not is_temporary(path)
        tmp.write_bytes(b"new")
        tmp2.write_bytes(b"newer")
        assert path.read_bytes() == b"old"  # not visible before the block ends
    assert path.read_bytes() == b"new"  # the outer block ends last
    assert _leftovers(tmp_path) == []


def test_data_is_flushed_to_disk_before_the_rename(tmp_path, monkeypatch):
    import agents.core.io as io

    events = []
    real_fsync, real_replace = io.os.fsync, io.os.replace
    monkeypatch.setattr(io.os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(io.os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    save_npz(tmp_path / "a.npz", a=np.ones(2))
    write_text(tmp_path / "b.json", "{}")
    with atomic_path(tmp_path / "c.bin") as tmp:
        tmp.write_bytes(b"c")
    assert events == ["fsync", "replace"] * 3


def test_write_bytes_failure_leaves_nothing(tmp_path):
    with pytest.raises(TypeError):
        write_bytes(tmp_path / "x.bin", "not bytes")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_atomic_dir_swaps_whole_folders(tmp_path):
    path = tmp_path / "ckpt"
    with atomic_dir(path) as tmp:
        assert tmp.is_dir() and not any(tmp.iterdir()) and is_temporary(tmp)
        (tmp / "a.txt").write_text("1")
        assert not path.exists()
    with atomic_dir(path) as tmp:
        (tmp / "b.txt").write_text("2")
    assert sorted(p.name for p in path.iterdir()) == ["b.txt"]  # replaced, not merged
    with pytest.raises(RuntimeError), atomic_dir(path) as tmp:
        (tmp / "c.txt").write_text("half")
        raise RuntimeError("killed")
    assert sorted(p.name for p in path.iterdir()) == ["b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_read_json_object_names_the_file(tmp_path):
    from agents.core.io import read_json_object

    f = tmp_path / "meta.json"
    f.write_text('{"a": 1, "b": 2}')
    assert read_json_object(f, required=("a",)) == {"a": 1, "b": 2}
    for text, why in (('{"a": ', "unreadable JSON"), ("[1]", "expected a JSON object, got list"),
                      ('{"b": 1}', "missing a")):
        f.write_text(text)
        with pytest.raises(ValueError, match=f"meta.json: {why}"):
            read_json_object(f, required=("a",))
    with pytest.raises(FileNotFoundError):
        read_json_object(tmp_path / "none.json")


def test_a_swap_killed_between_its_renames_is_undone(tmp_path, monkeypatch):
    import agents.core.io as io
    from agents.core.io import restore_interrupted

    path = tmp_path / "checkpoint"
    with atomic_dir(path) as tmp:
        (tmp / "state.json").write_text("old")
    real_replace = io.os.replace
    calls = []

    def killed_on_the_second_rename(a, b):
        calls.append(b)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the old folder is aside, the new one not yet in place
        real_replace(a, b)

    monkeypatch.setattr(io.os, "replace", killed_on_the_second_rename)
    with pytest.raises(KeyboardInterrupt), atomic_dir(path) as tmp:
        (tmp / "state.json").write_text("new")
    monkeypatch.setattr(io.os, "replace", real_replace)
    assert not path.exists()
    assert restore_interrupted(path) and (path / "state.json").read_text() == "old"
    assert not restore_interrupted(path)  # nothing left to restore
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]


def test_load_npz_and_load_torch_file_name_bad_files(tmp_path):
    import torch

    from agents.core.io import load_npz, load_torch_file

    np.save(tmp_path / "plain.npy", np.ones(3))
    with pytest.raises(ValueError, match="plain.npy: not an .npz archive"):
        load_npz(tmp_path / "plain.npy")
    (tmp_path / "cut.npz").write_bytes(save_npz(tmp_path / "ok.npz", a=np.ones(3)).read_bytes()[:30])
    with pytest.raises(ValueError, match="cut.npz: unreadable .npz"):
        load_npz(tmp_path / "cut.npz")
    with load_npz(tmp_path / "ok.npz") as z:
        assert z["a"].sum() == 3
    torch.save({"x": 1}, tmp_path / "s.pt")
    assert load_torch_file(tmp_path / "s.pt", "state") == {"x": 1}
    (tmp_path / "bad.pt").write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="corrupt state .*bad.pt"):
        load_torch_file(tmp_path / "bad.pt", "state")
    with pytest.raises(FileNotFoundError):
        load_torch_file(tmp_path / "none.pt", "state")


@pytest.mark.skipif(__import__("os").name != "posix", reason="pid probing is POSIX only")
def test_a_killed_writers_old_temporaries_are_swept_by_the_next_write(tmp_path):
    import os
    import subprocess
    import sys
    import time

    from agents.core.io import STALE_AFTER_S

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()  # a pid whose process has exited
    live = str(os.getppid())
    names = {"stale": f".state.{dead}.0badc0de.tmp.json", "fresh": f".state.{dead}.0badc0df.tmp.json",
             "live": f".state.{live}.0badc0e0.tmp.json", "aside": f".ckpt.{dead}.0badc0e1.tmp.old",
             "other": ".notes.123.0badc0e2.tmp.json"}
    for key, name in names.items():
        (tmp_path / name).mkdir() if key == "aside" else (tmp_path / name).write_text("x")
        if key != "fresh":
            t = time.time() - STALE_AFTER_S - 60
            os.utime(tmp_path / name, (t, t))
    write_text(tmp_path / "state.json", "{}")
    (tmp_path / "ckpt").mkdir()
    with atomic_dir(tmp_path / "ckpt") as tmp:
        (tmp / "a").write_text("1")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert names["stale"] not in left and names["aside"] not in left  # dead writer, an hour old: swept
    assert {names["fresh"], names["live"], names["other"]} <= set(left)  # too recent, alive, another target

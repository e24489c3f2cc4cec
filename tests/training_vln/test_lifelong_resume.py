"""Resumable lifelong runs (``training.vln.resume``): a run stopped after a task and resumed from its progress
file gives exactly the uninterrupted run's results; files of another run or corrupt ones are refused."""

import json

import numpy as np
import pytest

pytest.importorskip("torch")

import training.vln  # noqa: E402,F401 - preloads triton's LLVM before any EGL context
from training.vln.lifelong import LifelongConfig  # noqa: E402


def _cfg(base, **kw) -> LifelongConfig:
    settings = dict(base=base, n_scenes=1, conditions=["normal", "low_light", "overexposure"], n_unseen=0,
                    train_per_task=1, eval_per_task=1, steps_per_task=6, batch_size=4, fisher_batches=1,
                    lora_rank=2, tuka_ranks=(4, 4, 2, 2), lr=3e-3, offline_samples=8, cotrain=0.3)
    return LifelongConfig(**{**settings, **kw})


@pytest.fixture(scope="module")
def setup(tmp_path_factory, lifelong_setup):
    return lifelong_setup(tmp_path_factory.mktemp("resume"), _cfg)


class _Stop(Exception):
    pass


def _same(a, b) -> None:
    for key in ("sr", "spl", "osr"):
        np.testing.assert_array_equal(np.array(a["matrices"][key], float), np.array(b["matrices"][key], float))
    np.testing.assert_array_equal(np.array(a["offline"]["matrices"]["loss"], float),
                                  np.array(b["offline"]["matrices"]["loss"], float))
    assert a["forgetting"] == b["forgetting"] and a["adapter_params"] == b["adapter_params"]
    assert a["oracle_route"] == b["oracle_route"] and a["diagnostics"] == b["diagnostics"]
    assert a["final_success"] == b["final_success"] and len(a["final_success"]) == len(a["final"]["sr"])


@pytest.mark.parametrize("name", ["oracle_multi_lora", "tuka_dkil"])
def test_a_run_stopped_after_a_task_resumes_to_the_uninterrupted_result(name, setup, tmp_path, monkeypatch):
    from training.vln import lifelong
    from training.vln.resume import load_progress

    cfg, tasks, data, base_dir = setup
    whole = lifelong.run_method(name, cfg, base_dir, tasks, [], data)
    prog = tmp_path / f"{name}.pt"
    real = lifelong.Imitation.run
    calls = {"n": 0}

    def stop_at_the_third_task(self, *a, **kw):
        calls["n"] += 1
        if calls["n"] == 3:
            raise _Stop
        return real(self, *a, **kw)

    monkeypatch.setattr(lifelong.Imitation, "run", stop_at_the_third_task)
    with pytest.raises(_Stop):
        lifelong.run_method(name, cfg, base_dir, tasks, [], data, progress_file=prog)
    run_id = lifelong.resume_identity(name, cfg, tasks, [])
    assert load_progress(prog, **run_id)["done"] == 2
    trained = []
    monkeypatch.setattr(lifelong.Imitation, "run", lambda self, *a, **kw: trained.append(kw["desc"]) or real(
        self, *a, **kw))
    resumed = lifelong.run_method(name, cfg, base_dir, tasks, [], data, progress_file=prog)
    assert trained == [f"{name} {tasks[2].name}"]  # only the task that was not finished
    _same(resumed, whole)
    assert load_progress(prog, **run_id)["method"] is None and prog.stat().st_size < 100_000  # the result alone
    again = lifelong.run_method(name, cfg, base_dir, tasks, [], data, progress_file=prog)
    assert json.dumps(again, sort_keys=True) == json.dumps(resumed, sort_keys=True)
    assert trained == [f"{name} {tasks[2].name}"]  # finished: nothing trained again


def test_progress_of_another_run_or_a_corrupt_file_is_refused(setup, tmp_path):
    from training.vln.lifelong import resume_identity, run_method
    from training.vln.resume import ResumeError, save_progress

    cfg, tasks, data, base_dir = setup
    prog = tmp_path / "p.pt"
    ident = resume_identity("seq_lora", cfg, tasks, [])
    config, names = ident["config"], ident["tasks"]

    def write(**kw):
        args = dict(name="seq_lora", config=config, tasks=names, done=1, method=None, mats={}, offline={},
                    elapsed=0.0)
        save_progress(prog, **{**args, **kw})

    write(config={**config, "lr": 0.5})
    with pytest.raises(ResumeError, match=r"another configuration \(lr: 0.5 -> 0.003\)"):
        run_method("seq_lora", cfg, base_dir, tasks, [], data, progress_file=prog)
    write(name="ewc_lora")
    with pytest.raises(ResumeError, match="of method 'ewc_lora', not 'seq_lora'"):
        run_method("seq_lora", cfg, base_dir, tasks, [], data, progress_file=prog)
    write(tasks=names[::-1])
    with pytest.raises(ResumeError, match="task order"):
        run_method("seq_lora", cfg, base_dir, tasks, [], data, progress_file=prog)
    write(config={**config, "numerics": {**config["numerics"], "threads": 99}})  # another machine or --threads
    with pytest.raises(ResumeError, match="numerics"):
        run_method("seq_lora", cfg, base_dir, tasks, [], data, progress_file=prog)
    prog.write_bytes(b"not a checkpoint")
    with pytest.raises(ResumeError, match="not a readable lifelong progress file"):
        run_method("seq_lora", cfg, base_dir, tasks, [], data, progress_file=prog)
    assert prog.read_bytes() == b"not a checkpoint"  # refused, not overwritten


def test_progress_files_need_a_directory_to_resume_and_removal_takes_a_half_written_file(tmp_path):
    from training.vln.resume import ResumeError, progress_files, remove_progress

    ident = {"seq_lora": {"name": "seq_lora", "config": {}, "tasks": ["a"]}}
    assert progress_files(None, ident, resume=False) == {"seq_lora": None}
    with pytest.raises(ResumeError, match="--resume needs a progress directory"):
        progress_files(None, ident, resume=True)
    assert progress_files(tmp_path, ident, resume=True) == {"seq_lora": tmp_path / "seq_lora.pt"}  # nothing yet
    (tmp_path / "seq_lora.pt").write_bytes(b"x")
    (tmp_path / "seq_lora.pt.tmp").write_bytes(b"x")
    remove_progress(tmp_path / "seq_lora.pt")
    assert not list(tmp_path.iterdir())


def test_a_progress_directory_is_locked_by_one_run_at_a_time(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from training.vln.resume import DirLock, ResumeError

    root = str(Path(__file__).resolve().parents[2])
    holder = subprocess.Popen(  # another process holds the directory until its stdin closes
        [sys.executable, "-c", "import sys; from training.vln.resume import DirLock; "
         f"lock = DirLock({str(tmp_path)!r}); print('held', flush=True); sys.stdin.read(); lock.release()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=root,
        env={**os.environ, "PYTHONPATH": root})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ResumeError, match=rf"in use by another lifelong run \(pid {holder.pid}\)"):
            DirLock(tmp_path)
    finally:
        holder.communicate("", timeout=60)
    assert holder.returncode == 0 and not (tmp_path / ".lock").exists()  # released and removed
    mine = DirLock(tmp_path)  # free again; and a second lock in the same process is refused too
    with pytest.raises(ResumeError, match=rf"pid {os.getpid()}"):
        DirLock(tmp_path)
    mine.release()
    mine.release()  # idempotent
    (tmp_path / ".lock").write_text("123456789")  # left by a run that died: the OS dropped its lock
    with DirLock(tmp_path) as lock:
        assert lock.path.read_text() == str(os.getpid())
    assert not list(tmp_path.iterdir())

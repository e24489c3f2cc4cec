"""VLA data sources: the episode format, the folder format and its validator, rosbag2 MCAP, robosuite recording."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.training_vla.conftest import lift_like_episode
from training.vla.data import SOURCES, Episode, load_episode, load_source, save_episode
from training.vla.data.folder_source import load_folder, validate_folder, write_folder
from training.vla.data.rosbag_source import BagTopics, read_bag_episode, write_episode_bag


def _same(a: Episode, b: Episode, exact_frames: bool = True) -> None:
    assert np.array_equal(a.frames, b.frames) if exact_frames else a.frames.shape == b.frames.shape
    np.testing.assert_allclose(a.deltas, b.deltas, atol=1e-7)
    np.testing.assert_allclose(a.gripper, b.gripper)
    assert a.phases == b.phases and a.instruction == b.instruction


def test_episode_validation_names_the_field():
    ep = lift_like_episode()
    assert len(ep) == 11 and ep.actions().shape == (11, 4)
    assert [s[0] for s in ep.segments()] == ["move above", "descend", "grasp", "lift"]
    with pytest.raises(ValueError, match="deltas"):
        Episode(ep.frames, ep.deltas[:5], ep.gripper, ep.phases, "x")
    with pytest.raises(ValueError, match="centimetres"):
        Episode(ep.frames, ep.deltas * 100, ep.gripper, ep.phases, "x")
    with pytest.raises(ValueError, match="instruction"):
        Episode(ep.frames, ep.deltas, ep.gripper, ep.phases, "  ")
    with pytest.raises(ValueError, match="frames"):
        Episode(ep.frames.astype(np.float32), ep.deltas, ep.gripper, ep.phases, "x")
    with pytest.raises(ValueError, match="finite"):
        Episode(ep.frames, np.full_like(ep.deltas, np.nan), ep.gripper, ep.phases, "x")


def test_episode_npz_roundtrip_and_corrupt_file(tmp_path):
    ep = lift_like_episode(3)
    p = save_episode(ep, tmp_path / "e.npz")
    _same(ep, load_episode(p))
    assert load_episode(p).meta == {"seed": 3}
    bad = tmp_path / "bad.npz"
    bad.write_bytes(p.read_bytes()[:200])
    with pytest.raises(ValueError, match="bad.npz"):
        load_episode(bad)
    raw = bytearray(p.read_bytes())
    start = 30 + int.from_bytes(raw[26:28], "little") + int.from_bytes(raw[28:30], "little")  # first member's data
    raw[start] = 0xFF  # an invalid deflate block header: zlib.error, not a short file
    bad.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"bad.npz: cannot read episode \(error"):
        load_episode(bad)
    raw = bytearray(p.read_bytes())
    raw[len(raw) // 2:len(raw) // 2 + 64] = bytes(64)  # damaged in the middle: a CRC mismatch (BadZipFile)
    bad.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="bad.npz: cannot read episode"):
        load_episode(bad)
    (tmp_path / "bad.npz").unlink()
    _same(ep, load_source({"source": "cache", "path": str(tmp_path)})[0])
    with pytest.raises(ValueError, match="unknown keys"):
        load_source({"source": "cache", "path": str(tmp_path), "oops": 1})
    with pytest.raises(KeyError, match="known"):
        load_source({"source": "nope"})
    assert {"robosuite", "rosbag", "folder", "cache"} <= set(SOURCES.names())


def test_folder_roundtrip_and_validator(tmp_path):
    eps = [lift_like_episode(0), lift_like_episode(1, phases=False)]
    root = write_folder(eps, tmp_path / "ds")
    assert validate_folder(root) == []
    back = load_source({"source": "folder", "path": str(root)})
    for a, b in zip(eps, back):
        _same(a, b)
    # break things: each problem names its file and field, and all are reported together
    ep0, ep1 = root / "episode_0000", root / "episode_0001"
    meta = json.loads((ep0 / "meta.json").read_text())
    (ep0 / "meta.json").write_text(json.dumps({**meta, "instruction": ""}))
    (ep1 / "frames" / "000003.png").write_bytes(b"not a png")
    errs = validate_folder(root)
    assert any("meta.json" in e and "'instruction'" in e for e in errs), errs
    assert any("000003.png" in e and "PNG" in e for e in errs), errs
    with pytest.raises(ValueError, match=r"2 problems"):
        load_folder(root)
    shutil.rmtree(ep1 / "frames")
    (ep0 / "meta.json").write_text(json.dumps(meta))
    np.savez(ep0 / "actions.npz", deltas=np.zeros((4, 3)), gripper=np.zeros(4))
    errs = validate_folder(root)
    assert any("11 frames but 4 actions" in e for e in errs), errs
    assert any("no PNG frames" in e for e in errs), errs
    assert validate_folder(tmp_path / "missing") == [f"{tmp_path / 'missing'}: not a directory"]


def test_folder_units_cm(tmp_path):
    ep = lift_like_episode()
    root = write_folder([ep], tmp_path / "ds")
    d = root / "episode_0000"
    np.savez(d / "actions.npz", deltas=ep.deltas * 100.0, gripper=ep.gripper)
    meta = json.loads((d / "meta.json").read_text())
    (d / "meta.json").write_text(json.dumps({**meta, "units": "cm"}))
    np.testing.assert_allclose(load_folder(root)[0].deltas, ep.deltas, atol=1e-6)
    (d / "meta.json").write_text(json.dumps({**meta, "units": "mm"}))
    assert any("'units'" in e for e in validate_folder(root))


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_bag_roundtrip(tmp_path, storage):
    ep = lift_like_episode(2)
    bag = write_episode_bag(ep, tmp_path / "bag", storage=storage)
    _same(ep, read_bag_episode(bag))
    small = read_bag_episode(bag, image_size=16, instruction="lift the cube")
    assert small.frames.shape == (11, 16, 16, 3) and small.instruction == "lift the cube"
    got = load_source({"source": "rosbag", "paths": [str(bag)], "task": "lift"})
    assert got[0].task == "lift" and got[0].meta["source"] == "rosbag"


ARM_COMMAND_MSG = Path(__file__).resolve().parents[2] / "ros2_ws/src/allday_interfaces/msg/ArmCommand.msg"


def _vla_node_bag(ep: Episode, path: Path, mirrors: bool = True, arm_msgs: bool = True) -> Path:
    """A bag laid out as vla_node + recorder write it: per step the image, the one-message /arm_cmd (an empty
    connection without ``arm_msgs``) and (with ``mirrors``) the standard pair, whose gripper arrives after its
    delta (the cross-topic race)."""
    from rosbags.rosbag2 import Writer
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    ts = get_typestore(Stores.ROS2_KILTED)
    ts.register(get_types_from_msg(ARM_COMMAND_MSG.read_text(), "allday_interfaces/msg/ArmCommand"))
    T = ts.types
    Arm, Image, Header, Time = (T["allday_interfaces/msg/ArmCommand"], T["sensor_msgs/msg/Image"],
                                T["std_msgs/msg/Header"], T["builtin_interfaces/msg/Time"])
    Vector3, Twist, TwistStamped = T["geometry_msgs/msg/Vector3"], T["geometry_msgs/msg/Twist"], \
        T["geometry_msgs/msg/TwistStamped"]
    Float32, String = T["std_msgs/msg/Float32"], T["std_msgs/msg/String"]
    with Writer(path, version=9) as w:
        c = {topic: w.add_connection(topic, typ.__msgtype__, typestore=ts) for topic, typ in (
            ("/camera/color/image_raw", Image), ("/arm_cmd", Arm), ("/ee_delta_cmd", TwistStamped),
            ("/gripper_cmd", Float32), ("/instruction", String))}

        def put(topic: str, t: int, msg) -> None:
            w.write(c[topic], t, ts.serialize_cdr(msg, msg.__msgtype__))

        put("/instruction", 1, String(data=ep.instruction))
        h, wd = ep.image_size
        for i in range(len(ep)):
            t = 1_000_000_000 * (i + 1)
            hd = Header(stamp=Time(sec=i + 1, nanosec=0), frame_id="world")
            put("/camera/color/image_raw", t, Image(header=hd, height=h, width=wd, encoding="rgb8", is_bigendian=0,
                                                    step=3 * wd, data=np.ascontiguousarray(ep.frames[i]).ravel()))
            d = Vector3(x=float(ep.deltas[i][0]), y=float(ep.deltas[i][1]), z=float(ep.deltas[i][2]))
            if arm_msgs:
                put("/arm_cmd", t + 1, Arm(header=hd, delta=d, gripper=float(ep.gripper[i])))
            if not mirrors:
                continue
            put("/ee_delta_cmd", t + 2, TwistStamped(header=hd, twist=Twist(linear=d, angular=Vector3(x=0.0, y=0.0,
                                                                                                        z=0.0))))
            put("/gripper_cmd", t + 3, Float32(data=float(ep.gripper[i])))
    return path


def test_bag_with_arm_cmd_takes_delta_and_gripper_from_one_message(tmp_path):
    ep = lift_like_episode(2)
    assert len(set(ep.gripper.tolist())) > 1  # the episode opens and closes: a late gripper shows
    bag = _vla_node_bag(ep, tmp_path / "bag")
    got = read_bag_episode(bag)  # frames, deltas and every step's gripper, from /arm_cmd
    assert np.array_equal(got.frames, ep.frames) and got.instruction == ep.instruction
    np.testing.assert_allclose(got.deltas, ep.deltas)
    np.testing.assert_allclose(got.gripper, ep.gripper)
    # the same bag read through the standard pair (as before /arm_cmd): each gripper change lands a step late
    pair = read_bag_episode(bag, topics=BagTopics(arm_cmd="/not_recorded"))
    np.testing.assert_allclose(pair.deltas, ep.deltas)
    changes = np.flatnonzero(np.diff(ep.gripper)) + 1
    assert not np.allclose(pair.gripper, ep.gripper)
    np.testing.assert_allclose(pair.gripper[changes], ep.gripper[changes - 1])
    # a bag with /arm_cmd only (no mirrors) reads the same
    only = read_bag_episode(_vla_node_bag(ep, tmp_path / "only", mirrors=False))
    np.testing.assert_allclose(only.gripper, ep.gripper)
    np.testing.assert_allclose(only.deltas, ep.deltas)
    # /arm_cmd opened but never published (teleop on the pair while vla_node was up): the pair is read
    teleop = read_bag_episode(_vla_node_bag(ep, tmp_path / "teleop", arm_msgs=False))
    np.testing.assert_allclose(teleop.gripper, pair.gripper)
    with pytest.raises(ValueError, match="no /ee_delta_cmd command after an image"):
        read_bag_episode(_vla_node_bag(ep, tmp_path / "empty", mirrors=False, arm_msgs=False))


def test_corrupt_and_incomplete_bags_give_clear_errors(tmp_path):
    ep = lift_like_episode(2)
    bag = write_episode_bag(ep, tmp_path / "bag")
    mcap = next(bag.glob("*.mcap"))
    data = mcap.read_bytes()
    mcap.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="cannot read bag"):
        read_bag_episode(bag)
    mcap.write_bytes(b"\x00" * 64)
    with pytest.raises(ValueError, match="cannot read bag"):
        read_bag_episode(bag)
    with pytest.raises(FileNotFoundError):
        read_bag_episode(tmp_path / "nothing")
    (tmp_path / "notabag").mkdir()
    with pytest.raises(ValueError, match="metadata.yaml"):
        read_bag_episode(tmp_path / "notabag")
    other = write_episode_bag(ep, tmp_path / "bag2", topics=BagTopics(image="/cam"))
    with pytest.raises(ValueError, match="/camera/color/image_raw"):
        read_bag_episode(other)


def test_robosuite_source_records_and_caches(tmp_path, monkeypatch):
    pytest.importorskip("robosuite")
    from training.vla.data.robosuite_source import record_robosuite

    eps = record_robosuite("lift", 1, image_size=32, cache_dir=tmp_path, progress=False)
    ep = eps[0]
    assert ep.meta["success"] and ep.frames.shape[1:] == (32, 32, 3)
    assert [s[0] for s in ep.segments()] == ["move above", "descend", "grasp", "lift"]
    assert np.abs(ep.deltas).max() <= 0.03 + 1e-6 and ep.gripper[0] == -1 and ep.gripper[-1] == 1
    # the descend phase moves down, the lift phase up (base frame +z up)
    seg = {p: (s, e) for p, s, e in ep.segments()}
    assert ep.deltas[slice(*seg["descend"]), 2].sum() < -0.01 and ep.deltas[slice(*seg["lift"]), 2].sum() > 0
    # the second call reads the cache and builds no simulator
    import sim.manip

    monkeypatch.setattr(sim.manip, "ManipTask", lambda *a, **k: (_ for _ in ()).throw(AssertionError("simulated")))
    _same(ep, record_robosuite("lift", 1, image_size=32, cache_dir=tmp_path, progress=False)[0])


def test_robosuite_source_camera_is_recorded_and_cached_apart(tmp_path):
    pytest.importorskip("robosuite")
    from training.vla.data.robosuite_source import record_robosuite

    top = record_robosuite("lift", 1, image_size=32, seed=2, cache_dir=tmp_path, progress=False)[0]
    wrist = record_robosuite("lift", 1, image_size=32, seed=2, cache_dir=tmp_path, progress=False,
                             camera="robot0_eye_in_hand")[0]
    assert top.meta["camera"] == "agentview" and wrist.meta["camera"] == "robot0_eye_in_hand"
    # same expert, same world: the actions agree, the views do not (a shared cache entry would give equal frames)
    np.testing.assert_allclose(wrist.deltas, top.deltas, atol=1e-6)
    assert np.abs(wrist.frames[0].astype(int) - top.frames[0].astype(int)).mean() > 10
    names = sorted(p.name for p in tmp_path.glob("*.npz"))
    assert len(names) == 2 and any("robot0_eye_in_hand" in n for n in names)


def test_robosuite_source_dart_noise(tmp_path):
    pytest.importorskip("robosuite")
    from training.vla.data.robosuite_source import record_robosuite

    clean = record_robosuite("lift", 1, image_size=32, seed=3, cache_dir=tmp_path, progress=False)[0]
    noisy = record_robosuite("lift", 1, image_size=32, seed=3, cache_dir=tmp_path, progress=False, noise_m=0.01)[0]
    assert noisy.meta["noise_m"] == 0.01 and clean.meta["noise_m"] == 0.0 and noisy.meta["success"]
    # the executed path left the expert's, so the labelled corrections differ; the labels stay the expert's
    # (within its step limit, the phases in order)
    assert len(noisy) != len(clean) or not np.allclose(noisy.deltas, clean.deltas, atol=1e-3)
    assert np.abs(noisy.deltas).max() <= 0.03 + 1e-6
    assert [s[0] for s in noisy.segments()] == ["move above", "descend", "grasp", "lift"]
    names = sorted(p.name for p in tmp_path.glob("*.npz"))
    assert len(names) == 2 and any("_dart10mm_" in n for n in names)
    # seeded: recording again without the cache gives the same demonstration
    again = record_robosuite("lift", 1, image_size=32, seed=3, cache_dir=None, progress=False, noise_m=0.01)[0]
    np.testing.assert_allclose(again.deltas, noisy.deltas)
    for bad in (-0.01, 0.5, float("nan")):
        with pytest.raises(ValueError, match="noise_m"):
            record_robosuite("lift", 1, image_size=32, cache_dir=tmp_path, progress=False, noise_m=bad)


def test_dart_records_the_experts_label_and_executes_the_noisy_step():
    pytest.importorskip("robosuite")
    from sim.manip import ManipTask, make_expert
    from sim.manip.action import EEDeltaAction
    from training.vla.data.robosuite_source import record_episode

    env = ManipTask(task="lift", image_size=32)
    executed, expert_says = [], []
    step = env.step

    def spy(delta, gripper):  # what the arm is told, and what the expert would say in the state it sees
        executed.append(np.asarray(delta, dtype=np.float64))
        return step(delta, gripper)

    env.step = spy
    try:
        ep = record_episode(env, "lift", seed=4, noise_m=0.01)
        # replay the executed steps with a fresh expert watching: its actions are the labels
        obs, expert = env.reset(4), make_expert("lift", max_step_m=0.03)
        env.step = step
        for d, g in zip(executed, ep.gripper, strict=True):
            expert_says.append(EEDeltaAction.parse(expert.act(obs)).delta)
            obs = step(d, g)
    finally:
        env.close()
    labels, executed = ep.deltas.astype(np.float64), np.stack(executed)
    np.testing.assert_allclose(labels, np.asarray(expert_says), atol=1e-6)  # the labels are the expert's
    noise = executed - labels
    assert np.abs(noise).max() > 0.005 and 0.005 < noise.std() < 0.015  # ... and the arm was told something else


def test_importing_training_vla_is_light():
    import subprocess
    import sys

    code = ("import sys, training.vla.train, training.vla.data, training.vla.relabel, training.vla.samples; "
            "heavy = [m for m in ('torch', 'transformers', 'peft', 'robosuite', 'rosbags') if m in sys.modules]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cached_demo_is_reused_only_for_the_same_step_limit(tmp_path):
    from training.vla.data.robosuite_source import _cached

    ok = lift_like_episode(0)
    ok.meta.update(success=True, steps=len(ok.frames))
    failed = lift_like_episode(1)
    failed.meta.update(success=False, steps=len(failed.frames))
    p_ok, p_failed = save_episode(ok, tmp_path / "ok.npz"), save_episode(failed, tmp_path / "failed.npz")
    n = len(ok.frames)
    assert _cached(p_ok, n) is not None and _cached(p_ok, n + 50) is not None  # a success within the limit
    assert _cached(p_ok, n - 1) is None  # would have been cut short: record again
    assert _cached(p_failed, len(failed.frames)) is not None  # the same limit: the same failure
    assert _cached(p_failed, len(failed.frames) + 50) is None  # more steps might succeed: record again
    (tmp_path / "cut.npz").write_bytes(p_ok.read_bytes()[:100])
    assert _cached(tmp_path / "cut.npz", n) is None and _cached(tmp_path / "none.npz", n) is None


def test_folder_frames_are_read_in_numeric_order_without_zero_padding(tmp_path):
    ep = lift_like_episode(0)
    assert len(ep.frames) > 10  # names 0..T-1 sort wrongly as text (10 before 2)
    root = write_folder([ep], tmp_path / "ds")
    frames = root / "episode_0000" / "frames"
    for f in sorted(frames.glob("*.png")):
        f.rename(frames / f"{int(f.stem)}.png")  # a user's own naming: 0.png, 1.png, ... 10.png
    (back,) = load_source({"source": "folder", "path": str(root)})
    np.testing.assert_array_equal(back.frames, ep.frames)

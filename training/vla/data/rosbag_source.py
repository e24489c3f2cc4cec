"""Source 2: rosbag2 (MCAP or sqlite3) recordings of camera + end-effector commands, read with ``rosbags``.

No ROS installation is needed (``rosbags`` parses the bag and the CDR messages). The topics are those of the
``allday_ros`` recorder / ``manip_sim_node`` (configurable):

* image: ``/camera/color/image_raw`` (``sensor_msgs/msg/Image``, ``rgb8`` / ``bgr8``);
* arm command: ``/arm_cmd`` (``allday_interfaces/msg/ArmCommand``: ``delta`` in metres and ``gripper`` of one step
  in one message; its definition travels in the bag, so no ROS install is needed). When the bag has it, each one
  is a step and the standard pair below is ignored (``vla_node`` mirrors its commands there; their order across
  the two topics is not kept in delivery or recording);
* end-effector command: ``/ee_delta_cmd`` (``geometry_msgs/msg/TwistStamped``, ``twist.linear`` = metres
  of this step in the base frame);
* gripper: ``/gripper_cmd`` (``std_msgs/msg/Float32``, -1 open .. +1 close; latched: the last value applies);
* instruction: ``/instruction`` (``std_msgs/msg/String``; or pass ``instruction=``);
* phase (optional): ``/phase`` (``std_msgs/msg/String``) labels the following commands.

One bag is one episode: each end-effector command becomes one step, paired with the latest image received
before it. :func:`write_episode_bag` writes an :class:`Episode` as such a bag (tests, data conversion).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from training.vla.data.episode import Episode

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BagTopics:
    """Topic names read from (and written to) a bag."""

    image: str = "/camera/color/image_raw"
    arm_cmd: str = "/arm_cmd"
    ee_delta: str = "/ee_delta_cmd"
    gripper: str = "/gripper_cmd"
    instruction: str = "/instruction"
    phase: str = "/phase"


def _typestore() -> Any:
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS2_KILTED)


def _image_array(msg: Any, topic: str) -> np.ndarray:
    enc = str(msg.encoding)
    if enc not in ("rgb8", "bgr8"):
        raise ValueError(f"{topic}: image encoding {enc!r} is not supported (rgb8 or bgr8)")
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    data = np.asarray(msg.data, dtype=np.uint8)
    if step < 3 * w or data.size != h * step:
        raise ValueError(f"{topic}: image of {h}x{w} with step {step} has {data.size} bytes (inconsistent)")
    arr = data.reshape(h, step)[:, : 3 * w].reshape(h, w, 3)
    return np.ascontiguousarray(arr[..., ::-1] if enc == "bgr8" else arr)


def _resize(img: np.ndarray, size: int | None) -> np.ndarray:
    if size is None or img.shape[:2] == (size, size):
        return img
    from PIL import Image

    return np.asarray(Image.fromarray(img).resize((size, size), Image.BILINEAR), dtype=np.uint8)


def read_bag_episode(path: str | Path, topics: BagTopics | None = None, instruction: str | None = None,
                     image_size: int | None = None, task: str = "") -> Episode:
    """One :class:`Episode` from a rosbag2 directory; ValueError (naming the bag) when it is corrupt or lacks data."""
    from rosbags.highlevel import AnyReader, AnyReaderError
    from rosbags.rosbag2 import ReaderError

    topics = topics or BagTopics()
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no bag at {path}")
    if not path.is_dir() or not (path / "metadata.yaml").is_file():
        raise ValueError(f"{path} is not a rosbag2 directory (no metadata.yaml; was the recording closed?)")
    msgs: list[tuple[int, str, Any]] = []
    try:
        with AnyReader([path], default_typestore=_typestore()) as reader:
            present = {c.topic for c in reader.connections}
            # delta + gripper together: the pair is only a mirror then (a recorder opens a topic as soon as a
            # publisher exists, so an /arm_cmd without messages means the commands came on the pair)
            one_message = any(c.topic == topics.arm_cmd and c.msgcount > 0 for c in reader.connections)
            command = topics.arm_cmd if one_message else topics.ee_delta
            for needed in (topics.image, command):
                if needed not in present:
                    also = f" nor {topics.arm_cmd!r} messages" if needed == topics.ee_delta else ""
                    raise ValueError(f"bag {path} has no topic {needed!r}{also} (topics: {sorted(present)})")
            wanted = {topics.image, topics.instruction, topics.phase}
            wanted |= {topics.arm_cmd} if one_message else {topics.ee_delta, topics.gripper}
            conns = [c for c in reader.connections if c.topic in wanted]
            for conn, t, raw in reader.messages(connections=conns):
                msgs.append((t, conn.topic, reader.deserialize(raw, conn.msgtype)))
    except (AnyReaderError, ReaderError) as exc:
        raise ValueError(f"cannot read bag {path}: {exc}") from exc
    except ValueError:
        raise
    except Exception as exc:  # a truncated/garbled MCAP surfaces as assorted parser errors
        raise ValueError(f"cannot read bag {path} (corrupt?): {type(exc).__name__}: {exc}") from exc

    frames, deltas, grip, phases = [], [], [], []
    image: np.ndarray | None = None
    g, phase, instr = -1.0, "", instruction
    for _, topic, msg in sorted(msgs, key=lambda m: m[0]):
        if topic == topics.image:
            image = _resize(_image_array(msg, topic), image_size)
        elif topic == topics.gripper:
            g = float(msg.data)
        elif topic == topics.instruction and instruction is None:
            instr = str(msg.data)
        elif topic == topics.phase:
            phase = str(msg.data)
        elif topic in (topics.ee_delta, topics.arm_cmd):
            if image is None:
                log.debug("%s: command before the first image skipped", path)
                continue
            if topic == topics.arm_cmd:
                lin, g = msg.delta, float(msg.gripper)
            else:
                lin = msg.twist.linear
            frames.append(image)
            deltas.append((lin.x, lin.y, lin.z))
            grip.append(float(np.clip(g, -1.0, 1.0)) if np.isfinite(g) else 0.0)
            phases.append(phase)
    if not frames:
        raise ValueError(f"bag {path}: no {command} command after an image on {topics.image}")
    if not instr:
        raise ValueError(f"bag {path}: no instruction (no {topics.instruction} message; pass instruction=...)")
    d = np.asarray(deltas, dtype=np.float64)
    if not np.isfinite(d).all():
        raise ValueError(f"bag {path}: {command} holds non-finite values")
    return Episode(np.stack(frames), d, np.asarray(grip), phases, instr, task,
                   {"source": "rosbag", "path": str(path)})


def write_episode_bag(ep: Episode, path: str | Path, topics: BagTopics | None = None, period_ns: int = 50_000_000,
                      storage: str = "mcap") -> Path:
    """Write ``ep`` as a rosbag2 bag (image, then phase/gripper, then the delta command per step)."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    topics = topics or BagTopics()
    ts = _typestore()
    Image, TwistStamped = ts.types["sensor_msgs/msg/Image"], ts.types["geometry_msgs/msg/TwistStamped"]
    Float32, String = ts.types["std_msgs/msg/Float32"], ts.types["std_msgs/msg/String"]
    Header, Time = ts.types["std_msgs/msg/Header"], ts.types["builtin_interfaces/msg/Time"]
    Twist, Vector3 = ts.types["geometry_msgs/msg/Twist"], ts.types["geometry_msgs/msg/Vector3"]
    plugin = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}[storage]
    path = Path(path)

    def header(t: int) -> Any:
        return Header(stamp=Time(sec=t // 10**9, nanosec=t % 10**9), frame_id="base")

    with Writer(path, version=9, storage_plugin=plugin) as w:
        c = {name: w.add_connection(topic, typ.__msgtype__, typestore=ts) for name, topic, typ in (
            ("image", topics.image, Image), ("delta", topics.ee_delta, TwistStamped),
            ("gripper", topics.gripper, Float32), ("instruction", topics.instruction, String),
            ("phase", topics.phase, String))}

        def put(name: str, t: int, msg: Any) -> None:
            w.write(c[name], t, ts.serialize_cdr(msg, msg.__msgtype__))

        t0 = 1_000_000_000
        put("instruction", t0, String(data=ep.instruction))
        h, wd = ep.image_size
        for i in range(len(ep)):
            t = t0 + (i + 1) * period_ns
            put("image", t, Image(header=header(t), height=h, width=wd, encoding="rgb8", is_bigendian=0,
                                  step=3 * wd, data=np.ascontiguousarray(ep.frames[i]).reshape(-1)))
            if ep.phases[i]:
                put("phase", t + 1, String(data=ep.phases[i]))
            put("gripper", t + 2, Float32(data=float(ep.gripper[i])))
            dx, dy, dz = (float(v) for v in ep.deltas[i])
            put("delta", t + 3, TwistStamped(header=header(t + 3), twist=Twist(
                linear=Vector3(x=dx, y=dy, z=dz), angular=Vector3(x=0.0, y=0.0, z=0.0))))
    return path

"""The ``recorder`` node: records topics to a rosbag2 MCAP bag without rosbag2 (rosbags writes the file).

Messages are taken as raw CDR bytes (``raw=True``) and written unchanged with the receive time in ns, so
anything that arrives is recorded, even a message whose contents are inconsistent (e.g. an Image with a wrong
``step``). Parameters:

* ``topics`` (string[]): topics to record (default: camera colour/depth, ``/cmd_vel``, ``/instruction``, ``/odom``).
* ``output`` (string): bag directory, must not exist (default ``runs/bags/<YYYYmmdd-HHMMSS>``).
* ``types`` (string[]): ROS type names aligned with ``topics`` (``sensor_msgs/msg/Image``); when empty each
  topic's type is discovered from the graph on a timer until all are found.
* ``latched_topics`` (string[]): topics subscribed transient-local when no publisher is visible yet (default
  ``["/instruction"]``). Otherwise QoS follows the publishers: reliable unless one offers best effort,
  transient-local only if all offer it (a transient-local subscription never matches a volatile publisher).
* ``qos_depth`` (int, 100), ``discovery_period_s`` (0.25), ``status_period_s`` (1.0): the node publishes a
  ``diagnostic_msgs/DiagnosticArray`` on ``/diagnostics`` with the per-topic message counts.

``read_bag`` / ``bag_counts`` read the result back.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rosbags.highlevel import AnyReader, AnyReaderError
from rosbags.rosbag2 import Reader, ReaderError, StoragePlugin, Writer
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from allday_ros.safety import LogOnce
from allday_ros.spin import run_node

__all__ = ["DEFAULT_TOPICS", "RecorderNode", "bag_counts", "main", "read_bag"]

DEFAULT_TOPICS = ["/camera/color/image_raw", "/camera/depth/image_raw", "/cmd_vel", "/instruction", "/odom"]


def _typestore():
    return get_typestore(Stores.ROS2_KILTED)


def _normalise_type(name: str) -> str:
    """``pkg/Name`` or ``pkg/msg/Name`` -> ``pkg/msg/Name``; anything else raises ValueError."""
    parts = name.strip().split("/")
    if len(parts) == 2:
        parts = [parts[0], "msg", parts[1]]
    if len(parts) != 3 or parts[1] != "msg" or not all(parts):
        raise ValueError(f"bad message type {name!r}; expected 'pkg/msg/Name'")
    return "/".join(parts)


def _message_class(type_name: str) -> type:
    pkg, _, cls = type_name.split("/")
    try:
        return getattr(importlib.import_module(f"{pkg}.msg"), cls)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"message type {type_name} is not importable in this Python ({exc})") from None


class RecorderNode(Node):
    """Records raw CDR messages of ``topics`` into an MCAP bag (see the module docstring for parameters)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("recorder", **kwargs)
        self.topics: list[str] = list(self.declare_parameter("topics", DEFAULT_TOPICS).value)
        default_out = str(Path("runs") / "bags" / time.strftime("%Y%m%d-%H%M%S"))
        self.output = Path(self.declare_parameter("output", default_out).value)
        types = self._string_array("types")
        self.latched = set(self._string_array("latched_topics", ["/instruction"]))
        self.qos_depth = int(self.declare_parameter("qos_depth", 100).value)
        discovery_period = float(self.declare_parameter("discovery_period_s", 0.25).value)
        status_period = float(self.declare_parameter("status_period_s", 1.0).value)
        if not self.topics or len(set(self.topics)) != len(self.topics):
            raise ValueError(f"topics must be a non-empty list of distinct names, got {self.topics}")
        if types and len(types) != len(self.topics):
            raise ValueError(f"types ({len(types)}) must align with topics ({len(self.topics)}): "
                             f"{types} vs {self.topics}")
        if self.qos_depth < 1 or discovery_period <= 0 or status_period <= 0:
            raise ValueError("qos_depth, discovery_period_s and status_period_s must be > 0")

        self._log_once = LogOnce()
        self._typestore = _typestore()
        self._pending: dict[str, str | None] = {t: (_normalise_type(ty) if types else None)
                                                for t, ty in zip(self.topics, types or [None] * len(self.topics))}
        self.counts: dict[str, int] = {t: 0 for t in self.topics}
        self._subs: dict[str, Any] = {}
        self._writer: Writer | None = Writer(self.output, version=9, storage_plugin=StoragePlugin.MCAP)
        self._writer.open()
        self.get_logger().info(f"recording {self.topics} to {self.output}")

        self._discovery_timer = self.create_timer(discovery_period, self._try_subscribe)
        self._try_subscribe()
        self._status_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._status_timer = self.create_timer(status_period, self._publish_status)

    # ------------------------------------------------------------------------------------------- parameters

    def _string_array(self, name: str, default: list[str] | None = None) -> list[str]:
        if default:
            return [str(v) for v in self.declare_parameter(name, default).value]
        self.declare_parameter(name, Parameter.Type.STRING_ARRAY)  # an empty default cannot carry a type
        try:
            value = self.get_parameter(name).value
        except ParameterUninitializedException:
            return []
        return [str(v) for v in (value or []) if str(v)]

    # ------------------------------------------------------------------------------------------ subscribing

    def _qos_for(self, topic: str) -> QoSProfile:
        pubs = self.get_publishers_info_by_topic(topic)
        reliable = all(p.qos_profile.reliability != ReliabilityPolicy.BEST_EFFORT for p in pubs)
        if pubs:
            latched = all(p.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL for p in pubs)
        else:
            latched = topic in self.latched
        return QoSProfile(
            history=HistoryPolicy.KEEP_LAST, depth=self.qos_depth,
            reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
            durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE,
        )

    def _ensure_known_type(self, type_name: str) -> None:
        """Register a non-standard type in the typestore from its installed ``.msg`` file (custom interfaces)."""
        if type_name in self._typestore.fielddefs:
            return
        pkg, _, name = type_name.split("/")
        try:
            from ament_index_python.packages import get_package_share_directory

            text = (Path(get_package_share_directory(pkg)) / "msg" / f"{name}.msg").read_text()
            self._typestore.register(get_types_from_msg(text, type_name))
        except Exception as exc:  # any failure here means "cannot record this type"
            raise ValueError(f"type {type_name} is unknown to the rosbags typestore and its .msg file could not be "
                             f"loaded ({exc})") from None

    def _try_subscribe(self) -> None:
        """Subscribe to every pending topic whose type is known (given, or now visible in the graph)."""
        if not self._pending or self._writer is None:
            return
        graph = dict(self.get_topic_names_and_types())
        for topic, type_name in list(self._pending.items()):
            if type_name is None:
                # wait for a publisher (not just any endpoint) so that the QoS can follow what it offers
                if topic not in graph or not self.get_publishers_info_by_topic(topic):
                    continue
                found = graph[topic]
                if len(found) > 1:
                    self._log_once(self.get_logger(), f"multi:{topic}",
                                   f"{topic} has several types {found}; recording {found[0]}")
                type_name = found[0]
            try:
                type_name = _normalise_type(type_name)
                cls = _message_class(type_name)
                self._ensure_known_type(type_name)
                conn = self._writer.add_connection(topic, type_name, typestore=self._typestore)
            except Exception as exc:  # one bad topic must not stop the others
                self._log_once(self.get_logger(), f"type:{topic}", f"not recording {topic}: {exc}")
                del self._pending[topic]
                continue
            qos = self._qos_for(topic)
            events = SubscriptionEventCallbacks(incompatible_qos=self._incompatible_cb(topic))
            self._subs[topic] = self.create_subscription(cls, topic, self._message_cb(topic, conn), qos,
                                                         event_callbacks=events, raw=True)
            del self._pending[topic]
            self.get_logger().info(f"recording {topic} [{type_name}] reliability={qos.reliability.name} "
                                   f"durability={qos.durability.name}")
        if not self._pending:
            self._discovery_timer.cancel()
            self.get_logger().info(f"subscribed to {len(self._subs)} of {len(self.topics)} topics")

    def _message_cb(self, topic: str, conn: Any) -> Callable[[bytes], None]:
        def cb(raw: bytes) -> None:
            if self._writer is None:
                return
            self._writer.write(conn, self.get_clock().now().nanoseconds, raw)
            self.counts[topic] += 1

        return cb

    def _incompatible_cb(self, topic: str) -> Callable[[Any], None]:
        def cb(info: Any) -> None:
            self._log_once(self.get_logger(), f"qos:{topic}",
                           f"{topic}: a publisher's QoS is incompatible with the recorder's subscription "
                           f"(policy {info.last_policy_kind}); its messages are NOT recorded")

        return cb

    # ---------------------------------------------------------------------------------------------- status

    def _publish_status(self) -> None:
        st = DiagnosticStatus(name="recorder", hardware_id=str(self.output))
        if self._pending:
            st.level, st.message = DiagnosticStatus.WARN, f"waiting for topics: {sorted(self._pending)}"
        else:
            st.level, st.message = DiagnosticStatus.OK, f"recording {len(self._subs)} topics"
        st.values = [KeyValue(key=t, value=str(n)) for t, n in self.counts.items()]
        arr = DiagnosticArray(status=[st])
        arr.header.stamp = self.get_clock().now().to_msg()
        self._status_pub.publish(arr)

    # -------------------------------------------------------------------------------------------- shutdown

    def close(self) -> None:
        """Stop recording and finalise the bag (idempotent)."""
        writer, self._writer = getattr(self, "_writer", None), None  # None if __init__ failed early
        if writer is not None:
            writer.close()
            text = f"closed {self.output}: {sum(self.counts.values())} messages {self.counts}"
            if self.context.ok():
                self.get_logger().info(text)
            else:  # after SIGINT the context is shut down and the logger's /rosout publisher is gone
                print(f"[recorder] {text}", file=sys.stderr, flush=True)

    def destroy_node(self) -> None:
        self.close()
        super().destroy_node()


# -------------------------------------------------------------------------------------------------- reading


def _check_bag(path: Path) -> None:
    if not path.exists():
        raise FileNotFoundError(f"no bag at {path}")
    if not path.is_dir() or not (path / "metadata.yaml").is_file():
        raise ValueError(f"{path} is not a rosbag2 directory (no metadata.yaml; was the recorder killed before it "
                         "could close the bag?)")


def read_bag(path: str | Path) -> list[tuple[str, int, object]]:
    """Every message of a rosbag2 bag as ``(topic, t_ns, message)`` in time order (rosbags dataclasses)."""
    path = Path(path)
    _check_bag(path)
    try:
        with AnyReader([path], default_typestore=_typestore()) as reader:
            return [(conn.topic, t, reader.deserialize(raw, conn.msgtype))
                    for conn, t, raw in reader.messages()]
    except (AnyReaderError, ReaderError) as exc:
        raise ValueError(f"cannot read bag {path}: {exc}") from exc


def bag_counts(path: str | Path) -> dict[str, int]:
    """Messages per topic, from the bag's metadata."""
    path = Path(path)
    _check_bag(path)
    counts: dict[str, int] = {}
    try:
        with Reader(path) as reader:
            for conn in reader.connections:
                counts[conn.topic] = counts.get(conn.topic, 0) + conn.msgcount
    except ReaderError as exc:
        raise ValueError(f"cannot read bag {path}: {exc}") from exc
    return counts


# ---------------------------------------------------------------------------------------------------- main


def main(args: list[str] | None = None) -> None:
    """Entry point: ``recorder --ros-args -p output:=runs/bags/x -p "topics:=['/a','/b']"``."""
    run_node(RecorderNode, args, "recorder")


if __name__ == "__main__":
    main()

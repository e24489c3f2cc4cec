"""The recorder node, cross-process: everything published reaches the MCAP bag byte-for-byte."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("rclpy", reason="ROS 2 tests need rclpy (the ros extra)")

from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from geometry_msgs.msg import Twist  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from allday_ros.conversions import ImageFormatError, image_to_msg, msg_to_image  # noqa: E402
from allday_ros.recorder import bag_counts, read_bag  # noqa: E402
from tests.ros.conftest import spin_until  # noqa: E402

pytestmark = pytest.mark.ros

RGB, CMD, INSTR, ODOM = "/camera/color/image_raw", "/cmd_vel", "/instruction", "/odom"
RELIABLE = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
BEST_EFFORT = QoSProfile(depth=50, reliability=ReliabilityPolicy.BEST_EFFORT)


class RecorderCounts:
    """Follows the recorder's /diagnostics message counts, so the test stops it only once all arrived."""

    def __init__(self, node) -> None:
        self.counts: dict[str, int] = {}
        node.create_subscription(DiagnosticArray, "/diagnostics", self._cb, 10)

    def _cb(self, msg: DiagnosticArray) -> None:
        for st in msg.status:
            if st.name == "recorder":
                self.counts = {kv.key: int(kv.value) for kv in st.values}


def _publish_at_rate(node, n: int, hz: float, publish) -> None:
    """Call ``publish(i)`` for i in 0..n-1 from a timer at ``hz`` (a reliable flood can fail to publish)."""
    sent = []
    timer = node.create_timer(1.0 / hz, lambda: (publish(len(sent)), sent.append(1)) if len(sent) < n else None)
    assert spin_until(node, lambda: len(sent) >= n, timeout=n / hz + 5)
    node.destroy_timer(timer)


def _stop(proc) -> str:
    out = proc.stop()
    assert proc.proc.returncode == 0, out
    return out


def test_records_every_message_identically(tmp_path, start_node, ros_node):
    out = tmp_path / "bag"
    rec = start_node("recorder", "-p", f"output:={out}", "-p", f"topics:=['{RGB}','{CMD}','{INSTR}','{ODOM}']",
                     "-p", "status_period_s:=0.1")
    counts = RecorderCounts(ros_node)
    pubs = {RGB: ros_node.create_publisher(Image, RGB, RELIABLE),
            CMD: ros_node.create_publisher(Twist, CMD, RELIABLE),
            INSTR: ros_node.create_publisher(String, INSTR, LATCHED),
            ODOM: ros_node.create_publisher(Odometry, ODOM, BEST_EFFORT)}
    # types are discovered from the graph, so the recorder subscribes only after these publishers exist; the
    # best-effort /odom publisher matches only if the recorder adapted its QoS (a reliable reader would not match)
    assert spin_until(ros_node, lambda: all(p.get_subscription_count() > 0 for p in pubs.values()), timeout=15), \
        "recorder never subscribed"

    rng = np.random.default_rng(1)
    images = [rng.integers(0, 256, size=(48, 64, 3), dtype=np.uint8) for _ in range(30)]
    text = "walk past the sofa and stop at the kitchen door"
    pubs[INSTR].publish(String(data=text))

    def publish(i: int) -> None:
        pubs[RGB].publish(image_to_msg(images[i], "rgb8", frame_id=f"f{i}"))
        tw = Twist()
        tw.linear.x, tw.angular.z = 0.01 * i, -0.02 * i
        pubs[CMD].publish(tw)
        odom = Odometry()
        odom.pose.pose.position.x = float(i)
        pubs[ODOM].publish(odom)

    _publish_at_rate(ros_node, 30, 30.0, publish)
    expected = {RGB: 30, CMD: 30, INSTR: 1, ODOM: 30}
    assert spin_until(ros_node, lambda: counts.counts == expected, timeout=10), counts.counts
    _stop(rec)

    assert bag_counts(out) == expected
    msgs = read_bag(out)
    by_topic = {t: [(ts, m) for topic, ts, m in msgs if topic == t] for t in expected}
    stamps = [ts for _, ts, _ in msgs]
    assert stamps == sorted(stamps) and stamps[0] > 0
    got_imgs = [m for _, m in by_topic[RGB]]
    assert [m.header.frame_id for m in got_imgs] == [f"f{i}" for i in range(30)]  # order preserved
    for sent, m in zip(images, got_imgs):
        assert bytes(m.data) == sent.tobytes()
        np.testing.assert_array_equal(msg_to_image(m, "rgb8", (48, 64, 3)), sent)
    assert [(m.linear.x, m.angular.z) for _, m in by_topic[CMD]] == [(0.01 * i, -0.02 * i) for i in range(30)]
    assert [m.data for _, m in by_topic[INSTR]] == [text]
    assert [m.pose.pose.position.x for _, m in by_topic[ODOM]] == [float(i) for i in range(30)]


def test_malformed_image_is_recorded_raw_and_does_not_break_recording(tmp_path, start_node, ros_node):
    out = tmp_path / "bag"
    rec = start_node("recorder", "-p", f"output:={out}", "-p", f"topics:=['{RGB}']",
                     "-p", "types:=['sensor_msgs/msg/Image']", "-p", "status_period_s:=0.1")
    counts = RecorderCounts(ros_node)
    pub = ros_node.create_publisher(Image, RGB, RELIABLE)
    assert spin_until(ros_node, lambda: pub.get_subscription_count() > 0, timeout=15), "recorder never subscribed"

    img = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)

    def publish(i: int) -> None:
        msg = image_to_msg(img, "rgb8", frame_id=f"f{i}")
        if i % 2:  # every other image has a step that disagrees with its data
            msg.step = 7
        pub.publish(msg)

    _publish_at_rate(ros_node, 6, 30.0, publish)
    assert spin_until(ros_node, lambda: counts.counts == {RGB: 6}, timeout=10), counts.counts
    _stop(rec)

    msgs = [m for _, _, m in read_bag(out)]
    assert [m.header.frame_id for m in msgs] == [f"f{i}" for i in range(6)]
    assert [m.step for m in msgs] == [15, 7, 15, 7, 15, 7]
    for i, m in enumerate(msgs):
        assert bytes(m.data) == img.tobytes()
        if i % 2:
            with pytest.raises(ImageFormatError, match="step 7 too small"):
                msg_to_image(m)
        else:
            np.testing.assert_array_equal(msg_to_image(m), img)


def test_read_bag_rejects_missing_or_corrupt_bags(tmp_path):
    with pytest.raises(FileNotFoundError, match="no bag at"):
        read_bag(tmp_path / "nope")
    (tmp_path / "half").mkdir()
    with pytest.raises(ValueError, match="no metadata.yaml"):
        read_bag(tmp_path / "half")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "metadata.yaml").write_text("rosbag2_bagfile_information: {version: 9}\n")
    (bad / "bad.mcap").write_bytes(b"not an mcap file")
    with pytest.raises(ValueError, match="cannot read bag"):
        read_bag(bad)
    with pytest.raises(ValueError, match="cannot read bag"):
        bag_counts(bad)

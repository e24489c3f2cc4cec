"""Safety layer: velocity clamps, non-finite commands, stale-input watchdog, log-once, diagnostics."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("geometry_msgs.msg", reason="needs the ROS message packages (the ros extra)")

from diagnostic_msgs.msg import DiagnosticStatus  # noqa: E402
from geometry_msgs.msg import Twist  # noqa: E402

from allday_ros.safety import (  # noqa: E402
    LogOnce,
    SafetyLayer,
    VelocityLimits,
    Watchdog,
    clamp_twist,
    policy_status,
    zero_twist,
)

pytestmark = pytest.mark.ros


def _tw(lx=0.0, ly=0.0, lz=0.0, ax=0.0, ay=0.0, az=0.0):
    t = Twist()
    t.linear.x, t.linear.y, t.linear.z = lx, ly, lz
    t.angular.x, t.angular.y, t.angular.z = ax, ay, az
    return t


def _vec(t):
    return [t.linear.x, t.linear.y, t.linear.z, t.angular.x, t.angular.y, t.angular.z]


def test_limits_are_validated():
    assert VelocityLimits() == VelocityLimits(0.5, 1.0)
    for bad in (0.0, -1.0, float("nan"), float("inf"), True, "1"):
        with pytest.raises(ValueError, match="max_linear"):
            VelocityLimits(max_linear=bad)
        with pytest.raises(ValueError, match="max_angular"):
            VelocityLimits(max_angular=bad)


def test_clamp_every_component_and_returns_a_new_twist():
    lim = VelocityLimits(0.5, 1.0)
    src = _tw(0.9, -0.7, 0.2, 2.0, -3.0, 1.5)
    out, reason = clamp_twist(src, lim)
    assert out is not src
    assert _vec(out) == [0.5, -0.5, 0.2, 1.0, -1.0, 1.0]
    assert _vec(src) == [0.9, -0.7, 0.2, 2.0, -3.0, 1.5]  # input untouched
    for part in ("linear.x 0.9 -> 0.5", "linear.y -0.7 -> -0.5", "angular.x 2 -> 1", "angular.z 1.5 -> 1"):
        assert part in reason
    assert "linear.z" not in reason


def test_clamp_within_limits_has_no_reason():
    out, reason = clamp_twist(_tw(0.5, az=-1.0), VelocityLimits(0.5, 1.0))
    assert reason is None and _vec(out) == [0.5, 0.0, 0.0, 0.0, 0.0, -1.0]


@pytest.mark.parametrize("field", range(6))
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_gives_zero(field, bad):
    vals = [0.1] * 6
    vals[field] = bad
    out, reason = clamp_twist(_tw(*vals), VelocityLimits())
    assert _vec(out) == [0.0] * 6
    assert reason.startswith("non-finite velocity")


def test_zero_twist():
    assert _vec(zero_twist()) == [0.0] * 6


def test_watchdog_stale_after_timeout_and_fresh_after_feed():
    wd = Watchdog(timeout_s=0.5, inputs=("camera", "instruction"))
    assert wd.stale(0.0) == ["camera", "instruction"] and not wd.ok(0.0)  # never fed = stale
    wd.feed("camera", 10.0)
    assert wd.stale(10.1) == ["instruction"]
    wd.feed("instruction", 10.2)
    assert wd.ok(10.5) and wd.stale(10.5) == []
    assert wd.stale(10.6) == ["camera"]  # 0.6 s > 0.5 s
    assert wd.stale(10.75) == ["camera", "instruction"]
    wd.feed("camera", 10.8)
    assert wd.stale(10.8) == ["instruction"]
    assert "never received" in Watchdog(inputs=("x",)).describe("x", 0.0)
    with pytest.raises(ValueError, match="unknown watchdog input 'cmaera'"):
        wd.feed("cmaera", 1.0)
    with pytest.raises(ValueError, match="timeout_s"):
        Watchdog(timeout_s=0.0)


def test_log_once_logs_once_per_key_until_reset(caplog):
    logger = logging.getLogger("allday.test_safety")
    once = LogOnce()
    with caplog.at_level(logging.WARNING, logger="allday.test_safety"):
        assert once(logger, "a", "first a") is True
        assert once(logger, "a", "second a") is False
        assert once(logger, "b", "first b") is True
        once.reset("a")
        assert once(logger, "a", "third a") is True
    assert [r.getMessage() for r in caplog.records] == ["first a", "first b", "third a"]


def _layer(dry_run=False):
    return SafetyLayer(VelocityLimits(0.5, 1.0), Watchdog(0.5, ("camera", "instruction")), dry_run=dry_run)


def _feed_all(layer, t):
    for name in layer.watchdog.inputs:
        layer.watchdog.feed(name, t)


def test_safety_layer_zero_on_stale_clamped_otherwise():
    layer = _layer()
    out, reasons = layer.filter(_tw(0.3, az=0.2), now=0.0)
    assert _vec(out) == [0.0] * 6
    assert reasons == ["stale input camera: never received", "stale input instruction: never received"]
    _feed_all(layer, 1.0)
    out, reasons = layer.filter(_tw(0.3, az=0.2), now=1.1)
    assert _vec(out) == [0.3, 0, 0, 0, 0, 0.2] and reasons == []
    out, reasons = layer.filter(_tw(2.0), now=1.2)
    assert out.linear.x == 0.5 and reasons == ["clamped linear.x 2 -> 0.5"]
    out, reasons = layer.filter(_tw(0.3), now=1.8)  # camera and instruction now 0.8 s old
    assert _vec(out) == [0.0] * 6 and any("no message for 0.80 s" in r for r in reasons)


def test_clamp_applies_limits_without_the_watchdog_and_records_the_clamp():
    layer = _layer()  # nothing fed: filter would zero everything as stale
    out, reason = layer.clamp(_tw(0.3, az=0.2), now=0.0)
    assert _vec(out) == [0.3, 0, 0, 0, 0, 0.2] and reason is None and layer.last_clamp_time is None
    out, reason = layer.clamp(_tw(-2.0), now=0.5)
    assert out.linear.x == -0.5 and reason == "clamped linear.x -2 -> -0.5"
    assert (layer.last_clamp_reason, layer.last_clamp_time) == (reason, 0.5)
    _feed_all(layer, 0.5)
    st = layer.diagnostic_status(0.6, "s")
    assert st.level == DiagnosticStatus.WARN and "-2 -> -0.5" in st.message


def _values(status):
    return {kv.key: kv.value for kv in status.values}


def test_diagnostic_levels_and_values():
    layer = _layer(dry_run=True)
    st = layer.diagnostic_status(0.0, "vln: safety", "robot1")
    assert st.level == DiagnosticStatus.ERROR and "camera: never received" in st.message
    assert (st.name, st.hardware_id) == ("vln: safety", "robot1")
    v = _values(st)
    assert v["stale_inputs"] == "camera,instruction" and v["dry_run"] == "true"
    assert (v["max_linear"], v["max_angular"], v["last_clamp_reason"]) == ("0.5", "1", "")

    _feed_all(layer, 1.0)
    assert layer.diagnostic_status(1.1, "s").level == DiagnosticStatus.OK
    layer.filter(_tw(az=-5.0), now=1.2)
    st = layer.diagnostic_status(1.3, "s")
    assert st.level == DiagnosticStatus.WARN and "angular.z -5 -> -1" in st.message
    assert _values(st)["last_clamp_reason"] == "clamped angular.z -5 -> -1"
    _feed_all(layer, 5.0)  # long after the clamp: back to OK, reason kept for the record
    st = layer.diagnostic_status(5.0, "s")
    assert st.level == DiagnosticStatus.OK and _values(st)["last_clamp_reason"].startswith("clamped")
    assert _values(_layer(dry_run=False).diagnostic_status(0.0, "s"))["dry_run"] == "false"


def test_non_finite_command_is_reported():
    layer = _layer()
    _feed_all(layer, 0.0)
    out, reasons = layer.filter(_tw(float("nan")), 0.1)
    assert _vec(out) == [0.0] * 6 and reasons[0].startswith("non-finite velocity")
    assert layer.diagnostic_status(0.2, "s").level == DiagnosticStatus.WARN


def test_policy_status_warns_on_routing_fallback():
    ok = policy_status({"route": (1, 2), "routing": "routed", "routing_failures": 0, "calls": 3})
    assert ok.level == DiagnosticStatus.OK and "routed" in ok.message
    assert {kv.key: kv.value for kv in ok.values}["route"] == "(1, 2)"
    bad = policy_status({"route": (None, None), "routing": "fallback: shared knowledge only (no prototypes)",
                         "routing_failures": 1})
    assert bad.level == DiagnosticStatus.WARN and "shared knowledge" in bad.message

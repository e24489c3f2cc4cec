"""Safety layer shared by every robot-facing node: velocity clamps, stale-input watchdog, diagnostics.

Nodes call :meth:`SafetyLayer.filter` on every outgoing ``cmd_vel`` and publish what it returns (a zero
Twist whenever an input is stale or a velocity is not finite), feed the watchdog from their input callbacks
and publish :meth:`SafetyLayer.diagnostic_status` on ``/diagnostics``. Times are float seconds from one
monotonic clock (e.g. ``node.get_clock().now().nanoseconds * 1e-9``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from diagnostic_msgs.msg import DiagnosticStatus, KeyValue
from geometry_msgs.msg import Twist

__all__ = ["LogOnce", "SafetyLayer", "VelocityLimits", "Watchdog", "clamp_twist", "zero_twist"]

_COMPONENTS = (("linear", "x"), ("linear", "y"), ("linear", "z"), ("angular", "x"), ("angular", "y"), ("angular", "z"))


def _finite_positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class VelocityLimits:
    """Absolute limits applied per component: |linear.*| <= max_linear (m/s), |angular.*| <= max_angular (rad/s)."""

    max_linear: float = 0.5
    max_angular: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_linear", _finite_positive("max_linear", self.max_linear))
        object.__setattr__(self, "max_angular", _finite_positive("max_angular", self.max_angular))


def zero_twist() -> Twist:
    """A Twist with every component 0 (the stop command)."""
    return Twist()


def clamp_twist(twist: Twist, limits: VelocityLimits) -> tuple[Twist, str | None]:
    """Return a new Twist clamped to ``limits`` and why (None when nothing changed).

    Any NaN/inf component gives a zero Twist and a reason starting with ``"non-finite velocity"``.
    """
    bad = [f"{g}.{a}={getattr(getattr(twist, g), a)}" for g, a in _COMPONENTS
           if not math.isfinite(getattr(getattr(twist, g), a))]
    if bad:
        return zero_twist(), f"non-finite velocity ({', '.join(bad)})"
    out = Twist()
    clamped = []
    for group, axis in _COMPONENTS:
        v = float(getattr(getattr(twist, group), axis))
        lim = limits.max_linear if group == "linear" else limits.max_angular
        c = min(max(v, -lim), lim)
        setattr(getattr(out, group), axis, c)
        if c != v:
            clamped.append(f"{group}.{axis} {v:g} -> {c:g}")
    return out, ("clamped " + ", ".join(clamped)) if clamped else None


class Watchdog:
    """Tracks when each named input last arrived; an input never fed, or older than ``timeout_s``, is stale."""

    def __init__(self, timeout_s: float = 0.5, inputs: Iterable[str] = ("camera", "instruction")) -> None:
        self.timeout_s = _finite_positive("timeout_s", timeout_s)
        self.inputs = tuple(inputs)
        if len(set(self.inputs)) != len(self.inputs):
            raise ValueError(f"watchdog inputs must be unique, got {self.inputs}")
        self._last: dict[str, float] = {}

    def feed(self, name: str, now: float) -> None:
        """Record that input ``name`` arrived at time ``now`` (seconds)."""
        if name not in self.inputs:
            raise ValueError(f"unknown watchdog input {name!r}; expected one of {self.inputs}")
        self._last[name] = float(now)

    def reset(self) -> None:
        """Forget every input (all stale again)."""
        self._last.clear()

    def age(self, name: str, now: float) -> float | None:
        """Seconds since ``name`` was fed, or None if never."""
        t = self._last.get(name)
        return None if t is None else float(now) - t

    def stale(self, now: float) -> list[str]:
        """Names of the stale inputs, in declaration order."""
        out = []
        for name in self.inputs:
            age = self.age(name, now)
            if age is None or age > self.timeout_s:
                out.append(name)
        return out

    def ok(self, now: float) -> bool:
        """True when no input is stale."""
        return not self.stale(now)

    def describe(self, name: str, now: float) -> str:
        """A human reason for one input, e.g. ``"camera: never received"``."""
        age = self.age(name, now)
        if age is None:
            return f"{name}: never received"
        return f"{name}: no message for {age:.2f} s (timeout {self.timeout_s:.2f} s)"


class LogOnce:
    """Log a warning once per key (until :meth:`reset`), so a persisting fault does not flood the log."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def __call__(self, logger: Any, key: str, msg: str) -> bool:
        """Warn ``msg`` through ``logger`` (rclpy or logging) unless ``key`` was already logged; True if logged."""
        if key in self._seen:
            return False
        self._seen.add(key)
        logger.warning(msg)
        return True

    def reset(self, key: str | None = None) -> None:
        """Allow ``key`` (or every key, when None) to be logged again, e.g. once the fault has cleared."""
        if key is None:
            self._seen.clear()
        else:
            self._seen.discard(key)


class SafetyLayer:
    """Velocity limits + watchdog + dry-run flag, with a diagnostics summary.

    ``dry_run`` is reported in diagnostics; nodes read it to decide whether to publish to the robot at all.
    A clamp keeps the status at WARN for ``clamp_warn_s`` seconds.
    """

    def __init__(
        self,
        limits: VelocityLimits | None = None,
        watchdog: Watchdog | None = None,
        dry_run: bool = False,
        clamp_warn_s: float = 2.0,
    ) -> None:
        self.limits = limits if limits is not None else VelocityLimits()
        self.watchdog = watchdog if watchdog is not None else Watchdog()
        self.dry_run = bool(dry_run)
        self.clamp_warn_s = _finite_positive("clamp_warn_s", clamp_warn_s)
        self.last_clamp_reason: str | None = None
        self.last_clamp_time: float | None = None

    def filter(self, twist: Twist, now: float) -> tuple[Twist, list[str]]:
        """The Twist safe to publish at ``now`` and the reasons it differs from ``twist`` (empty when unchanged)."""
        stale = self.watchdog.stale(now)
        if stale:
            return zero_twist(), [f"stale input {self.watchdog.describe(n, now)}" for n in stale]
        out, reason = self.clamp(twist, now)
        return out, ([] if reason is None else [reason])

    def clamp(self, twist: Twist, now: float) -> tuple[Twist, str | None]:
        """``twist`` within the limits and the reason it changed (None when unchanged), without the watchdog.

        A change is recorded for :meth:`diagnostic_status` (WARN for ``clamp_warn_s``); for nodes that handle
        staleness themselves (e.g. with a grace period) and only need the limits."""
        out, reason = clamp_twist(twist, self.limits)
        if reason is not None:
            self.last_clamp_reason, self.last_clamp_time = reason, float(now)
        return out, reason

    def diagnostic_status(self, now: float, name: str, hardware_id: str = "") -> DiagnosticStatus:
        """ERROR when an input is stale, WARN when a command was clamped in the last ``clamp_warn_s``, else OK."""
        stale = self.watchdog.stale(now)
        clamped_recently = self.last_clamp_time is not None and now - self.last_clamp_time <= self.clamp_warn_s
        status = DiagnosticStatus(name=name, hardware_id=hardware_id)
        if stale:
            status.level = DiagnosticStatus.ERROR
            status.message = "stale inputs: " + "; ".join(self.watchdog.describe(n, now) for n in stale)
        elif clamped_recently:
            status.level = DiagnosticStatus.WARN
            status.message = f"velocity {self.last_clamp_reason}"
        else:
            status.level = DiagnosticStatus.OK
            status.message = "ok"
        values = {
            "stale_inputs": ",".join(stale),
            "dry_run": str(self.dry_run).lower(),
            "last_clamp_reason": self.last_clamp_reason or "",
            "max_linear": f"{self.limits.max_linear:g}",
            "max_angular": f"{self.limits.max_angular:g}",
            "watchdog_timeout_s": f"{self.watchdog.timeout_s:g}",
        }
        status.values = [KeyValue(key=k, value=v) for k, v in values.items()]
        return status


def policy_status(report: dict[str, Any], name: str = "vln_node: policy", hardware_id: str = "allday"
                  ) -> DiagnosticStatus:
    """A policy's ``diagnostics()`` dict as a DiagnosticStatus: WARN when expert routing fell back to the shared
    knowledge (or failed), else OK; every entry becomes a KeyValue."""
    routing = str(report.get("routing", ""))
    status = DiagnosticStatus(name=name, hardware_id=hardware_id)
    if routing.startswith("fallback") or int(report.get("routing_failures", 0) or 0) > 0:
        status.level, status.message = DiagnosticStatus.WARN, f"routing: {routing or 'failed'}"
    else:
        status.level, status.message = DiagnosticStatus.OK, f"routing: {routing}" if routing else "ok"
    status.values = [KeyValue(key=str(k), value=str(v)) for k, v in report.items()]
    return status

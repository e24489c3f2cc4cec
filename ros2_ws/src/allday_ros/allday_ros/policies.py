"""Navigation policies the vln_node can serve, by name (a registry; learned agents plug in here)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.core.baselines import ForwardPolicy, RandomPolicy
from agents.core.policy import Policy
from agents.core.registry import Registry
from agents.core.types import NavAction, Observation

NAV_POLICIES: Registry[Callable[[dict[str, Any]], Policy]] = Registry("navigation policy")


class EpisodeAwarePolicy(Policy):
    """A policy that also sees the episode status published by the simulator (scene id, goal)."""

    def on_episode(self, status: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """Called with each new episode's status message."""


class RosOraclePolicy(EpisodeAwarePolicy):
    """The shortest-path teacher driven by what crosses the wire: scene + goal from /episode/status, pose
    from /odom. Works with generated scenes (``allday/<style>/<seed>``), whose geometry it rebuilds."""

    name = "oracle"

    def __init__(self, params: dict[str, Any]) -> None:
        self._follower = None
        self._goal: tuple[float, float] | None = None
        self.forward_step = float(params.get("forward_step", 0.25))
        self.turn_angle_deg = float(params.get("turn_angle_deg", 15.0))

    def on_episode(self, status: dict[str, Any]) -> None:
        from sim.core.frames import habitat_to_mj
        from sim.nav.follower import ShortestPathFollower
        from sim.nav.motion import MotionSpec
        from sim.nav.occupancy import grid_for_scene

        grid = grid_for_scene(status["scene_id"])
        self._follower = ShortestPathFollower(grid, MotionSpec(self.forward_step, self.turn_angle_deg))
        gx, gy, _ = habitat_to_mj(status["goal"])
        self._goal = (gx, gy)

    def act(self, observation: Observation) -> NavAction:
        from sim.core.frames import habitat_to_mj, theta_to_phi

        if self._follower is None or self._goal is None:
            raise RuntimeError("the oracle needs an episode status (scene id and goal) before acting")
        x, y, _ = habitat_to_mj(observation.pose.position)
        return self._follower.next_action(x, y, theta_to_phi(observation.pose.heading), *self._goal)


NAV_POLICIES.register("oracle")(RosOraclePolicy)
NAV_POLICIES.register("forward")(lambda params: ForwardPolicy(int(params.get("forward_steps", 37))))
NAV_POLICIES.register("random")(lambda params: RandomPolicy(seed=int(params.get("seed", 0))))


@NAV_POLICIES.register("alldaywalker")
def _alldaywalker(params: dict[str, Any]) -> Policy:
    """The AlldayWalker VLM navigator from a checkpoint directory (``allday train vln`` -> ``<out>/final``).
    A TuKA checkpoint routes its experts itself; with ``routing_fallback`` (checkpoint config or this param) a
    failed routing acts with the shared knowledge only and says so in ``policy.diagnostics()``."""
    from dataclasses import replace

    from agents.vln.configuration_vln import VLNAgentConfig
    from agents.vln.modeling_vln import AlldayWalkerPolicy

    ckpt = str(params.get("checkpoint") or "")
    if not ckpt:
        raise ValueError("agent 'alldaywalker' needs the 'checkpoint' parameter (a saved navigator directory)")
    if str(params.get("quantization", "none")) not in ("none", ""):
        raise ValueError(f"agent 'alldaywalker' does not support quantization={params['quantization']!r} yet")
    cfg = None
    if "routing_fallback" in params:
        cfg = replace(VLNAgentConfig.load(ckpt), routing_fallback=bool(params["routing_fallback"]))
    return AlldayWalkerPolicy.from_pretrained(ckpt, device=str(params.get("device", "cpu")), config=cfg)


def make_policy(name: str, params: dict[str, Any]) -> Policy:
    """Build a navigation policy by registry name (KeyError listing the known names)."""
    return NAV_POLICIES.get(name)(params)


#: name -> factory(params) of the policies this node serves; learned VLA policies (agents.vla) register here too
VLA_POLICIES: Registry[Callable[[dict[str, Any]], Policy]] = Registry("VLA policy")


def _scripted(task: str) -> Callable[[dict[str, Any]], Policy]:
    def make(params: dict[str, Any]) -> Policy:
        from sim.manip.experts import make_expert

        return make_expert(task, max_step_m=min(0.03, float(params.get("max_delta", 0.05))))

    return make


for _task in ("lift", "stack", "pick_place_can"):
    VLA_POLICIES.register(f"scripted_{_task}")(_scripted(_task))


def _vlm2vla(params: dict[str, Any]) -> Policy:
    """The VLM2VLA policy (agents.vla) from ``checkpoint``; subtasks are verified from the simulator state."""
    import sim.manip.verifier  # noqa: F401 - registers the "sim_state" verifier
    from agents.vla import policy_from_params

    return policy_from_params({"verifier": "sim_state", **params})


VLA_POLICIES.register("vlm2vla")(_vlm2vla)

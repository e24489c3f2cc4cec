"""Run a policy over episodes in a navigation env and compute VLN-CE metrics."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tqdm import tqdm

from agents.core.baselines import ForwardPolicy, RandomPolicy
from agents.core.policy import Policy
from agents.core.registry import Registry
from sim import metrics
from sim.core.env import BaseNavEnv

log = logging.getLogger(__name__)

#: agent name -> factory(env, seed) -> Policy
EVAL_AGENTS: Registry[Callable[[BaseNavEnv, int], Policy]] = Registry("eval agent")


@EVAL_AGENTS.register("oracle")
def _oracle(env: BaseNavEnv, seed: int) -> Policy:
    from sim.nav.follower import OraclePolicy

    if not hasattr(env, "oracle_action"):
        raise ValueError(f"the {type(env).__name__} backend has no shortest-path oracle")
    return OraclePolicy(env)


EVAL_AGENTS.register("random")(lambda env, seed: RandomPolicy(seed=seed))
EVAL_AGENTS.register("forward")(lambda env, seed: ForwardPolicy())


def run_episode(env: BaseNavEnv, policy: Policy, episode_index: int, condition: str | None = None,
                on_step: Callable[[dict[str, Any], dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Roll out one episode; returns its metrics plus ids. ``on_step(obs, info)`` sees every frame."""
    options: dict[str, Any] = {"episode_index": episode_index}
    if condition:
        options["condition"] = condition
    obs, info = env.reset(options=options)
    policy.reset()
    if on_step:
        on_step(obs, info)
    done = False
    while not done:
        action = policy.act(env.to_observation(obs))
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        if on_step:
            on_step(obs, info)
    return {"episode_id": info["episode_id"], "scene_id": info["scene_id"], "condition": info["condition"],
            **info["metrics"]}


def evaluate(env: BaseNavEnv, agent: str | Policy, condition: str | None = None, limit: int | None = None,
             seed: int = 0, progress: bool = True) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Aggregate metrics (means + ``episodes``) and per-episode rows over the env's episodes."""
    policy = EVAL_AGENTS.get(agent)(env, seed) if isinstance(agent, str) else agent
    n = len(env.episodes) if limit is None else min(limit, len(env.episodes))
    if n == 0:
        raise ValueError("no episodes to evaluate")
    rows = [run_episode(env, policy, i, condition) for i in tqdm(range(n), desc=f"eval {policy.name}",
                                                                  disable=not progress)]
    return metrics.aggregate(rows), rows

"""Helpers shared by the lifelong-VLN report scripts (``lifelong_vln.py`` and ``scripts/lifelong_pool.py``): JSON
cleaning, the binomial standard error of an average SR and the paired one of a difference, and reading older
reports (references, config defaults). Light to import: the project's training code loads only when a config needs
its defaults."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any


def clean_json(x: Any) -> Any:
    """``x`` with every NaN or infinite float replaced by None (strict JSON), through dicts, lists and tuples."""
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    if isinstance(x, dict):
        return {k: clean_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean_json(v) for v in x]
    return x


def binomial_var(srs: list[float], n: int) -> float:
    """Sum over tasks of the binomial variance p (1 - p) / n of each task's success rate over ``n`` episodes."""
    return sum(p * (1 - p) / n for p in srs)


def sr_se(srs: list[float], n: int) -> float:
    """Standard error of the mean of per-task success rates, each over ``n`` held-out episodes (binomial)."""
    return math.sqrt(binomial_var(srs, n)) / max(len(srs), 1)


def paired_terms(a: list[list[int]], b: list[list[int]]) -> tuple[list[float], float]:
    """Per task, the mean per-episode difference of two policies on the same held-out episodes (each episode's
    outcome, 0/1, under ``a`` and under ``b``, in the same order), and the sum over tasks of each mean's variance
    (the per-episode differences' variance / n, the same convention as :func:`sr_se`'s p(1 - p) / n)."""
    if len(a) != len(b) or any(len(x) != len(y) or not x for x, y in zip(a, b)):
        raise ValueError(f"paired outcomes need the same tasks and episodes on both sides, got "
                         f"{[len(x) for x in a]} and {[len(y) for y in b]}")
    means, var = [], 0.0
    for x, y in zip(a, b):
        d = [int(u) - int(v) for u, v in zip(x, y)]
        m = sum(d) / len(d)
        means.append(m)
        var += sum((v - m) ** 2 for v in d) / len(d) / len(d)
    return means, var


def paired_diff(a: list[list[int]], b: list[list[int]]) -> tuple[float, float]:
    """(difference of the average SRs, its standard error) of two policies on the same held-out episodes, per task
    as :func:`paired_terms`. Episodes both solve or both fail add no noise, unlike the unpaired SE from
    :func:`sr_se` of each side; against a policy that solves nothing the two are equal."""
    means, var = paired_terms(a, b)
    if not means:
        raise ValueError("paired outcomes need at least one task")
    return sum(means) / len(means), math.sqrt(var) / len(means)


def reference_avg(on: dict, tasks, key: str = "sr") -> float | None:
    """Mean ``key`` of a reference policy (``{task name: metrics}``) over ``tasks`` (None without tasks)."""
    return float(sum(on[t.name][key] for t in tasks) / len(tasks)) if tasks else None


def report_references(report: dict) -> dict:
    """A report's reference rows (older reports kept only the base navigator's, under ``base_navigator``)."""
    refs = dict(report.get("references") or {})
    if "base" not in refs and report.get("base_navigator", {}).get("on_tasks"):
        refs["base"] = report["base_navigator"]["on_tasks"]
    return refs


def config_with_defaults(config: dict) -> dict:
    """A report's config with the LifelongConfig fields it predates filled in with their defaults."""
    from training.vln.lifelong import LifelongConfig

    defaults = {f.name: f.default for f in dataclasses.fields(LifelongConfig) if f.default is not dataclasses.MISSING}
    return {**defaults, **config}


#: report-level settings outside ``config`` that decide what counts as a success (older reports lack them: True)
SCORING_KEYS = ("success_distance", "physical_conditions")


def protocol_differences(a: dict, b: dict, ignore: Iterable[str] = ()) -> list[str]:
    """Why report ``b`` is not comparable with report ``a``: each differing scoring key and config setting (configs
    filled with their defaults first, ``ignore`` aside), as ``"key (A against B)"``; empty when comparable."""
    from agents.core.config import differing_keys

    out = [f"{k} ({a.get(k, 'unset')} against {b.get(k, 'unset')})" for k in SCORING_KEYS
           if a.get(k, True) != b.get(k, True)]
    ca, cb = config_with_defaults(a.get("config") or {}), config_with_defaults(b.get("config") or {})
    return out + [f"{k} ({ca.get(k)} against {cb.get(k)})" for k in differing_keys(ca, cb, ignore=ignore)]


def resolve_base(parser: Any, base_dir: str | None, cfg: Any, progress: bool = False) -> tuple[Any, dict[str, Any]]:
    """``(final dir, build record)`` of the base navigator: the exported base ``base_dir`` (``--base-dir``, checked
    against ``cfg`` with every file's SHA-256; a mismatch is a usage error through ``parser``) or, without one, the
    cached base of ``cfg``, trained once if missing."""
    if base_dir:
        from training.vln.base_store import use_base

        try:
            return use_base(base_dir, cfg)
        except ValueError as exc:
            parser.error(f"--base-dir: {exc}")
    from training.vln.navigator import base_navigator

    return base_navigator(cfg, progress=progress)


def summary_line(results: dict[str, dict], references: dict[str, dict], tasks: list) -> dict[str, Any]:
    """The figures of the JSON line a run prints last: per method, and TuKA's routing (all tasks, learnt tasks and
    unseen pairs apart) and the unseen pairs' SR with their own experts composed (``oracle_route``, no routing)."""
    tuka = results.get("tuka_dkil", {})
    return {"avg_sr": {m: r["avg"]["sr"] for m, r in results.items()},
            "forgetting": {m: r["forgetting"]["sr"]["relative"] for m, r in results.items()},
            "offline_acc": {m: r["offline"]["avg"]["token_acc"] for m, r in results.items() if r["offline"]},
            "offline_forgetting": {m: r["offline"]["forgetting"]["token_acc"] for m, r in results.items()
                                   if r["offline"]},
            "unseen_sr": {m: r["unseen"]["sr"] for m, r in results.items()},
            **{key: tuka.get(key) for key in ("routing_acc", "routing_env_acc", "routing_acc_seen",
                                              "routing_acc_unseen")},
            "oracle_route_sr": {m: r["oracle_route"]["avg"]["sr"] for m, r in results.items() if r["oracle_route"]},
            "oracle_route_unseen_sr": {m: r["oracle_route"]["unseen"]["sr"] for m, r in results.items()
                                       if r["oracle_route"] and r["oracle_route"].get("unseen")},
            "served_parity": tuka.get("served_parity"),
            "reference_avg_sr": {k: reference_avg(on, tasks) for k, on in references.items()}}

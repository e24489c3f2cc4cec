"""The subtask verifier protocol: after each action chunk, decide whether to advance to the next subtask or retry.

VLM2VLA's inference loop (paper §"inference") asks a verifier, given the observations before and after a chunk
and the current and next subtask, whether the current subtask is done. Implementations: a scripted always-advance
verifier and a VLM-prompt verifier (:mod:`agents.vla.verifiers`), a privileged sim-state verifier
(:mod:`sim.manip.verifier`). They register by name in :data:`VERIFIERS` (``factory(**kwargs) -> Verifier``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from agents.core.registry import Registry


class Verdict(str, Enum):
    """What to do after a chunk: ``advance`` to the next subtask or ``retry`` the current one."""

    ADVANCE = "advance"
    RETRY = "retry"


@runtime_checkable
class Verifier(Protocol):
    """Decides advance / retry after an executed chunk.

    ``before`` / ``after``: the observations (dicts with at least ``rgb``; simulators add privileged state such
    as ``ee_pos``, ``objects``, ``grasped``) at the start and the end of the chunk; ``subtask``: the subtask the
    chunk was generated for; ``next_subtask``: the one after it (None for the last).
    """

    def verify(self, before: Mapping[str, Any], after: Mapping[str, Any], subtask: str,
               next_subtask: str | None) -> Verdict: ...


#: verifier name -> factory(**kwargs) -> Verifier ("always_advance", "vlm" from agents.vla; "sim_state" from sim)
VERIFIERS: Registry[Callable[..., Verifier]] = Registry("subtask verifier")


class AlwaysAdvance:
    """Advances after every chunk (tests, and open-loop execution of the subtask plan)."""

    def verify(self, before: Mapping[str, Any], after: Mapping[str, Any], subtask: str,
               next_subtask: str | None) -> Verdict:
        return Verdict.ADVANCE


VERIFIERS.register("always_advance")(lambda **kw: AlwaysAdvance())

"""Verifiers living in agents: the VLM-prompt verifier (registered as ``vlm``); ``always_advance`` is in agents.core.

The paper used an external VLM (Gemini 2.5 Pro) because the base model was unreliable as its own verifier; this
one asks any :class:`~agents.vlm.VLMBundle` (the policy's own model or another) the :data:`~agents.vla.prompts.VERIFY`
question about the image after the chunk, and reads ``yes`` / ``no``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from agents.core.verifier import VERIFIERS, Verdict
from agents.vla.prompts import parse_yes_no, verify_prompt
from agents.vlm import GenerationSettings, VLMBundle, generate_text

log = logging.getLogger(__name__)


class VLMPromptVerifier:
    """Asks a VLM whether ``subtask`` is completed in the ``after`` image. Unreadable answers are resampled up
    to ``tries`` times; if none is readable the verifier advances (``on_unreadable``) and counts it."""

    def __init__(self, bundle: VLMBundle, instruction_key: str = "instruction", tries: int = 3,
                 temperature: float = 0.5, on_unreadable: Verdict = Verdict.ADVANCE, seed: int = 0) -> None:
        if not isinstance(bundle, VLMBundle):
            raise TypeError(f"bundle must be a VLMBundle, got {type(bundle).__name__}")
        if tries < 1:
            raise ValueError(f"tries must be >= 1, got {tries}")
        self.bundle, self.instruction_key, self.tries = bundle, instruction_key, int(tries)
        self.temperature, self.on_unreadable, self.seed = float(temperature), Verdict(on_unreadable), int(seed)
        self.calls = 0
        self.unreadable = 0

    def verify(self, before: Mapping[str, Any], after: Mapping[str, Any], subtask: str,
               next_subtask: str | None) -> Verdict:
        prompt = verify_prompt(str(after.get(self.instruction_key, "")), subtask)
        self.calls += 1
        for k in range(self.tries):
            s = GenerationSettings(max_new_tokens=4, temperature=0.0 if k == 0 else self.temperature,
                                   top_p=0.95, seed=self.seed + 7919 * self.calls + k)
            answer = parse_yes_no(generate_text(self.bundle, after["rgb"], prompt, s))
            if answer is not None:
                return Verdict.ADVANCE if answer else Verdict.RETRY
        self.unreadable += 1
        log.debug("verifier answer unreadable after %d tries: %s", self.tries, self.on_unreadable.value)
        return self.on_unreadable


VERIFIERS.register("vlm")(lambda bundle, **kw: VLMPromptVerifier(bundle, **kw))

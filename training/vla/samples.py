"""Training samples ``(image, prompt, target)`` from relabelled episodes, for any action codec of
:data:`agents.vla.codecs.CODECS`.

Hierarchical codecs (``language`` = VLM2VLA, ``action_tokens`` = VLM2VLA-AT) get the paper's three factors of
p(a_i, m_i, l_i | o_i, L), one prompt template each (:mod:`agents.vla.prompts`, shared with the policy):

* (o_0, L) -> the subtask list ``l_1; ...; l_N``;
* (o_i, L, l_i) -> the motion plan m_i;
* (o_i, L, l_i, m_i) -> the action chunk a_i, encoded by the codec (text, or token ids for action tokens);

with ``replan``, the same two prompts from every later frame of a step, targeting the rest of the step (its motion
plan and chunk: what a policy planning again mid-step, ``VLAPolicyConfig.replan_steps``, has left to do);
plus, with ``aux``, the paper's auxiliary samples: subtask completion (o after step i -> "yes", o before it ->
"no", with the verifier prompt the policy uses) and sideways movement (left / right / none). The paper's
completion question shows two images (before, after); the tiny models take one, so each image is asked alone.

Flat codecs (``binned``, OpenVLA-style) get one sample per merged chunk element: (o_t, L) -> that element's tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from training.vla.relabel.base import LanguageEpisode

DIRECTION = "task: {instruction}\nsubtask: {subtask}\ndoes the arm move left or right? answer left, right or none."


@dataclass(frozen=True)
class Sample:
    """One supervised example: image (HxWx3 uint8), prompt text, target (text or token ids) and its kind."""

    image: np.ndarray
    prompt: str
    target: str | tuple[int, ...]
    kind: str

    def __post_init__(self) -> None:
        if not isinstance(self.image, np.ndarray) or self.image.ndim != 3 or self.image.dtype != np.uint8:
            raise ValueError(f"sample image must be HxWx3 uint8, got {getattr(self.image, 'shape', None)}")
        if not isinstance(self.target, str):
            object.__setattr__(self, "target", tuple(int(t) for t in self.target))
        if not self.prompt.strip() or not self.target or (isinstance(self.target, str) and not self.target.strip()):
            raise ValueError(f"sample ({self.kind}) needs a non-empty prompt and target")


def build_samples(lang: list[LanguageEpisode], codec: Any, aux: bool = True, replan: bool = False) -> list[Sample]:
    """All samples of ``lang`` for ``codec`` (see the module docstring)."""
    from agents.vla.action_language import format_subtasks
    from agents.vla.prompts import actions_prompt, motion_prompt, subtasks_prompt, verify_prompt

    out: list[Sample] = []
    for le in lang:
        ep, instr = le.episode, le.episode.instruction
        if not codec.hierarchical:
            for i in range(len(le.steps)):
                chunk, spans = le.chunk(i)
                for elem, (a, _) in zip(chunk, spans, strict=True):
                    out.append(Sample(ep.frames[a], actions_prompt(instr), codec.encode(elem[None, :]), "action"))
            continue
        out.append(Sample(ep.frames[0], subtasks_prompt(instr), format_subtasks(le.subtasks), "subtasks"))
        for i, st in enumerate(le.steps):
            img = ep.frames[st.start]
            out.append(Sample(img, motion_prompt(instr, st.subtask), st.motion, "motion"))
            chunk, _ = le.chunk(i)
            out.append(Sample(img, actions_prompt(instr, st.subtask, st.motion), codec.encode(chunk), "action"))
            for t in range(st.start + 1, st.end) if replan else ():
                rest, motion = le.rest(i, t)
                out.append(Sample(ep.frames[t], motion_prompt(instr, st.subtask), motion, "motion"))
                out.append(Sample(ep.frames[t], actions_prompt(instr, st.subtask, motion), codec.encode(rest),
                                  "action"))
            if aux:
                out.append(Sample(img, verify_prompt(instr, st.subtask), "no", "completion"))
                if st.end < len(ep):
                    out.append(Sample(ep.frames[st.end], verify_prompt(instr, st.subtask), "yes", "completion"))
                out.append(Sample(img, DIRECTION.format(instruction=instr, subtask=st.subtask), st.direction,
                                  "direction"))
    if not out:
        raise ValueError("no samples: the language episodes are empty")
    return out


def sample_corpus(lang: list[LanguageEpisode]) -> list[str]:
    """Texts a tiny model's tokenizer is trained on: instructions, subtasks, motion plans and the prompt words."""
    from agents.vla import prompts

    texts = {prompts.SUBTASKS, prompts.MOTION, prompts.ACTIONS, prompts.ACTIONS_FLAT, prompts.VERIFY, DIRECTION}
    for le in lang:
        texts.add(le.episode.instruction)
        texts.update(s.subtask for s in le.steps)
        texts.update(s.motion for s in le.steps)
    return sorted(texts)

"""Prompt templates of the three factors p(l|o,L) p(m|l,o) p(a|m,l,o), the verifier question, and instruction checks.

Training (``training/vla``) and inference (:class:`agents.vla.policy.VLAPolicy`) both build prompts here, so the
two always agree. Targets: :func:`agents.vla.action_language.format_subtasks`, ``motion_plan``, the codec's
``encode``; the verifier answers ``yes`` / ``no``.
"""

from __future__ import annotations

SUBTASKS = "task: {instruction}\nlist the subtasks."
MOTION = "task: {instruction}\nsubtask: {subtask}\nhow should the arm move?"
ACTIONS = "task: {instruction}\nsubtask: {subtask}\nmotion: {motion}\nactions in cm:"
#: non-hierarchical codecs (the OpenVLA-style binned baseline) go straight from the instruction to actions
ACTIONS_FLAT = "task: {instruction}\nactions:"
VERIFY = "task: {instruction}\nsubtask: {subtask}\nis the subtask completed? answer yes or no."
MAX_INSTRUCTION_CHARS = 500


def check_instruction(instruction: object, allow_non_english: bool = False) -> str:
    """Normalise an instruction (whitespace collapsed); ValueError naming ``instruction`` when it is not a
    string, empty, longer than 500 characters, or (unless ``allow_non_english``) not English text: letters must
    be ASCII (Latin) and at least one word must be present."""
    if not isinstance(instruction, str):
        raise TypeError(f"instruction must be a string, got {type(instruction).__name__}")
    text = " ".join(instruction.split())
    if not text:
        raise ValueError("instruction is empty")
    if len(text) > MAX_INSTRUCTION_CHARS:
        raise ValueError(f"instruction has {len(text)} characters (limit {MAX_INSTRUCTION_CHARS})")
    if not allow_non_english:
        letters = [c for c in text if c.isalpha()]
        non_ascii = [c for c in letters if not c.isascii()]
        if not letters or len(non_ascii) > 0.1 * len(letters):
            raise ValueError(f"instruction must be English text (ASCII letters); got {text[:60]!r}. "
                             "Set allow_non_english=True to pass other languages to the model as they are.")
    return text


def subtasks_prompt(instruction: str) -> str:
    return SUBTASKS.format(instruction=instruction)


def motion_prompt(instruction: str, subtask: str) -> str:
    return MOTION.format(instruction=instruction, subtask=subtask)


def actions_prompt(instruction: str, subtask: str | None = None, motion: str | None = None) -> str:
    """The action prompt; without ``subtask`` (non-hierarchical codecs) the flat template."""
    if subtask is None:
        return ACTIONS_FLAT.format(instruction=instruction)
    return ACTIONS.format(instruction=instruction, subtask=subtask, motion=motion or "")


def verify_prompt(instruction: str, subtask: str) -> str:
    return VERIFY.format(instruction=instruction, subtask=subtask)


def parse_yes_no(text: str) -> bool | None:
    """``yes`` -> True, ``no`` -> False (case/punctuation-insensitive first word), anything else -> None."""
    words = text.strip().lower().replace(".", " ").replace(",", " ").split()
    if not words or words[0] not in ("yes", "no"):
        return None
    return words[0] == "yes"

"""The navigator's action language: the four VLN-CE actions as words, several future steps per call (StreamVLN).

A model answer is a space-separated list of action words, e.g. ``"forward forward left stop"``. Parsing is strict
(every word must be an action word, nothing may follow ``stop``); :func:`parse_with_fallback` keeps the valid
prefix of a malformed answer and falls back to a configured action when nothing valid is left.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agents.core.types import NavAction

#: action word of each NavAction (one word each, so each step is one short token run)
ACTION_WORDS: dict[NavAction, str] = {
    NavAction.STOP: "stop",
    NavAction.MOVE_FORWARD: "forward",
    NavAction.TURN_LEFT: "left",
    NavAction.TURN_RIGHT: "right",
}
WORD_TO_ACTION: dict[str, NavAction] = {w: a for a, w in ACTION_WORDS.items()}
#: where the goal object is in the current frame: the optional first word of an answer, before a colon
GOAL_WORDS = ("left", "ahead", "right", "none")
_SPLIT = re.compile(r"[\s,;]+")


class ActionParseError(ValueError):
    """A model answer that is not a valid action sentence."""


def format_actions(actions: Sequence[int | NavAction]) -> str:
    """``[1, 1, 2, 0] -> "forward forward left stop"``; the list ends at the first STOP."""
    words: list[str] = []
    for a in actions:
        act = NavAction.parse(a)
        words.append(ACTION_WORDS[act])
        if act == NavAction.STOP:
            break
    if not words:
        raise ValueError("actions must hold at least one action")
    return " ".join(words)


def format_answer(actions: Sequence[int | NavAction], goal: str | None = None) -> str:
    """The model's answer: the action words (:func:`format_actions`), after ``"<goal>:"`` when a goal location
    (one of ``GOAL_WORDS``) is given, e.g. ``"right: right forward forward"``."""
    text = format_actions(actions)
    if goal is None:
        return text
    if goal not in GOAL_WORDS:
        raise ValueError(f"goal must be one of {GOAL_WORDS}, got {goal!r}")
    return f"{goal}: {text}"


def split_goal(text: str) -> tuple[str | None, str]:
    """``"left: forward forward" -> ("left", "forward forward")``; ``(None, text)`` when the answer does not start
    with a goal word and a colon (the actions are then read from the whole text)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    head, sep, rest = text.strip().partition(":")
    goal = head.strip().lower()
    if sep and goal in GOAL_WORDS:
        return goal, rest
    return None, text


def parse_actions(text: str, max_steps: int | None = None) -> list[NavAction]:
    """Strictly parse an action sentence (case and surrounding punctuation/whitespace ignored).

    Raises ActionParseError for an empty answer, an unknown word, a word after ``stop`` or more than
    ``max_steps`` actions.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    words = [w for w in _SPLIT.split(text.strip().lower().strip(".!")) if w]
    if not words:
        raise ActionParseError("empty action answer")
    out: list[NavAction] = []
    for i, w in enumerate(words):
        if w not in WORD_TO_ACTION:
            raise ActionParseError(f"unknown action word {w!r} at position {i}; expected one of "
                                   f"{sorted(WORD_TO_ACTION)}")
        if out and out[-1] == NavAction.STOP:
            raise ActionParseError(f"word {w!r} after 'stop' at position {i}")
        out.append(WORD_TO_ACTION[w])
    if max_steps is not None and len(out) > max_steps:
        raise ActionParseError(f"{len(out)} actions exceed max_steps={max_steps}")
    return out


def parse_with_fallback(text: str, max_steps: int, fallback: NavAction | None = NavAction.STOP
                        ) -> tuple[list[NavAction], bool]:
    """Parse leniently: the longest valid prefix (at most ``max_steps``), else ``[fallback]``.

    Returns ``(actions, ok)`` where ``ok`` is True only if the whole answer parsed strictly. With ``fallback=None``
    a fully invalid answer raises ActionParseError instead.
    """
    try:
        return parse_actions(text, max_steps), True
    except ActionParseError:
        pass
    out: list[NavAction] = []
    for w in (w for w in _SPLIT.split(str(text).strip().lower().strip(".!")) if w):
        if w not in WORD_TO_ACTION or len(out) >= max_steps:
            break
        out.append(WORD_TO_ACTION[w])
        if out[-1] == NavAction.STOP:
            break
    if out:
        return out, False
    if fallback is None:
        raise ActionParseError(f"no valid action in model answer {text!r}")
    return [NavAction.parse(fallback)], False

"""The navigator's action language: strict parsing, lenient fallback, round trip (hypothesis fuzz)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.core.types import NavAction
from agents.vln.actions import (
    GOAL_WORDS,
    ActionParseError,
    format_actions,
    format_answer,
    parse_actions,
    parse_with_fallback,
    split_goal,
)
from agents.vln.configuration_vln import VLNAgentConfig

moves = st.lists(st.sampled_from([NavAction.MOVE_FORWARD, NavAction.TURN_LEFT, NavAction.TURN_RIGHT]), max_size=7)


@given(moves, st.booleans())
@settings(max_examples=80, deadline=None)
def test_round_trip(acts, stop):
    seq = acts + [NavAction.STOP] if stop or not acts else acts
    text = format_actions(seq)
    assert parse_actions(text) == seq
    assert parse_actions("  " + text.upper() + ". ") == seq  # case, padding and a final period are tolerated


def test_known_answers():
    assert parse_actions("forward forward left stop") == [1, 1, 2, 0]
    assert format_actions([1, 3, 0, 1, 1]) == "forward right stop"  # ends at the first STOP
    assert parse_actions("forward, left; right") == [1, 2, 3]


@pytest.mark.parametrize("text,why", [("", "empty"), ("forward jump", "unknown action word 'jump'"),
                                      ("stop forward", "after 'stop'"), ("forward " * 5, "exceed max_steps")])
def test_strict_errors(text, why):
    with pytest.raises(ActionParseError, match=why):
        parse_actions(text, max_steps=4)


def test_parse_type_error():
    with pytest.raises(TypeError, match="text must be a str"):
        parse_actions(None)  # type: ignore[arg-type]


@given(st.text(max_size=40))
@settings(max_examples=120, deadline=None)
def test_fallback_never_fails_and_is_bounded(text):
    acts, ok = parse_with_fallback(text, 4, NavAction.STOP)
    assert 1 <= len(acts) <= 4
    assert all(isinstance(a, NavAction) for a in acts)
    assert NavAction.STOP not in acts[:-1]  # nothing after stop
    if ok:
        assert acts == parse_actions(text, 4)


def test_fallback_keeps_valid_prefix_and_uses_fallback():
    assert parse_with_fallback("forward left banana right", 4, NavAction.STOP) == ([1, 2], False)
    assert parse_with_fallback("forward forward forward forward forward", 4) == ([1, 1, 1, 1], False)
    assert parse_with_fallback("???", 4, NavAction.TURN_LEFT) == ([NavAction.TURN_LEFT], False)
    with pytest.raises(ActionParseError, match="no valid action"):
        parse_with_fallback("???", 4, None)


@given(moves, st.sampled_from(GOAL_WORDS))
@settings(max_examples=40, deadline=None)
def test_goal_prefix_round_trip(acts, goal):
    seq = acts + [NavAction.STOP]
    text = format_answer(seq, goal)
    assert text.startswith(goal + ": ")
    g, rest = split_goal(text)
    assert g == goal and parse_actions(rest) == seq
    assert format_answer(seq) == format_actions(seq)


def test_split_goal_needs_a_goal_word_and_a_colon():
    assert split_goal(" Ahead : forward stop") == ("ahead", " forward stop")
    assert split_goal("forward left") == (None, "forward left")  # no prefix: the whole text is actions
    assert split_goal("up: forward") == (None, "up: forward")  # not a goal word
    with pytest.raises(ValueError, match="goal must be one of"):
        format_answer([1], "behind")
    with pytest.raises(TypeError):
        split_goal(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("kw,field", [({"num_future_steps": 0}, "num_future_steps"), ({"fallback": "jump"}, "fallback"),
                                      ({"execute_steps": 9}, "execute_steps"), ({"num_history": -1}, "num_history"),
                                      ({"routing_fallback": "yes"}, "routing_fallback"),
                                      ({"goal_prefix": 1}, "goal_prefix")])
def test_agent_config_validation(kw, field):
    with pytest.raises((ValueError, TypeError), match=field):
        VLNAgentConfig(**kw)
    with pytest.raises(ValueError, match="unknown VLNAgentConfig keys"):
        VLNAgentConfig.from_dict({"bogus": 1})

"""VLM2VLA manipulation policies (issue #5): the action language, codecs, verifiers and the inference loop.

Importing this package is light (numpy only); the model stack is imported when a policy or VLM is built.
"""

from agents.vla.action_language import (
    GRAMMAR_VERSION,
    ChunkLimits,
    MalformedActionError,
    check_motion,
    encode_chunk,
    format_chunk,
    format_subtasks,
    gripper_states,
    merge_deltas,
    motion_plan,
    parse_chunk,
    parse_subtasks,
    state_to_command,
)
from agents.vla.checkpoint import load_policy, policy_from_params, save_policy
from agents.vla.codecs import CODECS, ActionCodec, codec_from_dict, make_codec, rare_tokens
from agents.vla.config import VLAPolicyConfig
from agents.vla.constrained import Constrainer, GrammarConstraint
from agents.vla.policy import VLAAction, VLAGenerationError, VLAPolicy, VLAStats
from agents.vla.verifiers import VLMPromptVerifier

__all__ = [
    "CODECS",
    "GRAMMAR_VERSION",
    "ActionCodec",
    "ChunkLimits",
    "Constrainer",
    "GrammarConstraint",
    "MalformedActionError",
    "VLAAction",
    "VLAGenerationError",
    "VLAPolicy",
    "VLAPolicyConfig",
    "VLAStats",
    "VLMPromptVerifier",
    "check_motion",
    "codec_from_dict",
    "encode_chunk",
    "format_chunk",
    "format_subtasks",
    "gripper_states",
    "load_policy",
    "make_codec",
    "merge_deltas",
    "motion_plan",
    "parse_chunk",
    "parse_subtasks",
    "policy_from_params",
    "rare_tokens",
    "save_policy",
    "state_to_command",
]

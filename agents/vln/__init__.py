"""Vision-and-language navigation agents (AlldayWalker, issue #6): a VLM navigator writing action words.

Heavy imports (torch, transformers) happen only when a model is built or loaded.
"""

from agents.vln.actions import ACTION_WORDS, ActionParseError, format_actions, parse_actions, parse_with_fallback
from agents.vln.configuration_vln import VLNAgentConfig
from agents.vln.router import ExpertActivator, ExpertRouter, PrototypeTable, RoutingError

__all__ = ["ACTION_WORDS", "ActionParseError", "ExpertActivator", "ExpertRouter", "PrototypeTable", "RoutingError",
           "VLNAgentConfig", "format_actions", "parse_actions", "parse_with_fallback", "AlldayWalkerPolicy"]


def __getattr__(name: str):
    if name == "AlldayWalkerPolicy":
        from agents.vln.modeling_vln import AlldayWalkerPolicy

        return AlldayWalkerPolicy
    raise AttributeError(name)

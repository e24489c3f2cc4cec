"""Shared observation/action types, the Policy ABC and registries (imports nothing else from allday)."""

from agents.core.policy import Policy
from agents.core.registry import Registry
from agents.core.types import NavAction, Observation, Pose

__all__ = ["NavAction", "Observation", "Pose", "Policy", "Registry"]

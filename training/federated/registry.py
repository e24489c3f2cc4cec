"""``FED_METHODS``: federated fine-tuning methods by name.

Entry format: ``FED_METHODS.register("<name>")("<module>:<attr>")`` where ``<module>:<attr>`` names a
``FedMethod`` subclass (or any factory) that is called as ``factory(rank=R, scale=s, weighting=w)`` and returns an
object with the ``FedMethod`` interface (``training.federated.methods.base``). Strings keep this module import-free;
``make_method`` resolves them lazily. Adding a method = one module (or folder) + one line here, e.g.::

    FED_METHODS.register("mylora")("training.federated.methods.mylora:MyLoRA")

``FED_FAMILIES`` maps a method *family* to its runner (``"<module>:<attr>"`` naming a
``training.federated.flower.runtimes.FedFamily`` instance): the family owns a set of method names, its YAML config
format and the plain / simulation / deployment runtimes. ``allday fed run`` and the Flower app pick the family whose
``methods()`` contain the config's ``method`` (``runtimes.family_for``). Adding a family = one runner + one line.
"""

from __future__ import annotations

import importlib
from typing import Any

from agents.core.registry import Registry

FED_METHODS: Registry[str] = Registry("federated method")
FED_METHODS.register("fedplora")("training.federated.methods.fedplora:FedPLoRA")
FED_METHODS.register("fedit")("training.federated.methods.fedit:FedIT")
FED_METHODS.register("hetlora")("training.federated.methods.hetlora:HetLoRA")
FED_METHODS.register("flora")("training.federated.methods.flora:FLoRA")
FED_METHODS.register("flexlora")("training.federated.methods.flexlora:FlexLoRA")

FED_FAMILIES: Registry[str] = Registry("federated method family")
FED_FAMILIES.register("plora")("training.federated.flower.runtimes:PLORA")  # FED_METHODS, FedConfig YAML
FED_FAMILIES.register("fedpte")("training.federated.fedpte.runner:FEDPTE")  # fedpte | fedproto | fedavg


def resolve(entry: Any) -> Any:
    """A registry entry as an object: ``"module:attr"`` strings are imported, anything else is returned."""
    if isinstance(entry, str):
        module, sep, attr = entry.partition(":")
        if not sep:
            raise ValueError(f"registry entry {entry!r} must look like 'module:attr'")
        return getattr(importlib.import_module(module), attr)
    return entry


def make_method(name: str, **kwargs: Any) -> Any:
    """Instantiate the registered method ``name`` (unknown names raise ``KeyError`` listing the known ones)."""
    return resolve(FED_METHODS.get(name))(**kwargs)

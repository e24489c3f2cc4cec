"""``FED_METHODS``: federated fine-tuning methods by name.

Entry format: ``FED_METHODS.register("<name>")("<module>:<attr>")`` where ``<module>:<attr>`` names a
``FedMethod`` subclass (or any factory) that is called as ``factory(rank=R, scale=s, weighting=w)`` and returns an
object with the ``FedMethod`` interface (``training.federated.methods.base``). Strings keep this module import-free;
``make_method`` resolves them lazily. Adding a method = one module (or folder) + one line here, e.g.::

    FED_METHODS.register("fedpte")("training.federated.fedpte:FedPTE")
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

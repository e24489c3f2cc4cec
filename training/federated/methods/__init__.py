"""Federated LoRA methods, one module each, registered in ``training.federated.registry.FED_METHODS``."""

"""Thin Flower 1.42 adapters (message API) over the plain federated modules; ``flwr`` is imported lazily here only."""

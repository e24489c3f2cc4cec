"""Federated fine-tuning on Flower: Fed-PLoRA and heterogeneous-rank LoRA baselines (see ``docs/federated.md``).

Plain, framework-free modules hold all the math: ``data`` (generated task, IID/Dirichlet splits), ``model`` (tiny
transformers LM + PLoRA adapters), ``methods/`` (one module per method, registered in ``registry.FED_METHODS``),
``local`` (client step), ``server`` (sampling, fault filtering, aggregation, checkpoint/resume), ``loop`` (in-process
runtime). ``flower/`` holds the thin Flower ``ServerApp``/``ClientApp`` adapters, the simulation runner and the
localhost deployment fleet; ``flwr`` is imported only there, lazily.
"""

"""VLM2VLA training (issue #5): demonstration sources, relabelling into language, codec samples, the LoRA
trainer (``allday train vla``), scene-VQA generation and evaluation for ``benchmarks/vlm2vla.py``.

Importing this package is light; torch, transformers, peft, robosuite and rosbags load inside the functions that
use them. See ``docs/vla_training.md``.
"""

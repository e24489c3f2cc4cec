"""Oracle multi-LoRA: one peft LoRA adapter per task, selected by the (oracle) task id at test time.

The upper reference of the lifelong benchmark: no interference between tasks, but it needs the task id and its
parameters grow linearly with the number of tasks. API (stable names)::

    ml = OracleMultiLoRA(base_model, LoraConfig(r=8, lora_alpha=16, target_modules=[...]))
    ml.add_task((scene, env))   # new adapter, active and the only trainable one
    ml.select((scene, env))     # route by oracle task id (unknown task -> ValueError)
    ml.model                    # the PeftModel to train / evaluate
    ml.save(dir); OracleMultiLoRA.load(base_model, dir)
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Hashable
from pathlib import Path

from peft import LoraConfig, PeftModel, get_peft_model
from torch import nn

TASKS_FILE = "multi_lora_tasks.json"


def adapter_name(task: Hashable) -> str:
    """A peft-safe adapter name for a task id: ``(1, 2)`` -> ``"task_1_2"``."""
    parts = task if isinstance(task, (tuple, list)) else (task,)
    name = "task_" + "_".join(str(p) for p in parts)
    if not re.fullmatch(r"[A-Za-z0-9_\-]+", name):
        raise ValueError(f"task id {task!r} gives an invalid adapter name {name!r}")
    return name


class OracleMultiLoRA:
    """One LoRA adapter per task on a shared frozen base."""

    def __init__(self, base: nn.Module, lora_config: LoraConfig) -> None:
        if not isinstance(lora_config, LoraConfig):
            raise TypeError(f"OracleMultiLoRA needs a peft LoraConfig, got {type(lora_config).__name__}")
        self.base = base
        self.lora_config = lora_config
        self.model: PeftModel | None = None
        self.tasks: dict[str, Hashable] = {}

    def add_task(self, task: Hashable) -> str:
        """Create the task's adapter, make it active and the only trainable one; returns the adapter name."""
        name = adapter_name(task)
        if name in self.tasks:
            raise ValueError(f"task {task!r} already has an adapter")
        cfg = copy.deepcopy(self.lora_config)
        if self.model is None:
            self.model = get_peft_model(self.base, cfg, adapter_name=name)
        else:
            self.model.add_adapter(name, cfg)
        self.tasks[name] = task
        self.model.set_adapter(name)  # trainable: only the active adapter
        return name

    def select(self, task: Hashable) -> None:
        """Activate the adapter of ``task`` (the oracle route)."""
        name = adapter_name(task)
        if self.model is None or name not in self.tasks:
            raise ValueError(f"unknown task {task!r}: adapters exist for {list(self.tasks.values())}")
        self.model.set_adapter(name)

    def adapter_params(self, task: Hashable | None = None) -> int:
        """LoRA parameters of one task's adapter, or of all adapters if ``task`` is None."""
        if self.model is None:
            return 0
        names = set(self.tasks) if task is None else {adapter_name(task)}
        return sum(p.numel() for n, p in self.model.named_parameters()
                   if "lora_" in n and any(f".{a}." in n or n.endswith(f".{a}") for a in names))

    def save(self, out_dir: str | Path) -> None:
        if self.model is None:
            raise ValueError("OracleMultiLoRA.save: no task adapters yet")
        out = Path(out_dir)
        self.model.save_pretrained(str(out))
        (out / TASKS_FILE).write_text(json.dumps({n: list(t) if isinstance(t, tuple) else t
                                                  for n, t in self.tasks.items()}))

    @classmethod
    def load(cls, base: nn.Module, adapter_dir: str | Path) -> OracleMultiLoRA:
        """Reload every task adapter saved by ``save`` onto ``base``."""
        adir = Path(adapter_dir)
        try:
            tasks = json.loads((adir / TASKS_FILE).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a multi-LoRA checkpoint or corrupt: {adir / TASKS_FILE}: {exc}") from exc
        if not tasks:
            raise ValueError(f"{adir / TASKS_FILE} lists no tasks")
        names = list(tasks)
        first = names[0]
        paths = {n: adir if n == "default" else adir / n for n in names}
        model = PeftModel.from_pretrained(base, str(paths[first]), adapter_name=first)
        for n in names[1:]:
            model.load_adapter(str(paths[n]), adapter_name=n)
        obj = cls(base, model.peft_config[first])
        obj.model = model
        obj.tasks = {n: tuple(t) if isinstance(t, list) else t for n, t in tasks.items()}
        model.set_adapter(first)
        return obj


__all__ = ["OracleMultiLoRA", "adapter_name"]

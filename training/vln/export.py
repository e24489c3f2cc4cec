"""Export a TuKA-adapted navigator for serving without ``training``: base VLM + Tucker factors + prototypes.

The served checkpoint (``AlldayWalkerPolicy.from_pretrained``) holds the un-adapted base VLM (``vlm/``), every
adapted layer's factors (``tuka_experts.safetensors``, :class:`agents.vln.experts.TuckerExpertBank`) and the
router's scene/environment prototypes with their centring origins (:class:`agents.vln.router.PrototypeTable`),
so ``vln_node`` routes and merges the experts itself.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from agents.vln.configuration_vln import VLNAgentConfig
from agents.vln.experts import TuckerExpertBank


def export_tuka_navigator(model: Any, router: Any, base_vlm_dir: str | Path, agent_cfg: VLNAgentConfig,
                          out_dir: str | Path) -> Path:
    """Write a servable AlldayWalker checkpoint from a TuKA ``PeftModel`` and its ``PrototypeRouter``."""
    from training.peft.tucker import export_tuka_factors

    out = Path(out_dir)
    if (out / "vlm").exists():
        shutil.rmtree(out / "vlm")
    shutil.copytree(Path(base_vlm_dir), out / "vlm")
    agent_cfg.save(out)
    factors, scalings = export_tuka_factors(model)
    factors = {k: {n: t.float() for n, t in f.items()} for k, f in factors.items()}
    first = next(iter(factors.values()))
    TuckerExpertBank(factors, scalings, int(first["U3"].shape[0]), int(first["U4"].shape[0])).save(out)
    router.to_table().save(out)
    return out

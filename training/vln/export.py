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

from agents.core.io import atomic_dir
from agents.vln.configuration_vln import VLNAgentConfig
from agents.vln.experts import TuckerExpertBank


def export_tuka_navigator(model: Any, router: Any, base_vlm_dir: str | Path, agent_cfg: VLNAgentConfig,
                          out_dir: str | Path) -> Path:
    """Write a servable AlldayWalker checkpoint from a TuKA ``PeftModel`` and its ``PrototypeRouter`` to ``out_dir``,
    replacing the whole folder at once (anything else in it is removed)."""
    from training.peft.tucker import export_tuka_factors

    out = Path(out_dir)
    factors, scalings = export_tuka_factors(model)
    factors = {k: {n: t.float() for n, t in f.items()} for k, f in factors.items()}
    first = next(iter(factors.values()))
    with atomic_dir(out) as tmp:  # the whole checkpoint at once: a node never loads old experts with new prototypes
        shutil.copytree(Path(base_vlm_dir), tmp / "vlm")
        agent_cfg.save(tmp)
        TuckerExpertBank(factors, scalings, int(first["U3"].shape[0]), int(first["U4"].shape[0])).save(tmp)
        router.to_table().save(tmp)
    return out


def served_parity(method: Any, served_dir: Path, task_samples: list[list[Any]], vproc: Any) -> dict[str, Any]:
    """Check the exported (served) TuKA navigator against the training-side model (a ``tuka_dkil`` method): same
    routes on every task's frames (``task_samples``: each task's training samples), and the same logits on a batch
    once both are switched to the same experts."""
    import torch

    from agents.vln.modeling_vln import AlldayWalkerPolicy
    from training.vln.trainer import make_batch

    served = AlldayWalkerPolicy.from_pretrained(served_dir)
    same_route, max_diff = [], 0.0
    for samples in task_samples:
        frames = [s.frame for s in samples if s.frame is not None][:4]
        feats = served.features(frames)
        route = method.router.route(feats)
        same_route.append(served.router.route(feats) == route)
        batch = make_batch(vproc, samples[:2])
        method.activate(*route)
        served.activator(*route)
        with torch.no_grad():
            a = method.model(**batch).logits
            b = served.model(**batch).logits
        max_diff = max(max_diff, float((a - b).abs().max()))
    return {"routes_equal": bool(all(same_route)), "max_logit_diff": max_diff}

"""The Markdown table and plot of a full ``benchmarks/vlm2vla.py`` run (``docs/vlm2vla.md``, ``docs/vlm2vla.png``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_report(res: dict[str, Any], docs: Path) -> None:
    """``docs/vlm2vla.md`` (table) and ``docs/vlm2vla.png`` (retention and success per method)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    docs.mkdir(parents=True, exist_ok=True)
    pre = res["vqa_pretrained"]
    lines = ["# VLM2VLA at small scale (benchmarks/vlm2vla.py, full mode)", "",
             f"Tiny PaliGemma pre-trained on generated scene VQA: held-out accuracy {pre['accuracy']:.3f} "
             f"({res['vqa_test_questions']} questions; majority-answer baseline {res['vqa_majority_baseline']:.3f}); "
             f"{res['demos']} Lift demonstrations; {res['seconds'] / 60:.1f} min on a 2-core CPU.", "",
             "LoRA r 16 / alpha 32 on {targets}; fine-tuning {ft_steps} steps of batch "
             "{batch}, lr {ft_lr:g}, {ft_schedule} schedule, {ft_warmup} warm-up steps; {episodes} Lift episodes "
             "of at most {max_steps} control steps per method (held-out seeds).".format(
                 targets="every linear layer (vision tower and projector too)"
                 if res["settings"].get("lora_targets") == "all-linear" else "all language-model linear layers",
                 **res["settings"]), "",
             "Free generation (the paper's protocol: malformed text resampled, 3 tries per level) and, for the "
             "language codecs, the same fine-tune with grammar-constrained decoding (`constrained=True`).", "",
             "Retained: VQA accuracy / the pre-trained model's. Skill kept: the accuracy above the majority-answer "
             "baseline / the pre-trained model's above it (0 = no better than answering each kind's most frequent "
             "answer; `training.vla.evaluate.skill_retained`).", "",
             "| method | decoding | fine-tune loss | VQA acc | retained | skill kept | Lift success | episodes | "
             "malformed | gave up | s/action | s/generation |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def row(name: str, kind: str, r: dict[str, Any], ro: dict[str, Any]) -> str:
        skill = r.get("skill_retained", float("nan"))  # NaN: the pre-trained model is not above the baseline
        return (f"| {name} | {kind} | {r['first_loss']:.2f} -> {r['last_loss']:.2f} | {r['vqa']['accuracy']:.3f} | "
                f"{100 * r['retention']:.0f}% | {'-' if skill != skill else f'{100 * skill:.0f}%'} | "
                f"{ro['success']:.2f} | {ro['episodes']} | {ro['malformed_rate']:.2f} | "
                f"{ro['gave_up']} | {ro['sec_per_action']:.3f} | {ro.get('sec_per_generation', float('nan')):.3f} |")

    for name, r in res["methods"].items():
        lines.append(row(name, "free", r, r))
        if "constrained" in r:
            lines.append(row(name, "constrained", r, r["constrained"]))
    for key, label in (("language_replay", "ceiling: each demonstration's own action text, decoded, on its seed"),
                       ("blind_replay", "blind: mean demonstration replayed open loop")):
        if key in res:
            b = res[key]
            lines.append(f"| {label} | none | - | - | - | - | {b['success']:.2f} | {b['episodes']} | - | - | - | - |")
    kinds = sorted(pre["by_kind"])
    lines += ["", "Held-out VQA accuracy by question kind:", "",
              "| model | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds),
              "| pre-trained | " + " | ".join(f"{pre['by_kind'][k]:.2f}" for k in kinds) + " |"]
    for name, r in res["methods"].items():
        lines.append(f"| {name} | " + " | ".join(f"{r['vqa']['by_kind'].get(k, float('nan')):.2f}" for k in kinds)
                     + " |")
    (docs / "vlm2vla.md").write_text("\n".join(lines) + "\n")
    names = list(res["methods"])
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.4))
    ax[0].bar(names, [100 * res["methods"][n]["retention"] for n in names], color="tab:blue")
    ax[0].axhline(85, ls="--", c="k", lw=1, label="paper's claim (85%)")
    ax[0].set_ylabel("VQA accuracy retained (%)")
    ax[0].legend(fontsize=8)
    x = np.arange(len(names))
    for off, key, colour, label in ((-0.2, None, "tab:green", "free"), (0.2, "constrained", "tab:olive",
                                                                          "constrained")):
        ros = [res["methods"][n] if key is None else res["methods"][n].get(key) for n in names]
        bars = ax[1].bar(x + off, [100 * r["success"] if r else 0 for r in ros], 0.4, color=colour, label=label)
        for b, r in zip(bars, ros):
            if r:
                ax[1].annotate(f"{round(r['success'] * r['episodes'])}/{r['episodes']}",
                               (b.get_x() + b.get_width() / 2, b.get_height() + 2), ha="center", fontsize=7)
    if "blind_replay" in res:
        ax[1].axhline(100 * res["blind_replay"]["success"], ls=":", c="tab:red", lw=1.2,
                      label="blind replay of the mean demo")
    ax[1].set_xticks(x, names)
    ax[1].legend(fontsize=8)
    ax[1].set_ylabel("Lift success (%)")
    ax[1].set_ylim(0, 100)
    for a in ax:
        a.tick_params(axis="x", labelsize=7)
    fig.suptitle("VLM2VLA vs action tokens, tiny PaliGemma on CPU")
    fig.tight_layout()
    fig.savefig(docs / "vlm2vla.png", dpi=120)
    plt.close(fig)

"""``allday vla ...``: tiny offline VLMs for tests/demos, and one VLM2VLA action from an image + instruction.

* ``allday vla init-tiny DIR [--family paligemma|qwen2_5_vl] [--image-size N]``: write a tiny random-weight VLM
  (model + tokenizer + processor) built offline.
* ``allday vla act --model DIR --image PNG --instruction "..."``: load a policy directory, a VLM checkpoint or a
  base + ``--adapter`` and print the first action (metres + gripper), the subtasks, motion plan and chunk as JSON.
"""

from __future__ import annotations

import argparse
import logging
import time

log = logging.getLogger(__name__)


def cmd_init_tiny(args: argparse.Namespace) -> int:
    from agents.vlm import build_tiny_vlm, load_vlm

    sizes = {"patch_size": args.patch_size}
    if args.hidden_size is not None:
        h = args.hidden_size
        heads = max(1, h // 64)
        sizes.update(hidden_size=h, intermediate_size=3 * h, num_heads=heads, num_kv_heads=1 if heads < 2 else 2,
                     vision_hidden_size=h, vision_intermediate_size=2 * h, vision_heads=heads)
    if args.layers is not None:
        sizes.update(num_layers=args.layers, vision_layers=args.layers)
    out = build_tiny_vlm(args.dir, family=args.family, image_size=args.image_size, overwrite=args.overwrite,
                         seed=args.seed, **sizes)
    bundle = load_vlm(out)
    n = sum(p.numel() for p in bundle.model.parameters())
    print(f"wrote a tiny {args.family} VLM ({n / 1e6:.2f} M parameters, {args.image_size} px, "
          f"vocab {len(bundle.tokenizer)}) to {out}")
    return 0


def cmd_act(args: argparse.Namespace) -> int:
    import numpy as np
    from PIL import Image

    from agents.vla import VLAGenerationError, load_policy
    from training.cli import print_json

    try:
        image = np.asarray(Image.open(args.image).convert("RGB"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"--image {args.image}: cannot read an image ({exc})") from exc
    overrides = {"resize_images": args.resize, "max_tries": args.max_tries, "seed": args.seed,
                 "constrained": args.constrained}
    if args.codec:
        overrides["codec"] = args.codec
    policy = load_policy(args.model, adapter=args.adapter, device=args.device, **overrides)
    t0 = time.perf_counter()
    try:
        action = policy.act({"rgb": image}, instruction=args.instruction)
    except VLAGenerationError as exc:
        log.error("%s", exc)
        print(f"allday vla act: error: {exc} (malformed rate {policy.stats.malformed_rate:.2f})")
        return 1
    dt = time.perf_counter() - t0
    chunk = policy.last_chunk
    print_json({"delta_m": list(action.delta), "gripper": action.gripper, "phase": action.phase,
                "subtasks": policy.subtasks, "motion": policy.motion,
                "chunk_cm": None if chunk is None else np.round(chunk, 3).tolist(),
                "malformed": policy.stats.malformed, "generations": policy.stats.generations, "seconds": round(dt, 3)})
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("vla", help="VLM2VLA: tiny offline VLMs and single actions", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    vs = p.add_subparsers(dest="vla_command", metavar="SUBCOMMAND", required=True)

    q = vs.add_parser("init-tiny", help="write a tiny random-weight VLM (offline)",
                      description="Write a tiny random-weight VLM (model + byte-level BPE tokenizer + processor).")
    q.add_argument("dir", help="output directory (must be empty unless --overwrite)")
    q.add_argument("--family", default="paligemma", choices=["paligemma", "qwen2_5_vl"], help="model family")
    q.add_argument("--image-size", type=int, default=64, help="square input size in pixels (default 64)")
    q.add_argument("--patch-size", type=int, default=16, help="vision patch size in pixels (default 16)")
    q.add_argument("--hidden-size", type=int, default=None, help="LM and vision width (default 256 / 192)")
    q.add_argument("--layers", type=int, default=None, help="LM and vision depth (default 6)")
    q.add_argument("--seed", type=int, default=0, help="weight initialisation seed")
    q.add_argument("--overwrite", action="store_true", help="replace a model already in DIR")
    q.set_defaults(func=cmd_init_tiny)

    a = vs.add_parser("act", help="one action from an image and an instruction",
                      description="Load a VLA policy and print its first action for one image as one JSON line. "
                                  "Malformed generations are resampled (--max-tries); when none is well-formed "
                                  "the command fails with the reason.")
    a.add_argument("--model", required=True, help="policy directory, VLM checkpoint, or base (with --adapter)")
    a.add_argument("--adapter", default=None, help="peft LoRA adapter directory applied to --model")
    a.add_argument("--image", required=True, help="RGB image file (PNG/JPEG)")
    a.add_argument("--instruction", required=True, help="English instruction, e.g. 'pick up the red cube'")
    a.add_argument("--codec", default=None, help="action codec when --model is a bare VLM (language, "
                                                 "action_tokens, binned)")
    a.add_argument("--resize", action="store_true", help="resize the image to the model's size instead of failing")
    a.add_argument("--max-tries", type=int, default=4, help="generations per level before giving up (default 4)")
    a.add_argument("--constrained", action="store_true",
                   help="grammar-constrained decoding: every generation parses (language / action_tokens codecs)")
    a.add_argument("--seed", type=int, default=0, help="sampling seed")
    a.add_argument("--device", default="cpu", help="torch device (default cpu)")
    a.set_defaults(func=cmd_act)

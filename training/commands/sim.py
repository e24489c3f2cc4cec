"""``allday sim ...``: generate episodes, evaluate baseline agents, render videos, benchmark the simulator."""

from __future__ import annotations

import argparse
import logging
from typing import Any

log = logging.getLogger(__name__)


def _env_config(args: argparse.Namespace, **kw: Any):
    from sim.core.env import NavEnvConfig

    return NavEnvConfig(width=args.size, height=args.size, quality=args.quality, **kw)


def cmd_episodes(args: argparse.Namespace) -> int:
    from sim.core.episodes import save_split
    from sim.nav.episode_gen import generate_episodes, scene_list

    scenes = scene_list(args.scenes, seed=args.seed, styles=args.styles)
    episodes, gts, vocab = generate_episodes(scenes, args.per_scene, seed=args.seed, conditions=args.conditions,
                                             progress=not args.quiet)
    out = save_split(args.out, args.split, episodes, gts, vocab=vocab)
    print(f"wrote {len(episodes)} episodes in {len(scenes)} scenes to {out}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from sim.core.env import make_env
    from sim.core.episodes import load_split
    from sim.nav.evaluate import evaluate
    from training.cli import print_json

    episodes, gts = load_split(args.episodes, args.split)
    env = make_env(_env_config(args, depth=not args.no_depth), episodes, gts, backend=args.backend)
    try:
        agg, _ = evaluate(env, args.agent, condition=args.condition, limit=args.limit, seed=args.seed,
                          progress=not args.quiet)
    finally:
        env.close()
    agg.pop("episode_id", None)
    result = {k: round(float(v), 4) for k, v in agg.items() if k != "episodes"}
    result.update(episodes=int(agg["episodes"]), agent=args.agent, condition=args.condition or "episode")
    if args.json:
        print_json(result)
    else:
        for k in ("sr", "spl", "osr", "ne", "ndtw", "sdtw", "tl", "steps"):
            print(f"{k:>6}: {result[k]:.3f}")
        print(f"episodes: {result['episodes']}")
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from sim.core.episodes import load_split
    from sim.nav.render_episode import render_episode

    episodes, gts = load_split(args.episodes, args.split)
    paths = render_episode(episodes, gts, args.index, args.out, agent=args.agent, condition=args.condition,
                           size=args.size, quality=args.quality, png_every=args.png_every)
    for p in paths:
        print(p)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from sim.nav.bench import bench_sim
    from training.cli import print_json

    res = bench_sim(args.size, args.frames, args.quality, args.condition, repeats=args.repeats)
    if args.json:
        print_json(res)
    else:
        print(f"{res['fps']:.1f} env steps/s, raw renderer {res['raw_fps']:.1f} fps, ratio {res['ratio']:.2f}")
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", type=int, default=224, help="square image size in pixels (default 224)")
    p.add_argument("--quality", default="default", help="render quality: fast, default or high")


def add_parser(sub: argparse._SubParsersAction) -> None:
    from sim.nav.conditions import available_conditions
    from sim.nav.evaluate import EVAL_AGENTS
    from sim.nav.house import STYLES

    conds = available_conditions()
    sim = sub.add_parser("sim", help="embedded navigation simulator tools",
                         description="Generate episodes, evaluate agents, render and benchmark the MuJoCo sim.")
    ssub = sim.add_subparsers(dest="sim_command", metavar="SUBCOMMAND", required=True)

    p = ssub.add_parser("episodes", help="generate VLN-CE R2R-format episodes in procedural houses")
    p.add_argument("--scenes", type=int, required=True, help="number of houses")
    p.add_argument("--per-scene", type=int, required=True, help="episodes per house")
    p.add_argument("--split", required=True, help="split name, e.g. train or val_unseen")
    p.add_argument("--out", required=True, help="dataset root; writes OUT/SPLIT/SPLIT.json.gz and SPLIT_gt.json.gz")
    p.add_argument("--conditions", nargs="+", choices=conds, help="repeat each episode under these conditions")
    p.add_argument("--styles", nargs="+", choices=STYLES.names(), help="house styles (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_episodes)

    p = ssub.add_parser("eval", help="evaluate a baseline agent: NE, SR, OSR, SPL, nDTW, SDTW, TL")
    p.add_argument("--agent", required=True, choices=EVAL_AGENTS.names())
    p.add_argument("--episodes", required=True, help="dataset root, split dir or .json.gz file")
    p.add_argument("--split", default=None, help="split name when the root holds several")
    p.add_argument("--condition", choices=conds, default=None, help="override every episode's condition")
    p.add_argument("--limit", type=int, default=None, help="evaluate only the first N episodes")
    p.add_argument("--backend", default="mujoco", help="env backend: mujoco (default) or habitat")
    p.add_argument("--no-depth", action="store_true", help="skip the depth render (faster)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    _common(p)
    p.set_defaults(func=cmd_eval)

    p = ssub.add_parser("render", help="write an MP4 + PNG frames + top-down plot of one episode")
    p.add_argument("--episodes", required=True, help="dataset root, split dir or .json.gz file")
    p.add_argument("--split", default=None)
    p.add_argument("--index", type=int, default=0, help="episode index in the split")
    p.add_argument("--agent", default="oracle", choices=EVAL_AGENTS.names())
    p.add_argument("--condition", choices=conds, default=None)
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--png-every", type=int, default=10, help="save every Nth frame as PNG (0: none)")
    _common(p)
    p.set_defaults(func=cmd_render)

    p = ssub.add_parser("bench", help="env steps/s with RGB-D vs the raw renderer rate")
    p.add_argument("--size", type=int, choices=[128, 224], default=128)
    p.add_argument("--frames", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quality", default="default", help="fast, default or high")
    p.add_argument("--condition", choices=conds, default="normal")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.set_defaults(func=cmd_bench)

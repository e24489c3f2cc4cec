"""``allday demo``: the main job on the embedded simulator (episodes -> agents -> metrics -> video)."""

from __future__ import annotations

import argparse
import logging
import math
import time
from pathlib import Path

log = logging.getLogger(__name__)


def cmd_demo(args: argparse.Namespace) -> int:
    from sim.core.env import NavEnvConfig
    from sim.core.episodes import save_split
    from sim.nav.env import MujocoNavEnv
    from sim.nav.episode_gen import generate_episodes, scene_list
    from sim.nav.evaluate import evaluate
    from sim.nav.render_episode import render_episode
    from training.cli import print_json

    t0 = time.perf_counter()
    out = Path(args.out)
    n_scenes = max(1, min(3, args.episodes))
    per_scene = math.ceil(args.episodes / n_scenes)
    episodes, gts, vocab = generate_episodes(scene_list(n_scenes, seed=args.seed), per_scene, seed=args.seed,
                                             progress=not args.quiet)
    episodes = episodes[: args.episodes]
    gts = {str(e.episode_id): gts[str(e.episode_id)] for e in episodes}
    save_split(out / "episodes", "demo", episodes, gts, vocab=vocab)
    env = MujocoNavEnv(NavEnvConfig(width=args.size, height=args.size, quality=args.quality), episodes, gts)
    table = {}
    try:
        for agent in args.agents:
            agg, _ = evaluate(env, agent, condition=args.condition, seed=args.seed, progress=not args.quiet)
            table[agent] = {k: round(float(agg[k]), 4) for k in ("sr", "spl", "osr", "ne", "ndtw", "sdtw", "tl")}
    finally:
        env.close()
    written = render_episode(episodes, gts, 0, out, agent=args.agents[0], condition=args.condition,
                             size=args.size, quality=args.quality, png_every=0)
    if not args.json:
        print(f"{'agent':<10}" + "".join(f"{k:>8}" for k in ("SR", "SPL", "OSR", "NE", "nDTW", "SDTW", "TL")))
        for agent, m in table.items():
            print(f"{agent:<10}" + "".join(f"{m[k]:>8.3f}" for k in ("sr", "spl", "osr", "ne", "ndtw", "sdtw", "tl")))
        for p in written:
            print(f"wrote {p}")
    print_json({"transport": "in-process", "episodes": len(episodes), "condition": args.condition or "normal",
                "metrics": table, "outputs": [str(p) for p in written],
                "seconds": round(time.perf_counter() - t0, 1)})
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    from sim.nav.conditions import available_conditions

    p = sub.add_parser("demo", help="run the demo: generate episodes, evaluate agents, write a video",
                       description="Closed-loop demo on the embedded MuJoCo simulator; outputs go to --out.")
    p.add_argument("--episodes", type=int, default=6, help="number of episodes (default 6)")
    p.add_argument("--agents", nargs="+", default=["oracle", "random"], help="agents to evaluate")
    p.add_argument("--condition", choices=available_conditions(), default=None)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--quality", default="default")
    p.add_argument("--out", default="runs/demo")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="only the JSON result line")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_demo)

"""``edo`` command line: ``edo demo`` (heuristic policies on EDO-v0), more subcommands in later modules."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def cmd_demo(args: argparse.Namespace) -> int:
    from baselines.evaluation import evaluate_heuristic, format_table, heldout_task_ids, make_eval_env
    from baselines.heuristics import HEURISTICS, make_heuristic

    t0 = time.perf_counter()
    print(f"Building the default world, corpus embeddings and chromadb collections for {args.env} ...", flush=True)
    env = make_eval_env(args.env)
    print(f"  ready in {time.perf_counter() - t0:.1f} s (embedding cache: warm runs skip the embedding)", flush=True)
    task_ids = heldout_task_ids(env, args.episodes)
    results = []
    for name in HEURISTICS:
        results.append(evaluate_heuristic(make_heuristic(name), env, task_ids, seed=args.seed, progress=True))
    print(f"\nHeuristic policies on {args.env}, {len(task_ids)} held-out tasks (test split), seed {args.seed}:\n")
    print(format_table(results))
    print("\nSuccess by task family:")
    for r in results:
        fams = ", ".join(f"{f} {s:.2f}" for f, s in r.success_by_family.items())
        print(f"  {r.policy:16s} {fams}")
    env.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="edo", description="EDO-Gym: learned orchestration of multi-agent LLM systems")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the heuristic policies on an EDO env and print their table")
    demo.add_argument("--env", default="EDO-v0", help="registered env id (default: EDO-v0)")
    demo.add_argument("--episodes", type=_positive_int, default=300, help="held-out tasks to evaluate (default: 300)")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())

"""A/B of ``retrieval.search_cache`` (search results kept in the run-time disk cache): EDO-v0 over CartPole-v1.

Fresh processes alternate, off then on, ``--repeats`` times, all on one cache directory prepared as ``edo prepare``
leaves it (complete embeddings, the reachable queries embedded and, for the "on" processes, their search results
stored). Each process measures, with random legal actions:

- ``first``: its first ``--first-steps`` steps after the first reset, over CartPole-v1's rate right after in the same
  process (as ``env_throughput.py``'s ``first_50k_over_cartpole``);
- ``warm``: after ``--warmup`` more steps, ``--windows`` timed windows of ``--steps`` steps, each over a CartPole-v1
  window right after (as ``env_throughput.py``'s ``edo_over_cartpole``).

The option is exact (the same trajectories, ``tests/retrieval/test_search_cache.py``); this measures what it saves.

Usage: ``python -m tools.ab_search_cache [--repeats 2]``. Results: ``tools/results/ab_search_cache.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"  # tools write here, apart from benchmarks/results
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import machine_info, machine_line, write_results  # noqa: E402

_PREPARE = """
import gymnasium as gym, edo_gym
env = gym.make("EDO-v0"); env.reset(seed=0)
env.unwrapped.service.complete_all(reachable_queries=True, top_k=[w.spec.top_k for w in env.unwrapped.workers])
env.close()
"""

_RUN = """
import json, numpy as np, gymnasium as gym, edo_gym
from benchmarks.env_throughput import random_legal_steps
env = gym.make("EDO-v0", retrieval={{"search_cache": {on}}})
cart = gym.make("CartPole-v1")
rng = np.random.default_rng(0)
env.reset(seed=0)  # the first reset (indexes, presearch) is not timed
first = {first} / random_legal_steps(env, {first}, rng, True)
first_cart = {first} / random_legal_steps(cart, {first}, rng, False)
random_legal_steps(env, {warmup}, rng, True)
warm = []
for _ in range({windows}):
    e = {steps} / random_legal_steps(env, {steps}, rng, True)
    warm.append(e / ({steps} / random_legal_steps(cart, {steps}, rng, False)))
retrievers = {{id(r): r for r in env.unwrapped.service.retrievers}}.values()
print(json.dumps({{"first": first / first_cart, "warm": warm, "searches": sum(r.searches for r in retrievers),
                  "disk_hits": sum(r.disk_hits for r in retrievers)}}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2, help="(off, on) process pairs")
    parser.add_argument("--first-steps", type=int, default=50_000)
    parser.add_argument("--warmup", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where to write the results (default: tools/results)")
    args = parser.parse_args(argv)
    for name in ("repeats", "first_steps", "steps", "windows"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0:
        raise SystemExit(f"--warmup must be >= 0, got {args.warmup}")
    repo = str(Path(__file__).resolve().parent.parent)  # the runs import benchmarks.env_throughput
    load0 = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, EDO_GYM_CACHE_DIR=cache, HF_HUB_OFFLINE="1", TQDM_DISABLE="1",
                   PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))  # fmt: skip
        print("preparing the cache (edo prepare's steps) ...", flush=True)
        subprocess.run([sys.executable, "-c", _PREPARE], env=env, check=True, capture_output=True)
        for r in range(args.repeats):
            for name in ("off", "on"):
                code = _RUN.format(on=name == "on", first=args.first_steps, warmup=args.warmup,
                                   steps=args.steps, windows=args.windows)  # fmt: skip
                out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
                result = json.loads(out.stdout.strip().splitlines()[-1])
                runs[name].append(result)
                print(f"  repeat {r + 1}, search cache {name}: first {args.first_steps:,} / CartPole "
                      f"{result['first']:.3f}, warm / CartPole {[round(x, 3) for x in result['warm']]}", flush=True)  # fmt: skip
    summary = {
        name: {
            "first_over_cartpole_median": float(np.median([x["first"] for x in rs])),
            "warm_over_cartpole_median": float(np.median([w for x in rs for w in x["warm"]])),
        }
        for name, rs in runs.items()
    }
    command = (
        f"python -m tools.ab_search_cache --repeats {args.repeats} --first-steps {args.first_steps} "
        f"--warmup {args.warmup} --steps {args.steps} --windows {args.windows}"
    )
    payload = {"reproduce": command, "settings": {k: str(v) for k, v in vars(args).items()}, "runs": runs,
               "summary": summary, "load_average_at_start": load0}  # fmt: skip
    m = machine_info()
    lines = [
        "# A/B: retrieval.search_cache off / on",
        "",
        f"{machine_line(m)}. Command: `{command}`. Load average at start {load0:.1f}. Processes alternated, off first.",
        "",
        f"| search cache | first {args.first_steps // 1000}k / CartPole (per process) | median | warm / CartPole "
        "(per window) | median | index queries / results read from disk (per process) |",
        "|---|---|---|---|---|---|",
    ]
    for name, rs in runs.items():
        first = ", ".join(f"{x['first']:.3f}" for x in rs)
        warm = ", ".join(f"{w:.3f}" for x in rs for w in x["warm"])
        counts = ", ".join(f"{x['searches']} / {x['disk_hits']}" for x in rs)
        lines.append(
            f"| {name} | {first} | **{summary[name]['first_over_cartpole_median']:.3f}** | {warm} | "
            f"**{summary[name]['warm_over_cartpole_median']:.3f}** | {counts} |"
        )
    json_path, md_path = write_results("ab_search_cache", payload, "\n".join(lines) + "\n", args.out_dir)
    print("\n".join(lines))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

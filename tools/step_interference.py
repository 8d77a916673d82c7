"""How much slower a warm EDO-v0 step runs when other work runs between steps, as in training.

``make train`` steps its envs at a fraction of the rate ``env_throughput.py`` measures for the env alone, though the
env code is the same. This script replays the same steps in one process with different work between them and
times only the env's own calls (``reset`` and ``step``):

- ``tight``: nothing between the calls (``env_throughput.py``'s loop);
- ``policy``: before each call, one action draw of ``make train``'s GRPO policy (``MultiInputPolicy``, net_arch
  128,128) for a batch of 16 observations, the call the rollout makes once per vector step;
- ``policy / 16 calls``: the same draw before every 16th call only: how often the rollout makes it with 16 envs
  (there the other calls go to other envs, here to the same one);
- ``cache sweep``: before each call, a sum over a ``--sweep-mib`` MiB array (more than a core's L2 cache): the env's
  data is evicted, its code is not.

The steps are ``--steps`` random legal steps recorded once after a ``--warmup`` (the episodes' seeds and actions),
then replayed by each arm, arms alternated within each of ``--repeats`` rounds; every replay gives the same steps,
so the memo caches are warm for all arms alike. Reported: each arm's steps/s (env time only) and its ratio to
``tight`` in the same round, medians over rounds. Ratios are the figure; absolute rates depend on the machine.

Usage: ``python -m tools.step_interference [--steps 20000] [--repeats 5] [--warmup 50000]``.
Results: ``tools/results/step_interference.{json,md}`` (or ``--out-dir``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"  # tools write here, apart from benchmarks/results
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import check_counts, git_revision, machine_line, median_iqr, write_results  # noqa: E402
from benchmarks.env_throughput import random_legal_steps  # noqa: E402

ARMS = ("tight", "policy", "policy / 16 calls", "cache sweep")
#: ``make train``'s envs per vector step: the policy's batch.
N_ENVS = 16


def record_episodes(env: Any, n_steps: int, rng: np.random.Generator) -> list[tuple[int, list[int]]]:
    """Seeded episodes of random legal actions, at least ``n_steps`` steps in all: ``(seed, actions)`` each."""
    episodes: list[tuple[int, list[int]]] = []
    total = 0
    while total < n_steps:
        seed = int(rng.integers(1 << 30))
        obs, info = env.reset(seed=seed)
        actions: list[int] = []
        done = False
        while not done:
            legal = np.flatnonzero(info["action_mask"])
            actions.append(int(legal[int(rng.random() * len(legal))]))
            obs, _, terminated, truncated, info = env.step(actions[-1])
            done = terminated or truncated
        episodes.append((seed, actions))
        total += len(actions)
    return episodes


def replay(env: Any, episodes: list[tuple[int, list[int]]], between: Callable[[], Any] | None) -> tuple[int, float]:
    """Replay ``episodes``, calling ``between()`` before each env call; (steps, seconds inside the env's calls)."""
    clock = time.perf_counter
    env_s = 0.0
    steps = 0
    for seed, actions in episodes:
        if between is not None:
            between()
        t0 = clock()
        env.reset(seed=seed)
        env_s += clock() - t0
        for action in actions:
            if between is not None:
                between()
            t0 = clock()
            env.step(action)
            env_s += clock() - t0
        steps += len(actions)
    return steps, env_s


def policy_draw(env: Any) -> Callable[[], Any]:
    """One action draw of ``make train``'s GRPO policy for :data:`N_ENVS` observations (the rollout's call), built on
    ``env``'s spaces and first observation (a second env of the same id: the replayed env is not touched)."""
    import gymnasium as gym
    import torch as th

    from baselines.grpo.grpo import GRPO

    th.set_num_threads(1)  # make train's default (--torch-threads 1)
    other = gym.make(env.spec.id)
    model = GRPO("MultiInputPolicy", other, policy_kwargs={"net_arch": [128, 128]}, seed=0, device="cpu")
    obs, _ = other.reset(seed=0)
    batch = {key: np.repeat(value[None], N_ENVS, axis=0) for key, value in obs.items()}
    masks = batch["action_mask"].astype(bool)
    policy = model.policy

    def draw() -> Any:
        with th.inference_mode():
            return policy.sample_from_numpy(batch, masks)

    if draw() is None:
        raise SystemExit("the GRPO policy has no numpy sampling path for this observation space")
    return draw


def every(n: int, fn: Callable[[], Any]) -> Callable[[], None]:
    """A callable that runs ``fn`` on its 1st, (n+1)th, (2n+1)th ... call and does nothing on the others."""
    count = [0]

    def call() -> None:
        if count[0] % n == 0:
            fn()
        count[0] += 1

    return call


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20_000, help="recorded steps, replayed by each arm")
    parser.add_argument("--repeats", type=int, default=5, help="rounds (each arm once per round, alternated)")
    parser.add_argument("--warmup", type=int, default=50_000, help="random legal steps before recording")
    parser.add_argument("--sweep-mib", type=int, default=4, help="size of the array the cache-sweep arm sums (MiB)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where to write the results (default: tools/results)")
    args = parser.parse_args(argv)
    check_counts(parser, args, positive=("steps", "repeats", "sweep_mib"), non_negative=("warmup", "seed"))

    import gymnasium as gym

    import edo_gym  # noqa: F401 - registers EDO-v0

    env = gym.make("EDO-v0")
    rng = np.random.default_rng(args.seed)
    print(f"warm-up: {args.warmup:,} random legal steps ...", flush=True)
    random_legal_steps(env, max(args.warmup, 1), rng, masked=True)
    episodes = record_episodes(env, args.steps, rng)
    sweep = np.ones(args.sweep_mib << 18, dtype=np.float32)
    draw = policy_draw(env)
    between: dict[str, Callable[[], Any] | None] = {
        "tight": None,
        "policy": draw,
        "policy / 16 calls": every(N_ENVS, draw),
        "cache sweep": sweep.sum,
    }
    for arm in ARMS:  # once each, untimed: every query the episodes meet is now in the memo caches
        replay(env, episodes, between[arm])
    rounds = []
    for r in range(args.repeats):
        rates = {}
        for arm in ARMS[r % len(ARMS) :] + ARMS[: r % len(ARMS)]:  # a different arm first in each round
            steps, env_s = replay(env, episodes, between[arm])
            rates[arm] = steps / env_s
        rounds.append({"steps_per_s": rates, "over_tight": {arm: rates[arm] / rates["tight"] for arm in ARMS}})
        print(f"round {r + 1}: " + ", ".join(f"{arm} {rates[arm]:,.0f}" for arm in ARMS) + " steps/s", flush=True)
    env.close()
    summary = {arm: {"steps_per_s": median_iqr([x["steps_per_s"][arm] for x in rounds]),
                     "over_tight": median_iqr([x["over_tight"][arm] for x in rounds])} for arm in ARMS}  # fmt: skip
    payload = {"settings": vars(args) | {"out_dir": str(args.out_dir) if args.out_dir else None}, "revision": git_revision(),
               "steps": sum(len(a) for _, a in episodes), "episodes": len(episodes), "rounds": rounds, "summary": summary}  # fmt: skip
    lines = [
        "# EDO-v0 steps with work between them: env time only, same steps, same process",
        "",
        machine_line() + ".",
        f"Command: `{' '.join(['python', '-m', 'tools.step_interference', *(argv if argv is not None else sys.argv[1:])])}`; "
        f"{payload['steps']:,} steps in {len(episodes):,} episodes, replayed by each arm in each of {args.repeats} rounds.",
        "",
        "| arm | steps/s (median) | IQR | over tight (median) | IQR |",
        "|---|---|---|---|---|",
    ]
    for arm in ARMS:
        s, o = summary[arm]["steps_per_s"], summary[arm]["over_tight"]
        lines.append(
            f"| {arm} | {s['median']:,.0f} | {s['q25']:,.0f}-{s['q75']:,.0f} | {o['median']:.2f} | {o['q25']:.2f}-{o['q75']:.2f} |"
        )
    json_path, md_path = write_results("step_interference", payload, "\n".join(lines), out_dir=args.out_dir)
    print("\n".join(lines))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

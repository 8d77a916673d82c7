"""The harness of an alternated A/B of warm EDO-v0 steps (``ab_encoders.py`` uses it): two long-lived processes of this
checkout's code, each on its own cache directory, taking turns to time windows of EDO-v0 steps and then as many
CartPole-v1 steps in the same process.

Absolute rates on a shared 2-core machine move by 10-30% within minutes, so two settings are measured side by side
rather than one after the other. Each arm warms up with ``--warmup`` random legal steps (as ``env_throughput.py``),
then ``--rounds`` rounds follow; in each, the arms take turns (the first arm alternating from round to round), and an
arm's turn times ``--steps`` EDO-v0 steps and then as many CartPole-v1 steps, like ``env_throughput.py``'s warm
windows. Each window reports its sum of rewards and count of episodes (to compare trajectories), the texts the query
encoders embedded (no cache held them) and the index searches the retrievers made.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"  # tools write here, apart from benchmarks/results
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import check_counts, write_results  # noqa: E402
from benchmarks.train_throughput import child_env  # noqa: E402

#: An arm: makes EDO-v0 with the JSON kwargs in argv[1], reads "warmup N" / "window N" lines, answers each with a JSON
#: line (and one when it is ready). The EDO loop is env_throughput's ``random_legal_steps`` plus a sum of rewards (to
#: compare the arms' trajectories); CartPole runs it. A window also reports the texts the query encoders embedded (no
#: cache held them) and the index searches the retrievers made.
_CHILD = """
import json, sys, time, numpy as np, gymnasium as gym, edo_gym
from benchmarks.env_throughput import random_legal_steps
env = gym.make("EDO-v0", **json.loads(sys.argv[1])); cartpole = gym.make("CartPole-v1"); rng = np.random.default_rng(0)
obs, info = env.reset(seed=12345)
service = env.unwrapped.service
retrievers = list({id(r): r for r in service.retrievers}.values())
def counts():
    return sum(e.model_calls for e in service.encoders), sum(r.searches for r in retrievers)
def edo_steps(n):
    global obs, info
    total, episodes = 0.0, 0
    t0 = time.perf_counter()
    for _ in range(n):
        legal = np.flatnonzero(info["action_mask"])
        obs, reward, terminated, truncated, info = env.step(int(legal[int(rng.random() * len(legal))]))
        total += reward
        if terminated or truncated:
            episodes += 1
            obs, info = env.reset()
    return time.perf_counter() - t0, total, episodes
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    cmd, n = line.split(); n = int(n)
    if cmd == "warmup":
        edo_steps(n); print(json.dumps({"ok": True}), flush=True)
    else:
        (calls0, searches0), (edo_s, total, episodes) = counts(), edo_steps(n)
        calls, searches = (b - a for a, b in zip((calls0, searches0), counts()))
        cartpole_s = random_legal_steps(cartpole, n, rng, masked=False)
        print(json.dumps({"edo_s": edo_s, "cartpole_s": cartpole_s, "reward_sum": total, "episodes": episodes,
                          "embedder_calls": calls, "index_searches": searches}), flush=True)
"""


class Arm:
    """One long-lived process running the env, on its own cache directory.

    :param env_vars: more environment variables of the process.
    :param env_kwargs: ``gym.make("EDO-v0", ...)`` kwargs (JSON-serialisable).
    """

    def __init__(
        self, name: str, cache_dir: Path, env_vars: dict[str, str] | None = None, env_kwargs: dict[str, Any] | None = None
    ) -> None:
        self.name = name
        env = dict(child_env(cache_dir), **(env_vars or {}))
        self.proc = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(env_kwargs or {})], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
        self._read()  # the env is made

    def _read(self) -> dict[str, Any]:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the {self.name} arm exited ({self.proc.wait()}); its stderr is above")
        return json.loads(line)

    def ask(self, cmd: str, n: int) -> dict[str, Any]:
        self.proc.stdin.write(f"{cmd} {n}\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def alternate(
    arms: dict[str, Arm], names: tuple[str, str], rounds: int, steps: int, warmup: int, report: Callable[[dict], None]
) -> list[dict[str, Any]]:
    """Warm each arm up with ``warmup`` steps, then run ``rounds`` rounds in which the arms take turns (the first arm
    alternating from round to round), each timing a window of ``steps`` EDO-v0 steps and then as many CartPole-v1 steps.
    Each round's row (``{"round", "first", name: window}``, a window with its ``edo_us_per_step`` and
    ``edo_over_cartpole``) goes to ``report`` (which may add to it or stop the run) as it finishes."""
    for name in names:
        print(f"{name}: {warmup:,} warm-up steps ...", flush=True)
        arms[name].ask("warmup", warmup)
    rows = []
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        row: dict[str, Any] = {"round": r, "first": order[0]}
        for name in order:
            w = arms[name].ask("window", steps)
            row[name] = {**w, "edo_us_per_step": w["edo_s"] / steps * 1e6, "edo_over_cartpole": w["cartpole_s"] / w["edo_s"]}
        report(row)
        rows.append(row)
    return rows


def close_arms(arms: dict[str, Arm], tmp: Path) -> None:
    """End the arms' processes and remove their cache directories."""
    for arm in arms.values():
        arm.close()
    shutil.rmtree(tmp, ignore_errors=True)


def summarise(rounds: list[dict[str, Any]], ratio_key: str, names: tuple[str, ...]) -> dict[str, Any]:
    """The median, min and max of each round's ``ratio_key``, and each arm's median microseconds per EDO step and
    ratio to CartPole-v1."""

    def med(key: str, arm: str | None = None) -> float:
        return float(np.median([(row[arm] if arm else row)[key] for row in rounds]))

    ratios = [row[ratio_key] for row in rounds]
    return {
        ratio_key: {"median": med(ratio_key), "min": min(ratios), "max": max(ratios)},
        **{arm: {"edo_us_per_step": med("edo_us_per_step", arm), "edo_over_cartpole": med("edo_over_cartpole", arm)}
           for arm in names},
    }  # fmt: skip


def parse_args(doc: str) -> argparse.Namespace:
    """The command line of an alternated A/B (``--rounds``, ``--steps``, ``--warmup``, ``--out-dir``), checked;
    ``doc``'s first paragraph is its description."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="alternated rounds (default: 7)")
    parser.add_argument("--steps", type=int, default=20_000, help="EDO (and CartPole) steps per window")
    parser.add_argument("--warmup", type=int, default=150_000, help="warm-up steps per arm before the rounds")
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where to write the results (default: tools/results)")
    args = parser.parse_args()
    check_counts(parser, args, positive=("rounds", "steps"), non_negative=("warmup",))
    return args


def write_ab_results(
    name: str,
    args: argparse.Namespace,
    md: list[str],
    headline: str,
    head: dict[str, Any],
    summary: dict[str, Any],
    rounds: list[Any],
) -> None:
    """Write an A/B run's results (``head``'s keys, the command line's settings, ``summary``, ``rounds``) as
    ``<name>.json`` and ``md`` as ``<name>.md`` (in ``args.out_dir`` or the results folder); print ``headline`` (the
    summary line ``md`` holds) and where they went."""
    payload = head | {"settings": vars(args) | {"out_dir": str(args.out_dir) if args.out_dir else None},
                      "summary": summary, "rounds": rounds}  # fmt: skip
    json_path, md_path = write_results(name, payload, "\n".join(md), args.out_dir)
    print(headline)
    print(f"wrote {json_path} and {md_path}")

"""A/B of a warm EDO-v0 step: the compiled hot path (``edo compile``) against pure Python, in alternated windows.

Absolute rates on a shared 2-core machine move by 10-30% within minutes, so the two are measured side by side: two
long-lived processes run this checkout's code, one with ``EDO_GYM_COMPILED=on`` (the hot modules built by
``edo compile``; the run fails if they are not all built and current) and one with ``EDO_GYM_COMPILED=off`` (pure
Python), each on its own copy of one freshly prepared cache directory (as ``edo prepare`` leaves it). Each arm warms up
with ``--warmup`` random legal steps (as ``env_throughput.py``), then ``--rounds`` rounds follow; in each, the arms take
turns (the first arm alternating from round to round), and an arm's turn times ``--steps`` EDO-v0 steps and then as
many CartPole-v1 steps, in the same process, like ``env_throughput.py``'s warm windows.

Both arms draw the same seeds and actions, so they step the same trajectories: each window's sum of rewards and count
of episodes must be equal in both arms (checked; the run fails otherwise). Reported per round and as medians: each
arm's microseconds per EDO step, its ratio to CartPole's rate in the same window, and the compiled / pure time per EDO
step.

Usage: ``python tools/ab_compiled.py [--rounds 7] [--steps 20000] [--warmup 150000]``.
Results: ``tools/results/ab_compiled.{json,md}`` (or ``--out-dir``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
RESULTS = Path(__file__).resolve().parent / "results"  # tools write here, apart from benchmarks/results
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import check_counts, git_revision, machine_line, write_results  # noqa: E402
from benchmarks.train_throughput import _env, prepare_cache  # noqa: E402

ARMS = ("compiled", "pure")
_MODE = {"compiled": "on", "pure": "off"}

#: An arm: makes EDO-v0 with the JSON kwargs in argv[1], reads "warmup N" / "window N" lines, answers each with a JSON
#: line. The EDO loop is env_throughput's ``random_legal_steps`` plus a sum of rewards (to check that both arms step the
#: same trajectory); CartPole runs it. A window also reports the texts the query encoders embedded (no cache held them)
#: and the index searches the retrievers made.
_CHILD = """
import json, sys, time, numpy as np, gymnasium as gym, edo_gym
from edo_gym import compiled
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
print(json.dumps({"hot_path": compiled.summary()}), flush=True)
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

    :param env_vars: more environment variables of the process (default: ``EDO_GYM_COMPILED`` of the arm ``name``).
    :param env_kwargs: ``gym.make("EDO-v0", ...)`` kwargs (JSON-serialisable).
    """

    def __init__(
        self, name: str, cache_dir: Path, env_vars: dict[str, str] | None = None, env_kwargs: dict[str, Any] | None = None
    ) -> None:
        self.name = name
        env = dict(_env(cache_dir), **(env_vars if env_vars is not None else {"EDO_GYM_COMPILED": _MODE[name]}))
        self.proc = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(env_kwargs or {})], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
        self.hot_path = self._read()["hot_path"]

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


def main() -> None:
    args = parse_args(__doc__)
    tmp = Path(tempfile.mkdtemp(prefix="edo_ab_compiled_"))
    arms: dict[str, Arm] = {}
    try:
        print("preparing a cache directory (as `edo prepare` leaves it) ...", flush=True)
        prepare_cache(tmp / "prepared")
        for name in ARMS:
            shutil.copytree(tmp / "prepared", tmp / name)
            arms[name] = Arm(name, tmp / name)
        if arms["compiled"].hot_path != "compiled":
            raise SystemExit(f"the compiled arm runs {arms['compiled'].hot_path!r}: run `edo compile` (or make install)")
        if arms["pure"].hot_path != "source":
            raise SystemExit(f"the pure arm runs {arms['pure'].hot_path!r}, not pure Python")

        def report(row: dict[str, Any]) -> None:
            a, b = row["compiled"], row["pure"]
            if (a["reward_sum"], a["episodes"]) != (b["reward_sum"], b["episodes"]):
                raise SystemExit(f"round {row['round']}: the arms stepped different trajectories (rewards "
                                 f"{a['reward_sum']!r} vs {b['reward_sum']!r}, episodes {a['episodes']} vs "
                                 f"{b['episodes']})")  # fmt: skip
            row["compiled_over_pure_time"] = a["edo_s"] / b["edo_s"]
            print(f"round {row['round']}: compiled {a['edo_us_per_step']:.1f} us ({a['edo_over_cartpole']:.3f}x "
                  f"CartPole), pure {b['edo_us_per_step']:.1f} us ({b['edo_over_cartpole']:.3f}x); time ratio "
                  f"{row['compiled_over_pure_time']:.3f}; same trajectory", flush=True)  # fmt: skip

        rounds = alternate(arms, ARMS, args.rounds, args.steps, args.warmup, report)
    finally:
        close_arms(arms, tmp)
    summary = summarise(rounds, "compiled_over_pure_time", ARMS)
    rev = git_revision()
    headline = (
        f"**Median compiled / pure time per EDO step: {summary['compiled_over_pure_time']['median']:.3f}** (rounds "
        f"{summary['compiled_over_pure_time']['min']:.3f}-{summary['compiled_over_pure_time']['max']:.3f}). Medians: "
        f"compiled {summary['compiled']['edo_us_per_step']:.1f} us a step, "
        f"**{summary['compiled']['edo_over_cartpole']:.3f}x** CartPole; pure {summary['pure']['edo_us_per_step']:.1f} us, "
        f"**{summary['pure']['edo_over_cartpole']:.3f}x**."
    )
    md = [
        "# A/B: the compiled hot path against pure Python (warm EDO-v0 steps)",
        "",
        f"Machine: {machine_line()}. Revision {rev}. Command: `python tools/ab_compiled.py --rounds {args.rounds} "
        f"--steps {args.steps} --warmup {args.warmup}`.",
        "",
        "Two long-lived processes of the same code (`EDO_GYM_COMPILED=on` / `off`) on copies of one prepared cache, "
        "alternating windows; the same seeds and actions, so the same trajectories (each window's reward sum and "
        "episode count are checked equal). The ratio to CartPole-v1 is measured in the same window.",
        "",
        headline,
        "",
        "| round | first | compiled us/step | compiled / CartPole | pure us/step | pure / CartPole | compiled / pure time |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rounds:
        a, b = row["compiled"], row["pure"]
        md.append(f"| {row['round']} | {row['first']} | {a['edo_us_per_step']:.1f} | {a['edo_over_cartpole']:.3f} | "
                  f"{b['edo_us_per_step']:.1f} | {b['edo_over_cartpole']:.3f} | {row['compiled_over_pure_time']:.3f} |")  # fmt: skip
    write_ab_results("ab_compiled", args, md, headline, {"revision": rev}, summary, rounds)


if __name__ == "__main__":
    main()

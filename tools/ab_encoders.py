"""A/B of a warm EDO-v0 step: the default (transformer) retrieval encoder against the static (model2vec) one, in
alternated windows.

``env_throughput.py --encoder static`` and ``env_throughput.py`` run one after the other, and on a shared 2-core
machine absolute rates (and the ratio to CartPole-v1) move by 10-30% within minutes, more than the difference between
the two encoders. So the two are measured side by side (``ab_windows.py``): two long-lived processes of this
checkout's code, one per encoder, each on its own cache directory prepared as ``edo prepare`` (``--retrieval-encoder
static`` for the static arm) leaves it. Each arm warms up with ``--warmup`` random legal steps, then ``--rounds``
rounds follow; in each, the arms take turns (the first arm alternating from round to round), and an arm's turn times
``--steps`` EDO-v0 steps and then as many CartPole-v1 steps in the same process.

The static encoder is not exact (other vectors, other search results), so the arms do not step the same
trajectories: each window also reports how many texts its encoder embedded (no cache held them) and how many index
searches it ran. Reported per round and as medians: each arm's microseconds per EDO step, its ratio to CartPole's rate
in the same window, and the static / default time per EDO step.

Usage: ``python -m tools.ab_encoders [--rounds 7] [--steps 20000] [--warmup 150000]``.
Results: ``tools/results/ab_encoders.{json,md}`` (or ``--out-dir``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import git_revision, machine_line
from benchmarks.train_throughput import prepare_cache
from tools.ab_windows import Arm, alternate, close_arms, parse_args, summarise, write_ab_results

ARMS = ("default", "static")
_KWARGS: dict[str, dict[str, Any]] = {"default": {}, "static": {"retrieval": {"encoder": "static"}}}


def main() -> None:
    args = parse_args(__doc__)
    tmp = Path(tempfile.mkdtemp(prefix="edo_ab_encoders_"))
    arms: dict[str, Arm] = {}
    try:
        for name in ARMS:
            print(f"{name}: preparing a cache directory (as `edo prepare` leaves it) ...", flush=True)
            prepare_cache(tmp / name, env_kwargs=_KWARGS[name])
            arms[name] = Arm(name, tmp / name, env_kwargs=_KWARGS[name])

        def report(row: dict[str, Any]) -> None:
            a, b = row["static"], row["default"]
            row["static_over_default_time"] = a["edo_s"] / b["edo_s"]
            print(f"round {row['round']}: default {b['edo_us_per_step']:.1f} us ({b['edo_over_cartpole']:.3f}x CartPole; "
                  f"{b['embedder_calls']} texts embedded, {b['index_searches']} searches), static "
                  f"{a['edo_us_per_step']:.1f} us ({a['edo_over_cartpole']:.3f}x; {a['embedder_calls']} embedded, "
                  f"{a['index_searches']} searches); time ratio {row['static_over_default_time']:.3f}", flush=True)  # fmt: skip

        rounds = alternate(arms, ARMS, args.rounds, args.steps, args.warmup, report)
    finally:
        close_arms(arms, tmp)
    summary = summarise(rounds, "static_over_default_time", ARMS)
    for arm in ARMS:
        summary[arm]["embedder_calls_per_window"] = [row[arm]["embedder_calls"] for row in rounds]
        summary[arm]["index_searches_per_window"] = [row[arm]["index_searches"] for row in rounds]
    rev = git_revision()
    s, d = summary["static"], summary["default"]
    headline = (
        f"**Median static / default time per EDO step: {summary['static_over_default_time']['median']:.3f}** (rounds "
        f"{summary['static_over_default_time']['min']:.3f}-{summary['static_over_default_time']['max']:.3f}). Medians: "
        f"default {d['edo_us_per_step']:.1f} us a step, **{d['edo_over_cartpole']:.3f}x** CartPole; static "
        f"{s['edo_us_per_step']:.1f} us, **{s['edo_over_cartpole']:.3f}x**."
    )
    md = [
        "# A/B: the static (model2vec) retrieval encoder against the default one (warm EDO-v0 steps)",
        "",
        f"Machine: {machine_line()}. Command: `python -m tools.ab_encoders "
        f"--rounds {args.rounds} --steps {args.steps} --warmup {args.warmup}`.",
        "",
        "Two long-lived processes of the same code (`retrieval.encoder` default / `static`), each on a cache directory "
        "prepared as `edo prepare` leaves it for its encoder, alternating windows; the same seeds and actions, but not "
        "the same trajectories (the static encoder changes search results). The ratio to CartPole-v1 is measured in "
        "the same window.",
        "",
        headline,
        "",
        "| round | first | default us/step | default / CartPole | default: embedded, searches | static us/step | "
        "static / CartPole | static: embedded, searches | static / default time |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rounds:
        a, b = row["static"], row["default"]
        md.append(f"| {row['round']} | {row['first']} | {b['edo_us_per_step']:.1f} | {b['edo_over_cartpole']:.3f} | "
                  f"{b['embedder_calls']}, {b['index_searches']} | {a['edo_us_per_step']:.1f} | "
                  f"{a['edo_over_cartpole']:.3f} | {a['embedder_calls']}, {a['index_searches']} | "
                  f"{row['static_over_default_time']:.3f} |")  # fmt: skip
    write_ab_results("ab_encoders", args, md, headline, {"revision": rev}, summary, rounds)


if __name__ == "__main__":
    main()

"""Which query texts still reach the embedding model after ``edo prepare``, and how often, under random play.

A fresh cache directory is prepared as ``make prepare`` leaves it, in a process of its own (corpus, canonical
queries and task texts embedded; the world's reachable queries embedded and searched ahead; word-piece counts
stored). Then EDO-v0 is made on it in this process and takes ``--steps`` random legal steps (seeded, as
``env_throughput.py`` takes them), counting every text the query encoders send to the model (a text no cache held:
each is a forward pass), per window of ``--window`` steps, by family:

- ``compute``: an analytics task's compute step mislabelled as a lookup, its instruction with the upstream figures
  filled in (wrong, abstained or drifted ones included; ``edo_gym.world.queries`` lists only the gold figures);
- ``reply``: a write step mislabelled as a lookup, its instruction with the refund window filled in;
- ``other``: anything else (e.g. a drifted name the entity linker did not resolve).

Reported: the texts, their counts per window and by family (all steps, and after ``--settle`` steps: the warm-up
``env_throughput.py`` uses before its timed windows), and the model's mean milliseconds per text. This says what
keeps ``env_throughput.py``'s warm windows from the floor without new texts.

Usage: ``python -m tools.first_seen_queries [--steps 300000] [--window 10000] [--settle 150000] [--seed 0]``.
Results: ``tools/results/first_seen_queries.{json,md}`` (or ``--out-dir``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"  # tools write here, apart from benchmarks/results
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.common import check_counts, git_revision, machine_line, write_results  # noqa: E402

FAMILIES: tuple[str, ...] = ("compute", "reply", "other")


def family_of(text: str) -> str:
    """The family (see the module docstring) of a query text."""
    from edo_gym.world.language import OP_WORDS, REPLY_INSTRUCTION, compute_instruction

    if any(text.startswith(compute_instruction(op, []).rstrip(".")) for op in OP_WORDS):
        return "compute"
    if text.startswith(REPLY_INSTRUCTION.split("{ref}")[0]):
        return "reply"
    return "other"


def record_model_texts(service: Any, sink: list[str]) -> None:
    """Append to ``sink`` every text ``service``'s query encoders send to their model (instruments the embedders)."""
    for embedder in {id(e.embedder): e.embedder for e in service.encoders}.values():
        encode_one = embedder.encode_one

        def recorded(text: str, _encode_one: Any = encode_one) -> Any:
            sink.append(text)
            return _encode_one(text)

        embedder.encode_one = recorded


def run(args: argparse.Namespace, cache_dir: Path) -> tuple[float, list[list[str]], float]:
    """Prepare the empty ``cache_dir`` in a fresh process (``train_throughput.prepare_cache``, as ``make prepare``
    leaves it), then make EDO-v0 on it here and step; returns the preparation's seconds, the texts sent to the model
    per window, and the model's seconds on them."""
    import gymnasium as gym

    import edo_gym  # noqa: F401 - registers EDO-v0
    from benchmarks.env_throughput import random_legal_steps
    from benchmarks.train_throughput import prepare_cache

    t0 = time.perf_counter()
    prepare_cache(cache_dir)
    prepare_s = time.perf_counter() - t0
    print(f"prepared the cache as `make prepare` leaves it in {prepare_s:.1f} s", flush=True)
    env = gym.make("EDO-v0")
    try:
        service = env.unwrapped.service
        texts: list[str] = []
        record_model_texts(service, texts)
        model_s0 = sum(e.model_s for e in service.encoders)
        rng = np.random.default_rng(args.seed)
        windows: list[list[str]] = []
        for w in range(args.steps // args.window):
            start = len(texts)
            random_legal_steps(env, args.window, rng, masked=True)
            windows.append(texts[start:])
            print(f"  steps {w * args.window:,}-{(w + 1) * args.window:,}: {len(windows[-1])} texts to the model", flush=True)
        return prepare_s, windows, sum(e.model_s for e in service.encoders) - model_s0
    finally:
        env.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300_000, help="random legal steps after the preparation")
    parser.add_argument("--window", type=int, default=10_000, help="steps per counting window")
    parser.add_argument("--settle", type=int, default=150_000, help="steps before the 'after warm-up' counts")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random actions")
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where to write the results (default: tools/results)")
    args = parser.parse_args(argv)
    check_counts(parser, args, positive=("steps", "window"), non_negative=("settle", "seed"))
    if args.steps % args.window:
        parser.error(f"--steps must be a multiple of --window, got --steps {args.steps} and --window {args.window}")
    if args.settle % args.window or args.settle >= args.steps:
        parser.error(f"--settle must be a multiple of --window below --steps, got {args.settle}")

    configured = os.environ.get("EDO_GYM_CACHE_DIR")
    with tempfile.TemporaryDirectory() as cache_dir:
        os.environ["EDO_GYM_CACHE_DIR"] = cache_dir  # read when the env is made
        try:
            prepare_s, windows, model_s = run(args, Path(cache_dir))
        finally:
            if configured is None:
                del os.environ["EDO_GYM_CACHE_DIR"]
            else:
                os.environ["EDO_GYM_CACHE_DIR"] = configured

    settle_windows = args.settle // args.window
    all_counts = Counter(family_of(t) for ts in windows for t in ts)
    late_counts = Counter(family_of(t) for ts in windows[settle_windows:] for t in ts)
    n = sum(all_counts.values())
    payload = {
        "settings": vars(args) | {"out_dir": str(args.out_dir) if args.out_dir else None},
        "revision": git_revision(),
        "prepare_s": prepare_s,
        "texts_per_window": [len(ts) for ts in windows],
        "by_family": {f: all_counts.get(f, 0) for f in FAMILIES},
        "by_family_after_settle": {f: late_counts.get(f, 0) for f in FAMILIES},
        "model_ms_per_text": 1e3 * model_s / n if n else None,
        "texts": [{"window": i, "family": family_of(t), "text": t} for i, ts in enumerate(windows) for t in ts],
    }
    late = sum(late_counts.values())
    per_window = late / (len(windows) - settle_windows)
    lines = [
        "# Query texts that still reach the embedding model after `edo prepare` (random legal play)",
        "",
        machine_line() + ".",
        f"Command: `{' '.join(['python', '-m', 'tools.first_seen_queries', *(argv if argv is not None else sys.argv[1:])])}`.",
        f"A fresh cache directory prepared as `make prepare` leaves it ({prepare_s:.1f} s, another process), then {args.steps:,} random legal "
        f"steps (seed {args.seed}) in windows of {args.window:,}.",
        "",
        "| | texts to the model | compute | reply | other |",
        "|---|---|---|---|---|",
        f"| all {args.steps:,} steps | {n} | " + " | ".join(str(all_counts.get(f, 0)) for f in FAMILIES) + " |",
        f"| after the first {args.settle:,} | {late} | " + " | ".join(str(late_counts.get(f, 0)) for f in FAMILIES) + " |",
        "",
        f"Per window: {payload['texts_per_window']}; after the first {args.settle:,} steps {per_window:.1f} texts per "
        f"{args.window:,} steps. The model took "
        + (f"{payload['model_ms_per_text']:.1f} ms per text (mean)." if n else "no time (no text).")
        + " First texts of each family:",
        "",
        *(f"- {f}: `{t}`" for f in FAMILIES for t in [x["text"] for x in payload["texts"] if x["family"] == f][:3]),
    ]
    json_path, md_path = write_results("first_seen_queries", payload, "\n".join(lines), out_dir=args.out_dir)
    print("\n".join(lines))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A/B of ``make train``'s training speed between an earlier git revision ("base") and this checkout ("head").

Absolute rates on a shared 2-core machine move by 10-30% from one hour to the next, so a change to training speed is
measured here as alternated pairs: a fresh ``edo train`` process with ``make train``'s arguments and
``--eval-episodes 0`` running the base revision's code (checked out into a temporary ``git worktree``), then one
running this checkout's code, ``--repeats`` times. Each arm has a cache directory of its own, prepared by its own
code as ``make prepare`` leaves it, and each run starts on a fresh copy of it (a run adds run-time cache entries:
without the copy, later runs would find more). Reported: each pair's training steps/s and time breakdown, the head /
base ratio of training wall time per pair and its median, and whether the two arms saved the same policy parameters
(an exact speed change trains the same policy, tensor for tensor). Both arms get the same arguments: an option of
``make train``'s that the base's ``edo train`` lacks (such as ``--update-threads`` for a base older than that option)
is left out of both, and the results say so.

Usage: ``python -m tools.ab_revisions --base REV [--repeats 3] [--timesteps 300000] [--no-reachable]``.
Results: ``tools/results/ab_revisions.{json,md}`` (or ``--out-dir``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"  # tools write here, apart from benchmarks/results
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.bench_lib import REPO  # noqa: E402
from benchmarks.common import git_revision, machine_line, write_results  # noqa: E402
from benchmarks.train_throughput import COMPLETE_CACHE, PARTS, TRAIN_ARGS, child_env, option_spans, without_options  # noqa: E402


def resolve_revision(rev: str) -> str:
    """The full commit id of ``rev`` in this repository (``SystemExit`` with git's message if it names none)."""
    proc = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=REPO, capture_output=True,
                          text=True)  # fmt: skip
    if proc.returncode != 0 or not proc.stdout.strip():
        raise SystemExit(f"--base {rev!r} is not a commit of this repository (git rev-parse found none)")
    return proc.stdout.strip()


def train_cli(code_dir: Path) -> str:
    """The module that runs ``edo train`` in ``code_dir``: ``baselines.cli``, or ``edo_gym.cli`` in revisions before
    the training commands moved to ``baselines``."""
    return "baselines.cli" if (code_dir / "baselines" / "cli.py").is_file() else "edo_gym.cli"


def shared_train_args(base_dir: Path, cache_dir: Path) -> tuple[list[str], list[str]]:
    """``make train``'s arguments that the base's ``edo train`` knows, for both arms, and the options left out (an
    option added after the base, such as ``--update-threads``; its value goes with it)."""
    proc = subprocess.run([sys.executable, "-m", train_cli(base_dir), "train", "--help"], cwd=base_dir,
                          env=child_env(cache_dir, base_dir), capture_output=True, text=True)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"edo train --help in {base_dir} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    known = set(re.findall(r"--[A-Za-z0-9][A-Za-z0-9-]*", proc.stdout))  # "[--seed SEED]", "--seed SEED", ...
    lacking = {span[0] for span in option_spans(TRAIN_ARGS)} - known
    dropped = [arg for span in option_spans(TRAIN_ARGS) if span[0] in lacking for arg in span]
    return without_options(TRAIN_ARGS, lacking), dropped


def train_once(
    code_dir: Path,
    cache_dir: Path,
    out_dir: Path,
    timesteps: int,
    train_args: list[str] | None = None,
) -> dict[str, Any]:
    """One fresh ``edo train`` process running the code in ``code_dir``: its rate, time breakdown and parameters.

    :param train_args: ``edo train``'s arguments (default: ``make train``'s, :data:`TRAIN_ARGS`)
    """
    train_args = TRAIN_ARGS if train_args is None else train_args
    args = ["-m", train_cli(code_dir), "train", *train_args, "--timesteps", str(timesteps), "--output-dir", str(out_dir)]
    proc = subprocess.run([sys.executable, *args], cwd=code_dir, env=child_env(cache_dir, code_dir),
                          capture_output=True, text=True)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"edo train in {code_dir} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    (summary,) = out_dir.glob("*.json")
    data = json.loads(summary.read_text())
    with zipfile.ZipFile(summary.with_suffix(".zip")) as zf:
        policy = zf.read("policy.pth")
    return {
        "steps": data["num_timesteps"],
        "train_wall_s": data["train_wall_s"],
        "steps_per_s": data["num_timesteps"] / data["train_wall_s"],
        "time_breakdown": data["time_breakdown"],
        "_policy": policy,
    }


def same_parameters(a: bytes, b: bytes) -> bool:
    """Whether two saved ``policy.pth`` blobs hold the same tensors, bit for bit."""
    import torch

    sa, sb = (torch.load(io.BytesIO(blob), map_location="cpu") for blob in (a, b))
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the earlier revision (a commit, tag or branch of this repository)")
    parser.add_argument("--repeats", type=int, default=3, help="(base, head) pairs, alternated")
    parser.add_argument("--timesteps", type=int, default=300_000, help="training steps (make train: 300k)")
    parser.add_argument(
        "--no-reachable", action="store_true", help="prepare the caches without the reachable queries (quicker)"
    )
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where to write the results (default: tools/results)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    if args.timesteps < 1:
        parser.error(f"--timesteps must be >= 1, got {args.timesteps}")
    base = resolve_revision(args.base)
    head = git_revision() or "unknown"
    runs: dict[str, list[dict[str, Any]]] = {"base": [], "head": []}
    # a SIGTERM (a killed run) unwinds through the ``finally`` below, which removes the temporary worktree
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with tempfile.TemporaryDirectory() as tmp:
        worktree = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(worktree), base], cwd=REPO, check=True)
        try:
            code = {"base": worktree, "head": REPO}
            train_args, dropped = shared_train_args(worktree, Path(tmp) / "help_cache")
            if dropped:
                print(f"  the base's edo train lacks {' '.join(dropped)}: both arms run without it", flush=True)
            for arm in ("base", "head"):
                print(f"preparing the {arm} arm's cache (as make prepare) ...", flush=True)
                subprocess.run([sys.executable, "-c", COMPLETE_CACHE, "0" if args.no_reachable else "1"], cwd=code[arm],
                               env=child_env(Path(tmp) / f"cache_{arm}", code[arm]), check=True,
                               capture_output=True)  # fmt: skip
            for r in range(args.repeats):
                for arm in ("base", "head"):
                    cache = Path(tmp) / f"cache_{arm}_{r}"
                    shutil.copytree(Path(tmp) / f"cache_{arm}", cache)
                    run = train_once(code[arm], cache, Path(tmp) / f"{arm}{r}", args.timesteps, train_args)
                    shutil.rmtree(cache)
                    runs[arm].append(run)
                    print(f"  pair {r + 1} {arm}: {run['train_wall_s']:.1f} s, {run['steps_per_s']:,.0f} steps/s", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO, check=False)
    same = [same_parameters(b["_policy"], h["_policy"]) for b, h in zip(runs["base"], runs["head"], strict=True)]
    for arm_runs in runs.values():
        for run in arm_runs:
            del run["_policy"]
    pair_ratios = [h["train_wall_s"] / b["train_wall_s"] for b, h in zip(runs["base"], runs["head"], strict=True)]
    med = {arm: {key: float(np.median([run["time_breakdown"][key] for run in runs[arm]])) for key in PARTS} for arm in runs}
    payload = {
        "settings": vars(args)
        | {"out_dir": str(args.out_dir) if args.out_dir else None, "train_args": train_args, "dropped_train_args": dropped},
        "base_revision": base,
        "head_revision": head,
        "runs": runs,
        "head_over_base_wall": pair_ratios,
        "median_head_over_base_wall": float(np.median(pair_ratios)),
        "median_parts_s": med,
        "same_parameters": same,
    }
    command = " ".join(["python", "-m", "tools.ab_revisions", *(argv if argv is not None else sys.argv[1:])])
    less = f" (less `{' '.join(dropped)}`, which the base's `edo train` lacks)" if dropped else ""
    lines = [
        "# make train's training time: an earlier revision (base) against this one (head), alternated",
        "",
        f"{machine_line()}. Command: `{command}`: base the `--base` revision, head this checkout. Fresh `edo train` processes with "
        f"`make train`'s arguments{less} and `--eval-episodes 0`, {args.timesteps:,} steps, alternated base / head, "
        f"{args.repeats} pairs; each arm on a cache prepared by its own code.",
        "",
        "| pair | base: training s (steps/s) | head: training s (steps/s) | head / base | same parameters |",
        "|---|---|---|---|---|",
        *(
            f"| {i + 1} | {b['train_wall_s']:.1f} ({b['steps_per_s']:,.0f}) | {h['train_wall_s']:.1f} "
            f"({h['steps_per_s']:,.0f}) | {ratio:.3f} | {'yes' if s else 'NO'} |"
            for i, (b, h, ratio, s) in enumerate(zip(runs["base"], runs["head"], pair_ratios, same, strict=True))
        ),
        "",
        f"Median head / base training time: **{payload['median_head_over_base_wall']:.3f}**.",
        "",
        "Medians of the time breakdown (seconds):",
        "",
        "| part | base | head |",
        "|---|---|---|",
        *(f"| {name} | {med['base'][key]:.1f} | {med['head'][key]:.1f} |" for key, name in PARTS.items()),
    ]
    json_path, md_path = write_results("ab_revisions", payload, "\n".join(lines) + "\n", args.out_dir)
    print("\n".join(lines))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

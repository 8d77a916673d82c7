"""Shared pieces of the caveat studies (``benchmarks/study_*.py``): command line, budgets, the run loop,
heuristic references on the same held-out tasks, formatting and plotting.

Every study trains with :func:`benchmarks.bench_lib.execute_run` (one subprocess per run, the same code path as
``grpo_vs_ppo.py``) and evaluates heuristics in-process with :mod:`baselines.evaluation`, on the same first
``eval_episodes`` held-out tasks and the same per-episode seeds (``EVAL_SEED + k``) as the trained models.

Budgets come in three sizes: ``full`` (default), ``--quick`` (the reduced suite, ``make bench-quick``) and
``--tiny`` (smoke tests only: a few hundred steps, a few episodes; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.bench_lib import EVAL_SEED, RunSpec, execute_run, execute_runs, mean_ci95  # noqa: E402
from benchmarks.common import RESULTS_DIR, machine_info, machine_line, write_results  # noqa: E402

#: Actor hidden sizes of every trained model (the same as ``grpo_vs_ppo.py``'s default).
NET_ARCH = [128, 128]
MODES = ("tiny", "quick", "full")
#: A learned policy whose mean calls per episode is below this submits (almost) at once: it has collapsed.
COLLAPSE_CALLS = 0.5


def study_parser(doc: str | None) -> argparse.ArgumentParser:
    """The options every study shares; a study adds its own."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="reduced budget (the make bench-quick suite)")
    size.add_argument("--tiny", action="store_true", help="smoke-test budget: checks the plumbing, the figures mean nothing")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="training seeds (default by mode)")
    parser.add_argument("--timesteps", type=int, default=None, help="env steps per training run (default by mode)")
    parser.add_argument("--eval-episodes", type=int, default=None, help="held-out tasks per evaluation (default by mode)")
    parser.add_argument("--out-dir", default=str(RESULTS_DIR), help="where <study>.json/.md/.png go")
    return parser


def mode_of(args: argparse.Namespace) -> str:
    return "tiny" if args.tiny else "quick" if args.quick else "full"


def pick(args: argparse.Namespace, full: Any, quick: Any, tiny: Any) -> Any:
    """The value of a budget knob for the run's mode."""
    return {"full": full, "quick": quick, "tiny": tiny}[mode_of(args)]


def resolve_common(args: argparse.Namespace, seeds: tuple, timesteps: tuple, episodes: tuple) -> None:
    """Fill ``args.seeds``/``timesteps``/``eval_episodes`` from ``(full, quick, tiny)`` defaults unless given."""
    args.seeds = args.seeds if args.seeds is not None else list(pick(args, *seeds))
    args.timesteps = args.timesteps if args.timesteps is not None else pick(args, *timesteps)
    args.eval_episodes = args.eval_episodes if args.eval_episodes is not None else pick(args, *episodes)
    if args.timesteps < 1 or args.eval_episodes < 1 or not args.seeds:
        raise SystemExit("--timesteps and --eval-episodes must be >= 1 and --seeds non-empty")


def command(script: str, argv: list[str] | None) -> str:
    """The exact command line of this study run."""
    args = argv if argv is not None else sys.argv[1:]
    return " ".join(["python", f"benchmarks/{script}", *(shlex.quote(a) for a in args)])


def train_spec(algo: str, seed: int, env_id: str, timesteps: int, episodes: int, **kwargs: Any) -> RunSpec:
    """A run evaluated once, at the end, on the held-out split (no step-0 or intermediate evaluations)."""
    overrides = {"net_arch": list(NET_ARCH), **kwargs.pop("train_overrides", {})}
    return RunSpec(algo=algo, seed=seed, env_id=env_id, total_timesteps=timesteps, eval_every=timesteps + 1,
                   eval_episodes=episodes, eval_at_start=False, train_overrides=overrides, **kwargs)  # fmt: skip


def run_all(specs: list[tuple[str, RunSpec]], out_dir: Path, name: str, isolated: bool = False) -> dict[str, dict[str, Any]]:
    """Run ``(label, spec)`` pairs one after the other; records by ``label``.

    ``isolated=False`` (studies that compare task figures only): all runs in one subprocess
    (``execute_runs``, one start-up). ``isolated=True`` (run times or memory are compared): one fresh subprocess
    per run (``execute_run``).
    """
    records: dict[str, dict[str, Any]] = {}
    t0 = time.perf_counter()
    labels = [label for label, _ in specs]

    def report(k: int, rec: dict[str, Any]) -> None:
        records[labels[k]] = rec
        f = rec["final"]
        print(
            f"[{k + 1}/{len(specs)}] {labels[k]} ({rec['num_timesteps']:,} steps): success {f['success']:.3f}, "
            f"return {f['return']:+.3f}, calls/ep {f['calls']:.1f}, train {rec['wall_time_s']:.0f} s, "
            f"{time.perf_counter() - t0:.0f} s elapsed",
            flush=True,
        )

    log_dir = out_dir / "logs" / name
    if isolated:
        for k, (label, spec) in enumerate(specs):
            report(k, execute_run(spec, log_dir=log_dir / label.replace("/", "_")))
    else:
        print(f"{len(specs)} runs in one subprocess ({specs[0][1].total_timesteps:,} steps each) ...", flush=True)
        execute_runs([spec for _, spec in specs], log_path=log_dir / "batch.log", on_record=report)
    return records


def heuristic_results(env_id: str, env_kwargs: dict[str, Any], names: list[str], episodes: int) -> dict[str, dict[str, Any]]:
    """Heuristic policies on the first ``episodes`` held-out tasks of ``env_id`` (as the trained models)."""
    from baselines.evaluation import evaluate_heuristic, heldout_task_ids, make_eval_env
    from baselines.heuristics import make_heuristic

    env = make_eval_env(env_id, **env_kwargs)
    try:
        ids = heldout_task_ids(env, episodes)
        return {n: evaluate_heuristic(make_heuristic(n), env, ids, seed=EVAL_SEED).as_dict() for n in names}
    finally:
        env.close()


def seed_stats(values: list[float]) -> dict[str, Any]:
    """Mean, 95% Student-t interval over seeds, and the values."""
    mean, ci = mean_ci95(values)
    return {"mean": mean, "ci95": list(ci), "values": [float(v) for v in values]}


def summarise_runs(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Figures of one configuration over its seeds: final held-out success/return (mean, CI), cost per episode,
    train wall time (median) and, for GRPO, the mean per-rollout fractions of dropped (tied-return) groups and of
    groups in which every member failed (no outcome signal left) or succeeded."""
    finals = [r["final"] for r in records]

    def grpo_mean(key: str) -> float | None:
        per_run = [finite_mean([s[key] for s in r["grpo_stats"]]) for r in records if r.get("grpo_stats")]
        return finite_mean(per_run) if per_run else None

    return {
        "seeds": [r["spec"]["seed"] for r in records],
        "success": seed_stats([f["success"] for f in finals]),
        "return": seed_stats([f["return"] for f in finals]),
        "tokens": float(np.mean([f["tokens"] for f in finals])),
        "calls": float(np.mean([f["calls"] for f in finals])),
        "latency_s": float(np.mean([f["latency_s"] for f in finals])),
        "wall_time_s": float(np.median([r["wall_time_s"] for r in records])),
        "env_steps": int(np.median([r["num_timesteps"] for r in records])),
        "collapsed_runs": sum(f["calls"] < COLLAPSE_CALLS for f in finals),
        "dropped_group_fraction": grpo_mean("dropped_group_fraction"),
        "all_fail_group_fraction": grpo_mean("all_fail_fraction"),
        "all_success_group_fraction": grpo_mean("all_success_fraction"),
    }


def fmt_frac(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def fmt_stats(stats: dict[str, Any], digits: int = 3) -> str:
    """``mean`` or ``mean (lo-hi)`` when there are several seeds."""
    if len(stats["values"]) < 2:
        return f"{stats['mean']:.{digits}f}"
    lo, hi = stats["ci95"]
    return f"{stats['mean']:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"


def fmt_eval(result: dict[str, Any]) -> str:
    """An ``EvalResult.as_dict()``'s success rate with its Wilson 95% interval over episodes."""
    lo, hi = result["success_ci95"]
    return f"{result['success_rate']:.3f} ({lo:.2f}-{hi:.2f})"


def collapsed_note(calls_per_episode: float) -> str:
    return " (collapsed: submits at once)" if calls_per_episode < COLLAPSE_CALLS else ""


def header(title: str, cmd: str, mode: str, settings_line: str) -> list[str]:
    lines = [f"# {title}", "", f"Machine: {machine_line(machine_info())}. Command: `{cmd}` (mode: {mode}).", "", settings_line]
    if mode == "tiny":
        lines += ["", "**Tiny (smoke-test) budget: these figures check the plumbing and mean nothing.**"]
    return lines


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def finish(name: str, payload: dict[str, Any], md: str, out_dir: Path) -> None:
    """Write ``<name>.json``/``.md`` (with machine, versions, command, date) and print the Markdown."""
    json_path, md_path = write_results(name, payload, md, out_dir)
    print("\n" + md)
    print(f"\nwrote {json_path} and {md_path}")


def finite_mean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None

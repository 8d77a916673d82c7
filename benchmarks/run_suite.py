"""Run the whole benchmark suite: GRPO vs PPO, then the caveat studies -- serially or on Ray, resumably.

Every study of the suite is declared in its own script (``benchmarks/<name>.py``, a ``benchmarks.study.Study``).
This runner plans the runs of every selected study at one budget tier, executes those without a finished record
(one subprocess per run: one after the other, or as Ray tasks), then summarises each study in suite order and
writes ``<name>.{json,md}`` (and a PNG) per study plus ``suite.{json,md}``: per study its exit code, its runs
(planned, finished, executed now, missing, failed) and its time, and the total.

``make bench`` runs the full tier (many hours on 2 CPU cores); ``make bench-quick`` the quick tier into
``benchmarks/results/quick/`` (grpo_vs_ppo with 2 seeds x 40k steps and 60 held-out tasks, every study at its
quick budget); ``make bench-smoke`` the smoke tier (plumbing only: a few hundred steps, a few episodes).

**Resumable.** Each finished run is stored at once in ``<out-dir>/records/<study>/<run>.json``; run the same
command again (after an interruption, in a later session, on another machine with the records copied) and only
the missing runs execute. ``--summarise-only`` writes the summaries from the finished runs without running
anything; a summary with runs missing says which.

**Ray.** ``--ray`` runs the runs as tasks on a local Ray instance, one per core (``--ray-workers N`` to change);
``--ray-address ADDR`` joins an existing cluster (``auto`` on a cluster node). Results, JSON schemas and tables
are those of the serial runner. A failed run is retried once, then reported (summary, suite.md, exit code 1).

Usage::

    python -m benchmarks.run_suite                    # full
    python -m benchmarks.run_suite --quick            # reduced (make bench-quick)
    python -m benchmarks.run_suite --quick --only study_horizon study_schools
    python -m benchmarks.run_suite --smoke --out-dir /tmp/bench --dry-run
    python -m benchmarks.run_suite --ray              # all cores of this machine
    python -m benchmarks.run_suite --ray-address auto # an existing Ray cluster
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import RESULTS_DIR, machine_info, machine_line, write_results
from benchmarks.executors import usable_cores
from benchmarks.study import (
    Study,
    StudyConfig,
    add_execution_flags,
    add_tier_flags,
    execution_of,
    run_studies,
    shown_path,
    tier_of,
)

#: Scripts in the order they are summarised (study_schools last: it reads grpo_vs_ppo.json).
SCRIPTS = ("grpo_vs_ppo", "study_levers", "study_horizon", "study_transfer", "study_planner", "study_retriever",
           "study_grpo_variants", "study_ppo_tuning", "study_schools")  # fmt: skip
#: Top-level keys of each script's JSON result (besides COMMON_KEYS).
RESULT_KEYS = {
    "grpo_vs_ppo": ("settings", "summary", "heuristics", "runs", "completeness"),
    "study_levers": ("settings", "levers", "heuristics", "best", "runs", "completeness"),
    "study_horizon": ("settings", "results", "gap_grpo_minus_ppo", "conclusion", "runs", "completeness"),
    "study_transfer": ("settings", "matrix", "heuristics", "transfer_gap", "conclusion", "runs", "completeness"),
    "study_planner": ("settings", "results", "replan_benefit", "conclusion", "runs", "completeness"),
    "study_retriever": ("settings", "models", "hf_cache", "other_models_found", "memory", "conclusion", "completeness"),
    "study_grpo_variants": ("settings", "variants", "conclusion", "runs", "completeness"),
    "study_ppo_tuning": ("settings", "rows", "runs", "completeness"),
    "study_schools": ("settings", "source", "policies", "pareto_tokens", "pareto_cost", "conclusion", "completeness"),
    "suite": ("mode", "scripts", "total_s", "failed", "executor", "runs"),
}
#: Keys every result file has. (Every study's also has ``completeness``: planned, finished, missing, failed runs.)
COMMON_KEYS = ("command", "date_utc", "machine", "versions")


def load_study(name: str) -> Study:
    """The ``STUDY`` declared in ``benchmarks/<name>.py``."""
    return importlib.import_module(f"benchmarks.{name}").STUDY


def study_flags(tier: str, out_dir: Path) -> list[str]:
    return ([] if tier == "full" else [f"--{tier}"]) + ["--out-dir", str(out_dir)]


def script_command(name: str, mode: str, out_dir: Path) -> list[str]:
    """The command line that runs one study of the suite on its own at tier ``mode`` (same results)."""
    tier = "smoke" if mode == "tiny" else mode
    return ["python", "-m", f"benchmarks.{name}", *study_flags(tier, Path(shown_path(out_dir)))]


def configure(names: list[str], tier: str, out_dir: Path) -> list[tuple[Study, StudyConfig]]:
    studies = []
    for k, name in enumerate(names):
        study = load_study(name)
        flags = study_flags(tier, out_dir)
        studies.append((study, study.configure(study.parser().parse_args(flags), flags, upstream=names[:k])))
    return studies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_tier_flags(parser)
    parser.add_argument("--out-dir", default=str(RESULTS_DIR))
    parser.add_argument("--only", nargs="+", choices=SCRIPTS, default=None, help="run only these scripts (suite order kept)")
    parser.add_argument("--dry-run", action="store_true", help="print each study's command, and its runs to stderr, and exit")
    add_execution_flags(parser)
    args = parser.parse_args(argv)
    tier = tier_of(args)
    out_dir = Path(args.out_dir)
    names = [s for s in SCRIPTS if args.only is None or s in args.only]
    execution = execution_of(args)
    studies = configure(names, tier, out_dir)
    if args.dry_run:
        from benchmarks.study import RunStore

        for (study, cfg), name in zip(studies, names, strict=True):
            print(" ".join(script_command(name, tier, out_dir)))
            plan = study.plan(cfg)
            done = sum(RunStore(cfg.out_dir, cfg.name).load(r) is not None for r in plan)
            print(f"  {name}: {len(plan)} runs, {done} finished", file=sys.stderr)
        return 0

    load_start = os.getloadavg()  # the machine may be shared: timings depend on what else runs
    t_start = time.perf_counter()
    outcomes = run_studies(studies, execution)
    total = time.perf_counter() - t_start
    load_end = os.getloadavg()
    rows: list[dict[str, Any]] = []
    for name, outcome in zip(names, outcomes, strict=True):
        c = outcome.runs.completeness()
        rows.append({"script": name, "command": " ".join(script_command(name, tier, out_dir)), "exit_code": 0 if outcome.ok else 1,
                     "wall_s": outcome.seconds, "runs_planned": c["planned"], "runs_finished": c["finished"],
                     "runs_executed": outcome.executed, "runs_missing": c["missing"], "runs_failed": c["failed"],
                     "summary_error": outcome.summary_error})  # fmt: skip
    failed = [r["script"] for r in rows if r["exit_code"] != 0]
    kind = "serial" if not execution.ray else f"ray ({execution.ray_address or 'local'})"
    executor = {"kind": "ray" if execution.ray else "serial", "ray_address": execution.ray_address,
                "ray_workers": execution.ray_workers or (usable_cores() if execution.ray and not execution.ray_address else None),
                "summarise_only": execution.summarise_only}  # fmt: skip
    runs = {"planned": sum(r["runs_planned"] for r in rows), "finished": sum(r["runs_finished"] for r in rows),
            "executed": sum(r["runs_executed"] for r in rows), "missing": sum(len(r["runs_missing"]) for r in rows),
            "failed": {f"{r['script']}/{k}": e for r in rows for k, e in r["runs_failed"].items()}}  # fmt: skip
    lines = [
        f"# Benchmark suite ({tier})",
        "",
        f"Machine: {machine_line(machine_info())}. Executor: {kind}"
        + (f", {executor['ray_workers']} workers" if executor["ray_workers"] else "")
        + f". Total wall time: {total:.0f} s ({total / 60:.1f} min). Load average (1/5/15 min) at start "
        f"{'/'.join(f'{x:.1f}' for x in load_start)}, at end {'/'.join(f'{x:.1f}' for x in load_end)}.",
        "",
        f"Runs: {runs['planned']} planned, {runs['finished']} finished ({runs['executed']} executed now), "
        f"{runs['missing']} missing, {len(runs['failed'])} failed twice.",
        "",
        "| script | exit | runs finished / planned | executed now | failed | time (s) | results |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {r['script']} | {r['exit_code']} | {r['runs_finished']} / {r['runs_planned']} | {r['runs_executed']} "
            f"| {len(r['runs_failed'])} | {r['wall_s']:.0f} | `{r['script']}.md` |"
            for r in rows
        ),  # fmt: skip
        "",
        "Time per script: the subprocess time of its runs executed now (summed: under Ray they overlap) plus its summary.",
    ]
    if failed:
        lines += ["", f"**Not complete: {', '.join(failed)}**."]
        for r in rows:
            if r["runs_failed"]:
                lines.append(
                    f"- {r['script']}: runs failed twice: {', '.join(r['runs_failed'])} (logs in `logs/{r['script']}/`)."
                )
            if r["runs_missing"] and not r["runs_failed"]:
                lines.append(f"- {r['script']}: {len(r['runs_missing'])} runs not run yet.")
            if r["summary_error"]:
                lines.append(f"- {r['script']}: the summary failed: `{r['summary_error'].strip().splitlines()[-1]}`.")
    md = "\n".join(lines)
    payload = {"mode": tier, "scripts": rows, "total_s": total, "failed": failed, "executor": executor, "runs": runs,
               "loadavg_start": load_start, "loadavg_end": load_end}  # fmt: skip
    write_results("suite", payload, md, out_dir)
    print("\n" + md)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Run the whole benchmark suite: GRPO vs PPO, then the caveat studies, one script after the other.

``make bench`` runs the full suite (many hours on 2 CPU cores); ``make bench-quick`` runs ``--quick``, the reduced
suite sized to finish in about 15 minutes on 2 cores (grpo_vs_ppo with 2 seeds x 40k steps and 60 held-out
tasks, every study in its ``--quick`` mode). ``--tiny`` is for smoke tests only (a few hundred steps, a few
episodes: the figures mean nothing). Each script writes its own ``<name>.{json,md}`` (and a PNG) into
``--out-dir``; this script adds ``suite.{json,md}`` with every script's exit code and wall time, and the total.
``study_schools`` runs last so that it reads the learned policies from the ``grpo_vs_ppo.json`` just written.

Usage::

    python benchmarks/run_suite.py                    # full
    python benchmarks/run_suite.py --quick            # reduced (make bench-quick)
    python benchmarks/run_suite.py --quick --only study_horizon study_schools
    python benchmarks/run_suite.py --tiny --out-dir /tmp/bench --dry-run
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.common import RESULTS_DIR, machine_info, machine_line, write_results  # noqa: E402

HERE = Path(__file__).resolve().parent
#: Scripts in the order they run (study_schools last: it reads grpo_vs_ppo.json).
SCRIPTS = ("grpo_vs_ppo", "study_horizon", "study_transfer", "study_planner", "study_retriever", "study_grpo_variants",
           "study_ppo_tuning", "study_schools")  # fmt: skip
#: grpo_vs_ppo.py has its own flags; these are its reduced and smoke-test budgets.
GRPO_VS_PPO_ARGS = {
    "full": [],
    "quick": ["--seeds", "0", "1", "--timesteps", "40000", "--eval-episodes", "60"],
    "tiny": ["--seeds", "0", "--timesteps", "300", "--eval-episodes", "3", "--algos", "grpo", "ppo"],
}
#: Top-level keys of each script's JSON result (besides command, date_utc, machine, versions, which all have).
RESULT_KEYS = {
    "grpo_vs_ppo": ("settings", "summary", "heuristics", "runs"),
    "study_horizon": ("settings", "results", "gap_grpo_minus_ppo", "conclusion", "runs"),
    "study_transfer": ("settings", "matrix", "heuristics", "transfer_gap", "conclusion", "runs"),
    "study_planner": ("settings", "results", "replan_benefit", "conclusion", "runs"),
    "study_retriever": ("settings", "models", "hf_cache", "other_models_found", "memory", "conclusion"),
    "study_grpo_variants": ("settings", "variants", "conclusion", "runs"),
    "study_ppo_tuning": ("settings", "rows", "runs"),
    "study_schools": ("settings", "source", "policies", "pareto_tokens", "pareto_cost", "conclusion"),
    "suite": ("mode", "scripts", "total_s", "failed"),
}
COMMON_KEYS = ("command", "date_utc", "machine", "versions")


def script_command(name: str, mode: str, out_dir: Path) -> list[str]:
    """The command line that runs one script of the suite in ``mode``."""
    if name == "grpo_vs_ppo":
        flags = GRPO_VS_PPO_ARGS[mode]
    else:
        flags = [] if mode == "full" else [f"--{mode}"]
    return [sys.executable, str(HERE / f"{name}.py"), *flags, "--out-dir", str(out_dir)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="the reduced suite (about 15 minutes on 2 cores)")
    size.add_argument("--tiny", action="store_true", help="smoke-test budgets (figures mean nothing)")
    parser.add_argument("--out-dir", default=str(RESULTS_DIR))
    parser.add_argument("--only", nargs="+", choices=SCRIPTS, default=None, help="run only these scripts (suite order kept)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    args = parser.parse_args(argv)
    mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    out_dir = Path(args.out_dir)
    names = [s for s in SCRIPTS if args.only is None or s in args.only]
    commands = {n: script_command(n, mode, out_dir) for n in names}
    if args.dry_run:
        for cmd in commands.values():
            print(" ".join(cmd))
        return 0

    env = dict(os.environ, PYTHONPATH=str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    load_start = os.getloadavg()  # the machine may be shared: timings depend on what else runs
    rows: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    for k, (name, cmd) in enumerate(commands.items(), 1):
        print(f"\n=== [{k}/{len(commands)}] {name}: {' '.join(cmd)}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, cwd=HERE.parent, env=env).returncode
        wall = time.perf_counter() - t0
        rows.append({"script": name, "command": " ".join(cmd), "exit_code": rc, "wall_s": wall})
        print(f"=== {name}: exit {rc}, {wall:.0f} s (suite so far {time.perf_counter() - t_start:.0f} s)", flush=True)
    total = time.perf_counter() - t_start
    load_end = os.getloadavg()
    failed = [r["script"] for r in rows if r["exit_code"] != 0]
    lines = [
        f"# Benchmark suite ({mode})",
        "",
        f"Machine: {machine_line(machine_info())}. Total wall time: {total:.0f} s ({total / 60:.1f} min). Load average "
        f"(1/5/15 min) at start {'/'.join(f'{x:.1f}' for x in load_start)}, at end {'/'.join(f'{x:.1f}' for x in load_end)}.",
        "",
        "| script | exit | wall (s) | results |",
        "|---|---|---|---|",
        *(f"| {r['script']} | {r['exit_code']} | {r['wall_s']:.0f} | `{r['script']}.md` |" for r in rows),
    ]
    if failed:
        lines += ["", f"**Failed: {', '.join(failed)}** (see their output above / logs in `logs/`)."]
    md = "\n".join(lines)
    payload = {
        "mode": mode,
        "scripts": rows,
        "total_s": total,
        "failed": failed,
        "loadavg_start": load_start,
        "loadavg_end": load_end,
    }
    write_results("suite", payload, md, out_dir)
    print("\n" + md)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

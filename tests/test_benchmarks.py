"""Smoke tests of the benchmark suite (benchmarks/run_suite.py, benchmarks/study_*.py) on tiny budgets.

The fast tests run one study each in a subprocess with ``--tiny`` budgets into ``tmp_path`` and check that the
result files exist and carry the documented keys; the whole tiny suite is ``@pytest.mark.slow``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from benchmarks.bench_lib import RunSpec
from benchmarks.run_suite import COMMON_KEYS, RESULT_KEYS, SCRIPTS, script_command

REPO = Path(__file__).resolve().parent.parent


def run_script(args: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))  # fmt: skip
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def check_result(out_dir: Path, name: str) -> dict:
    path = out_dir / f"{name}.json"
    assert path.is_file(), f"{path} missing"
    assert (out_dir / f"{name}.md").is_file()
    data = json.loads(path.read_text())
    missing = [k for k in (*COMMON_KEYS, *RESULT_KEYS[name]) if k not in data]
    assert not missing, f"{name}.json lacks {missing}"
    return data


def test_runspec_backwards_compatible_and_json_round_trip():
    old = RunSpec(**{"algo": "grpo", "seed": 0, "env_id": "EDO-v0", "total_timesteps": 10})  # an old-style spec
    assert old.extra_eval == [] and old.save_model_path is None and old.eval_at_start
    spec = RunSpec(algo="ppo", seed=1, extra_eval=[("EDO-Support-v0", {})], save_model_path="/tmp/x.zip", eval_at_start=False)
    again = RunSpec(**json.loads(json.dumps(asdict(spec))))
    assert again.extra_eval[0][0] == "EDO-Support-v0" and again.save_model_path == "/tmp/x.zip" and not again.eval_at_start


def test_suite_dry_run_lists_every_script(tmp_path):
    proc = run_script(["benchmarks/run_suite.py", "--tiny", "--dry-run", "--out-dir", str(tmp_path)])
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == len(SCRIPTS)
    for name, line in zip(SCRIPTS, lines, strict=True):
        assert f"{name}.py" in line and str(tmp_path) in line
        assert (REPO / "benchmarks" / f"{name}.py").is_file()
    assert lines[-1].split()[1].endswith("study_schools.py")  # last: it reads grpo_vs_ppo.json
    assert "--quick" in script_command("study_horizon", "quick", tmp_path)
    assert "40000" in script_command("grpo_vs_ppo", "quick", tmp_path)


def test_study_schools_tiny_reads_grpo_vs_ppo_results(tmp_path):
    fake = {
        "settings": {"env": "EDO-v0", "eval_episodes": 3},
        "runs": {"grpo": [{"spec": {"seed": s}, "num_timesteps": 1000,
                           "curve": [{"success": 0.5, "return": 0.3, "tokens": 100.0, "calls": 2.0, "latency_s": 1.0}]}
                          for s in (0, 1)]},
    }  # fmt: skip
    (tmp_path / "grpo_vs_ppo.json").write_text(json.dumps(fake))
    run_script(["benchmarks/study_schools.py", "--tiny", "--out-dir", str(tmp_path)])
    data = check_result(tmp_path, "study_schools")
    assert set(data["policies"]) == {"random", "static_pipeline", "greedy_router", "oracle", "grpo"}
    assert data["policies"]["grpo"]["learned"] and data["policies"]["grpo"]["success"] == 0.5
    assert data["settings"]["eval_episodes"] == 3 and data["settings"]["source_path"] is not None
    assert (tmp_path / "study_schools.png").is_file()


def test_study_horizon_tiny_one_run(tmp_path):
    run_script(["benchmarks/study_horizon.py", "--tiny", "--hops", "2", "--algos", "grpo", "--out-dir", str(tmp_path)])
    data = check_result(tmp_path, "study_horizon")
    cell = data["results"]["2"]
    assert set(cell["heuristics"]) == {"oracle", "greedy_router", "static_pipeline", "random"}
    assert 0.0 <= cell["algos"]["grpo"]["success"]["mean"] <= 1.0
    run = data["runs"]["h2-grpo-s0"]
    assert run["grpo_stats"], "GRPO group statistics were not recorded"
    assert run["batch_position"] == 0  # studies without timing comparisons run in one batch subprocess
    assert {"dropped_group_fraction", "all_fail_fraction"} <= set(run["grpo_stats"][0])
    assert (tmp_path / "study_horizon.png").is_file()


@pytest.mark.slow
def test_tiny_suite_end_to_end(tmp_path):
    run_script(["benchmarks/run_suite.py", "--tiny", "--out-dir", str(tmp_path)], timeout=1800)
    for name in (*SCRIPTS, "suite"):
        check_result(tmp_path, name)
    suite = json.loads((tmp_path / "suite.json").read_text())
    assert suite["failed"] == [] and [r["script"] for r in suite["scripts"]] == list(SCRIPTS)
    schools = json.loads((tmp_path / "study_schools.json").read_text())
    assert schools["settings"]["source_path"] == str(tmp_path / "grpo_vs_ppo.json")  # read the suite's own results


def test_study_ppo_tuning_tiny_one_setting(tmp_path):
    run_script(["benchmarks/study_ppo_tuning.py", "--tiny", "--algos", "maskable_ppo", "--settings", "sb3 defaults",
                "--out-dir", str(tmp_path)])  # fmt: skip
    data = check_result(tmp_path, "study_ppo_tuning")
    (row,) = data["rows"].values()
    assert row["algo"] == "maskable_ppo" and row["overrides"]["n_epochs"] == 10
    assert 0.0 <= row["success"]["mean"] <= 1.0

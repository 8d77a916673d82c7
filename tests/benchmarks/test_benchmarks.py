"""The benchmark package: declaring studies, the resumable runner, serial and Ray execution, and smoke runs of the
studies (``benchmarks/``).

Fast tests drive the runner in-process with a toy study and a fake executor (no training), or run one study at
the smoke tier in a subprocess. Tests that run several real trainings, or start Ray, are ``@pytest.mark.slow``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from benchmarks import executors
from benchmarks.bench_lib import RunSpec, run_subprocess
from benchmarks.run_suite import COMMON_KEYS, RESULT_KEYS, SCRIPTS, load_study, script_command
from benchmarks.study import (
    Budget,
    Execution,
    PlannedRun,
    Point,
    RunSet,
    Study,
    StudyConfig,
    Tiered,
    execution_of,
    run_studies,
)

REPO = Path(__file__).resolve().parents[2]
#: Keys whose values are measurements of the machine (times, memory) or of the invocation, not results.
VOLATILE = {"command", "date_utc", "machine", "versions", "wall_time_s", "rollout_s", "update_s", "eval_s", "train_time_s",
            "peak_rss_bytes", "cuda_peak_bytes", "rollout_time_s", "update_time_s", "update_time_per_sample_epoch_s",
            "time_to_target_s", "grpo_over_ppo", "targets", "source", "source_path", "out_dir", "latency_ms", "memory",
            "wall_time_over_base"}  # fmt: skip


def run_script(args: list[str], timeout: int = 600, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))  # fmt: skip
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if check:
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


def strip_volatile(obj: Any) -> Any:
    """``obj`` without the machine's measurements (times, memory) and invocation details (command, out dir)."""
    if isinstance(obj, dict):
        return {k: strip_volatile(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [strip_volatile(v) for v in obj]
    return obj


# -- a toy study and a fake executor: the runner's bookkeeping without training ---------------------------------------
def toy_summarise(cfg: StudyConfig, runs: RunSet) -> tuple[dict[str, Any], str]:
    success = {k: r["final"]["success"] for k, r in runs.by_key().items()}
    return {"settings": cfg.settings(), "success": success}, "# toy\n\n" + "\n".join(f"- {k}: {v}" for k, v in success.items())


TOY = Study(
    name="toy",
    doc=None,
    budgets=Tiered(full=Budget(1000, (0, 1), 2), quick=Budget(100, (0, 1), 2), smoke=Budget(10, (0, 1), 2)),
    algos=Tiered(full=("grpo", "ppo"), quick=("grpo", "ppo"), smoke=("grpo", "ppo")),
    points=lambda cfg: {"a": Point(), "b": Point(env_kwargs={"planner_error_rate": 0.5})},
    summarise=toy_summarise,
)
TOY_KEYS = ["a-grpo-s0", "a-ppo-s0", "b-grpo-s0", "b-ppo-s0", "a-grpo-s1", "a-ppo-s1", "b-grpo-s1", "b-ppo-s1"]


def toy_config(out_dir: Path, *flags: str) -> StudyConfig:
    argv = ["--smoke", "--out-dir", str(out_dir), *flags]
    return TOY.configure(TOY.parser().parse_args(argv), argv)


def fake_record(spec: RunSpec) -> dict[str, Any]:
    """A run record as ``run_in_process`` returns it, with a success that identifies the run."""
    success = (spec.seed + 1) / 10 + (0.5 if spec.algo == "ppo" else 0.0)
    final = {
        "env_steps": spec.total_timesteps,
        "success": success,
        "return": success,
        "tokens": 1.0,
        "calls": 1.0,
        "latency_s": 1.0,
    }
    return {"spec": asdict(spec), "num_timesteps": spec.total_timesteps, "wall_time_s": 0.1, "final": final, "curve": [final],
            "grpo_stats": None}  # fmt: skip


def fake_executor(executed: list[str], stop_after: int | None = None):
    """Runs by fabricating their records; raises KeyboardInterrupt (as Ctrl-C would) after ``stop_after`` runs."""

    def execute(runs, execution, on_success, on_failure):  # noqa: ANN001, ANN202 - the executor signature
        for run in runs:
            if stop_after is not None and len(executed) == stop_after:
                raise KeyboardInterrupt
            executed.append(run.key)
            on_success(run, {"ok": True, "record": fake_record(run.spec), "log": "", "host": "test", "seconds": 0.0}, 1)

    return execute


def test_plan_is_the_grid_seed_by_seed_with_unique_keys(tmp_path):
    cfg = toy_config(tmp_path)
    plan = TOY.plan(cfg)
    assert [r.key for r in plan] == TOY_KEYS
    assert {(r.point, r.algo, r.seed) for r in plan} == {(p, a, s) for p in "ab" for a in ("grpo", "ppo") for s in (0, 1)}
    assert all(r.spec.total_timesteps == 10 and r.spec.eval_episodes == 2 and r.spec.seed == r.seed for r in plan)
    assert plan[2].spec.env_kwargs == {"planner_error_rate": 0.5}


def test_tier_defaults_and_overrides(tmp_path):
    quick = TOY.configure(TOY.parser().parse_args(["--quick"]), ["--quick"])
    assert quick.tier == "quick" and quick.budget == Budget(100, (0, 1), 2)
    cfg = toy_config(tmp_path, "--seeds", "3", "--timesteps", "7", "--algos", "ppo")
    assert cfg.budget == Budget(7, (3,), 2) and cfg.algos == ("ppo",)
    assert cfg.given == ("seeds", "timesteps", "algos")
    assert [r.key for r in TOY.plan(cfg)] == ["a-ppo-s3", "b-ppo-s3"]
    with pytest.raises(SystemExit, match="unknown algorithm"):
        toy_config(tmp_path, "--algos", "dqn")


def test_runner_writes_one_record_per_run_and_skips_finished_runs(tmp_path):
    executed: list[str] = []
    [outcome] = run_studies([(TOY, toy_config(tmp_path))], Execution(), executor=fake_executor(executed))
    assert outcome.ok and executed == TOY_KEYS
    files = sorted(p.name for p in (tmp_path / "records" / "toy").iterdir())
    assert files == sorted(f"{k}.json" for k in TOY_KEYS)
    stored = json.loads((tmp_path / "records" / "toy" / "b-ppo-s1.json").read_text())
    assert stored["spec"]["env_kwargs"] == {"planner_error_rate": 0.5} and stored["provenance"]["attempts"] == 1
    again: list[str] = []
    [outcome] = run_studies([(TOY, toy_config(tmp_path))], Execution(), executor=fake_executor(again))
    assert again == [] and outcome.executed == 0 and outcome.ok
    data = json.loads((tmp_path / "toy.json").read_text())
    assert data["completeness"] == {"planned": 8, "finished": 8, "missing": [], "failed": {}}
    assert data["success"]["b-ppo-s1"] == pytest.approx(0.7)


def test_runner_resumes_after_an_interrupted_suite(tmp_path):
    executed: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        run_studies([(TOY, toy_config(tmp_path))], Execution(), executor=fake_executor(executed, stop_after=3))
    records = tmp_path / "records" / "toy"
    assert sorted(p.name for p in records.iterdir()) == sorted(f"{k}.json" for k in TOY_KEYS[:3])  # no partial file
    resumed: list[str] = []
    [outcome] = run_studies([(TOY, toy_config(tmp_path))], Execution(), executor=fake_executor(resumed))
    assert resumed == TOY_KEYS[3:] and outcome.ok
    uninterrupted = tmp_path / "once"
    run_studies([(TOY, toy_config(uninterrupted))], Execution(), executor=fake_executor([]))
    assert strip_volatile(json.loads((tmp_path / "toy.json").read_text())) == strip_volatile(
        json.loads((uninterrupted / "toy.json").read_text())
    )


def test_record_written_for_another_spec_is_stale_and_rerun(tmp_path):
    run_studies([(TOY, toy_config(tmp_path))], Execution(), executor=fake_executor([]))
    rerun: list[str] = []
    run_studies([(TOY, toy_config(tmp_path, "--timesteps", "20"))], Execution(), executor=fake_executor(rerun))
    assert rerun == TOY_KEYS  # another budget: nothing reused
    (tmp_path / "records" / "toy" / "a-grpo-s0.json").write_text("{truncated")  # a damaged file counts as missing
    again: list[str] = []
    run_studies([(TOY, toy_config(tmp_path, "--timesteps", "20"))], Execution(), executor=fake_executor(again))
    assert again == ["a-grpo-s0"]


def test_record_written_under_other_defaults_or_env_version_is_stale(tmp_path):
    run_studies([(TOY, toy_config(tmp_path))], Execution(), executor=fake_executor([]))
    path = tmp_path / "records" / "toy" / "a-grpo-s0.json"
    stored = json.loads(path.read_text())
    assert stored["context"]["edo_gym_version"] and "warm_start" in stored["context"]["train_defaults"]
    stored["context"]["train_defaults"]["learning_rate"] = 123.0  # written when TrainConfig had another default
    path.write_text(json.dumps(stored))
    older = tmp_path / "records" / "toy" / "b-ppo-s1.json"
    stored = json.loads(older.read_text())
    del stored["context"]  # written before records carried their context
    older.write_text(json.dumps(stored))
    rerun: list[str] = []
    run_studies([(TOY, toy_config(tmp_path))], Execution(), executor=fake_executor(rerun))
    assert rerun == ["a-grpo-s0", "b-ppo-s1"]


def test_record_holding_a_retired_setting_at_its_neutral_value_stays_valid(tmp_path):
    """A setting TrainConfig no longer has (``RETIRED_DEFAULTS``) in a stored context, at the value at which it changed
    nothing, leaves the record valid; at another value the record was another run and is redone."""
    run_studies([(TOY, toy_config(tmp_path))], Execution(), executor=fake_executor([]))
    for key, value in (("a-grpo-s0", None), ("b-ppo-s1", 2)):
        path = tmp_path / "records" / "toy" / f"{key}.json"
        stored = json.loads(path.read_text())
        stored["context"]["train_defaults"]["update_threads"] = value
        path.write_text(json.dumps(stored))
    rerun: list[str] = []
    run_studies([(TOY, toy_config(tmp_path))], Execution(), executor=fake_executor(rerun))
    assert rerun == ["b-ppo-s1"]


def test_partial_suite_is_summarised_and_names_its_missing_runs(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        run_studies([(TOY, toy_config(tmp_path))], Execution(), executor=fake_executor([], stop_after=3))
    none: list[str] = []
    [outcome] = run_studies([(TOY, toy_config(tmp_path))], Execution(summarise_only=True), executor=fake_executor(none))
    assert none == [] and not outcome.ok
    data = json.loads((tmp_path / "toy.json").read_text())
    assert data["completeness"]["finished"] == 3 and data["completeness"]["missing"] == TOY_KEYS[3:]
    assert sorted(data["success"]) == sorted(TOY_KEYS[:3])
    md = (tmp_path / "toy.md").read_text()
    assert "Partial results: 5 of 8 planned runs are missing" in md and "b-ppo-s1" in md


def test_failed_run_is_retried_once_then_reported(tmp_path, monkeypatch):
    attempts: dict[str, int] = {}

    def flaky(spec: dict[str, Any]) -> dict[str, Any]:
        key = f"{'a' if not spec['env_kwargs'] else 'b'}-{spec['algo']}-s{spec['seed']}"
        attempts[key] = attempts.get(key, 0) + 1
        broken = key == "b-ppo-s0" or (key == "a-grpo-s1" and attempts[key] == 1)  # always / only the first time
        if broken:
            return {
                "ok": False,
                "record": None,
                "error": f"exit 1: boom in {key}",
                "log": "trace",
                "host": "h",
                "seconds": 0.0,
            }
        return {"ok": True, "record": fake_record(RunSpec(**spec)), "error": None, "log": "", "host": "h", "seconds": 0.0}

    monkeypatch.setattr(executors, "run_spec_dict", flaky)
    [outcome] = run_studies([(TOY, toy_config(tmp_path))], Execution())
    assert attempts["b-ppo-s0"] == 2 and attempts["a-grpo-s1"] == 2 and attempts["a-grpo-s0"] == 1
    assert not outcome.ok and list(outcome.runs.failed) == ["b-ppo-s0"]
    data = json.loads((tmp_path / "toy.json").read_text())
    assert data["completeness"]["missing"] == ["b-ppo-s0"] and "boom in b-ppo-s0" in data["completeness"]["failed"]["b-ppo-s0"]
    assert "failed twice: b-ppo-s0" in (tmp_path / "toy.md").read_text()
    assert json.loads((tmp_path / "records" / "toy" / "a-grpo-s1.json").read_text())["provenance"]["attempts"] == 2
    assert (tmp_path / "logs" / "toy" / "b-ppo-s0.log").read_text().strip() == "trace"

    def healthy(spec: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "record": fake_record(RunSpec(**spec)), "error": None, "log": "", "host": "h", "seconds": 0.0}

    monkeypatch.setattr(executors, "run_spec_dict", healthy)
    [outcome] = run_studies([(TOY, toy_config(tmp_path))], Execution())
    assert outcome.ok and outcome.executed == 1  # a reported failure is run again by the next invocation


def test_a_real_failing_run_reports_its_error():
    outcome = run_subprocess(RunSpec(algo="grpo", seed=0, env_id="EDO-NoSuchEnv-v0", total_timesteps=10))
    assert not outcome["ok"] and outcome["record"] is None
    assert "EDO-NoSuchEnv" in outcome["error"] and outcome["error"].startswith("exit 1")


def test_ray_is_optional_and_its_absence_is_explained(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    args = argparse.Namespace(ray=True, ray_address=None, ray_workers=None, summarise_only=False)
    with pytest.raises(SystemExit, match=r'pip install "edo-gym\[ray\]"'):
        execution_of(args)
    assert not execution_of(argparse.Namespace(ray=False, ray_address=None, ray_workers=None, summarise_only=False)).ray
    code = "import sys, benchmarks.run_suite, benchmarks.study, benchmarks.executors; print('ray' in sys.modules)"
    assert run_script(["-c", code]).stdout.strip() == "False"  # importing the runner does not import Ray


def test_runspec_backwards_compatible_and_json_round_trip():
    old = RunSpec(**{"algo": "grpo", "seed": 0, "env_id": "EDO-v0", "total_timesteps": 10})  # an old-style spec
    assert old.extra_eval == [] and old.save_model_path is None and old.eval_at_start and old.eval_on == "test"
    spec = RunSpec(algo="ppo", seed=1, extra_eval=[("EDO-Support-v0", {})], save_model_path="/tmp/x.zip", eval_at_start=False,
                   eval_on="validation")  # fmt: skip
    again = RunSpec(**json.loads(json.dumps(asdict(spec))))
    assert again.extra_eval[0][0] == "EDO-Support-v0" and again.save_model_path == "/tmp/x.zip" and not again.eval_at_start
    assert again.eval_on == "validation"
    with pytest.raises(ValueError, match="eval_on"):
        RunSpec(algo="ppo", seed=0, eval_on="train")


def test_validation_tasks_are_the_last_heldout_tasks_disjoint_from_the_test_ones():
    from baselines.evaluation import heldout_task_ids, make_eval_env
    from benchmarks.bench_lib import eval_task_ids

    env = make_eval_env("EDO-v0")
    try:
        test, validation = eval_task_ids(env, 100), eval_task_ids(env, 100, "validation")
        assert test == heldout_task_ids(env, 100) and len(validation) == 100
        assert validation[-1] == heldout_task_ids(env)[-1] and not set(test) & set(validation)
    finally:
        env.close()


def test_every_suite_study_is_declared_with_three_tiers():
    for name in SCRIPTS:
        study = load_study(name)
        assert study.name == name and (REPO / "benchmarks" / f"{name}.py").is_file()
        budgets = [study.budgets[t] for t in ("smoke", "quick", "full")]
        assert [b.timesteps for b in budgets] == sorted(b.timesteps for b in budgets), f"{name}: tiers not increasing"


def test_suite_dry_run_lists_every_script(tmp_path):
    proc = run_script(["-m", "benchmarks.run_suite", "--tiny", "--dry-run", "--out-dir", str(tmp_path)])
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == len(SCRIPTS)
    for name, line in zip(SCRIPTS, lines, strict=True):
        assert line.split()[:3] == ["python", "-m", f"benchmarks.{name}"] and str(tmp_path) in line and "--smoke" in line
    assert lines[-1].split()[2] == "benchmarks.study_schools"  # last: it reads grpo_vs_ppo.json
    assert "grpo_vs_ppo: 2 runs, 0 finished" in proc.stderr
    assert "--quick" in script_command("study_horizon", "quick", tmp_path)
    assert "--quick" not in script_command("grpo_vs_ppo", "full", tmp_path)


def test_study_schools_smoke_reads_grpo_vs_ppo_results(tmp_path):
    fake = {
        "settings": {"env": "EDO-v0", "eval_episodes": 3},
        "runs": {"grpo": [{"spec": {"seed": s}, "num_timesteps": 1000,
                           "curve": [{"success": 0.5, "return": 0.3, "tokens": 100.0, "calls": 2.0, "latency_s": 1.0}]}
                          for s in (0, 1)]},
    }  # fmt: skip
    (tmp_path / "grpo_vs_ppo.json").write_text(json.dumps(fake))
    router = {"episodes": 4, "success_rate": 0.25, "mean_return": -0.5, "tokens": 900.0, "calls": 9.0, "latency_s": 20.0,
              "success_ci95": [0.05, 0.7]}  # fmt: skip
    s2r = {"settings": {"real": {"model": "SmolLM2-135M-Instruct-Q4_1"}}, "results": {"real": {"llm_router": router}}}
    (tmp_path / "sim_to_real.json").write_text(json.dumps(s2r))
    run_script(["-m", "benchmarks.study_schools", "--tiny", "--out-dir", str(tmp_path)])
    data = check_result(tmp_path, "study_schools")
    assert set(data["policies"]) == {
        "random",
        "static_pipeline",
        "rule_based",
        "greedy_router",
        "oracle",
        "grpo",
        "llm_router",
    }
    assert data["policies"]["grpo"]["learned"] and data["policies"]["grpo"]["success"] == 0.5
    llm = data["policies"]["llm_router"]
    assert llm["separate"] and llm["success"] == 0.25 and llm["episodes"] == 4 and llm["cost_reward_units"] == 0.75
    assert "llm_router" not in data["pareto_tokens"] + data["pareto_cost"]  # other tasks, other backend
    assert "SmolLM2-135M-Instruct-Q4_1" in (tmp_path / "study_schools.md").read_text()
    assert data["settings"]["eval_episodes"] == 3 and data["settings"]["source_path"] is not None
    assert data["completeness"]["planned"] == 0
    assert (tmp_path / "study_schools.png").is_file()


@pytest.mark.slow
def test_study_horizon_smoke_one_run_and_its_record(tmp_path):
    """~60 s: one smoke run of each protocol, its record, its fixed-schema file, and a resumed second run."""
    run_script(["-m", "benchmarks.study_horizon", "--smoke", "--hops", "4", "--algos", "grpo", "--out-dir", str(tmp_path)])
    data = check_result(tmp_path, "study_horizon")
    cell = data["results"]["4"]
    assert set(cell["heuristics"]) == {"oracle", "rule_based", "greedy_router", "static_pipeline", "random", "plan_check_text"}
    assert 0.0 <= cell["algos"]["grpo"]["success"]["mean"] <= 1.0
    # the fixed-schema file: one value per h for every algorithm and heuristic
    long = json.loads((tmp_path / "long_horizon.json").read_text())
    assert long["hops"] == [4]
    assert set(long["algos"]) == {"grpo", "grpo_success_filter", "grpo_curriculum"}  # the smoke tier runs every protocol
    assert set(long["algos"]["grpo"]) == set(long["algos"]["grpo_success_filter"]) == {"success", "success_ci95", "return"}
    assert long["targets"] == {"default": None, "success_filter": None, "curriculum": None}  # no 8-hop cell in this run
    assert long["algos"]["grpo"]["success"] == [cell["algos"]["grpo"]["success"]["mean"]]
    assert len(long["algos"]["grpo"]["success_ci95"][0]) == 2
    assert long["heuristics"]["rule_based"]["success"] == [cell["heuristics"]["rule_based"]["success_rate"]]
    run = data["runs"]["h4-grpo-s0"]
    assert run["grpo_stats"], "GRPO group statistics were not recorded"
    assert {"dropped_group_fraction", "all_fail_fraction"} <= set(run["grpo_stats"][0])
    stored = json.loads((tmp_path / "records" / "study_horizon" / "h4-grpo-s0.json").read_text())
    assert stored["record"] == run and stored["spec"]["env_kwargs"]["tasks"]["min_hops"] == 4
    variant = json.loads((tmp_path / "records" / "study_horizon" / "h4sf-grpo-s0.json").read_text())
    assert variant["spec"]["train_overrides"] == {
        "net_arch": [128, 128], "warm_start": "plan_check_text", "filter_on": "success", "dynamic_sampling": True
    }  # fmt: skip
    assert long["algos"]["grpo_success_filter"]["success"] == [
        data["results"]["4"]["algos_success_filter"]["grpo"]["success"]["mean"]
    ]
    # the curriculum protocol: trained on 2-4 hops with the curriculum, reported on the exactly-4-hop tasks
    cur = json.loads((tmp_path / "records" / "study_horizon" / "h4cur-grpo-s0.json").read_text())
    assert cur["spec"]["env_kwargs"]["tasks"] == {"families": ["multihop"], "min_hops": 2, "max_hops": 4}
    assert cur["spec"]["train_overrides"]["hop_curriculum"] == [[0.2, 2], [0.4, 3]]
    (extra,) = cur["record"]["extra_eval"]
    assert extra["env_kwargs"] == stored["spec"]["env_kwargs"]
    assert long["algos"]["grpo_curriculum"]["success"] == [extra["result"]["success_rate"]]
    assert (tmp_path / "study_horizon.png").is_file()
    proc = run_script(
        ["-m", "benchmarks.study_horizon", "--smoke", "--hops", "4", "--algos", "grpo", "--out-dir", str(tmp_path)]
    )
    assert "3 finished before, 0 to run" in proc.stdout


def test_study_levers_smoke_warm_started_run(tmp_path):
    """~30 s: one warm-started run, its record (with the warm start and the policy it made) and the summary."""
    run_script(["-m", "benchmarks.study_levers", "--smoke", "--levers", "view+bc_rule_based", "--out-dir", str(tmp_path)])
    data = check_result(tmp_path, "study_levers")
    lever = data["levers"]["view+bc_rule_based"]
    assert lever["overrides"] == {"warm_start": "rule_based", "learning_rate": 1e-4}
    assert 0.0 <= lever["grpo"]["success"]["mean"] <= 1.0 and lever["grpo"]["after_warm_start"] is not None
    assert {"static_pipeline", "rule_based", "oracle", "verify_and_retry", "plan_check_text"} <= set(data["heuristics"])
    assert data["heuristics"]["plan_check_text"]["reads_text"] and not data["heuristics"]["rule_based"]["reads_text"]
    assert data["best"]["lever"] == "view+bc_rule_based"
    numeric, text = data["best"]["vs_best_numeric"], data["best"]["vs_best_text_reading"]
    assert not data["heuristics"][numeric["hand_written"]]["reads_text"] and text["hand_written"] == "plan_check_text"
    assert numeric["success_gap"] == pytest.approx(data["best"]["success"] - numeric["hand_written_success"])
    (run,) = data["runs"].values()
    assert run["warm_start"]["steps"] > 0 and run["warm_start"]["source"] == "rule_based"
    assert 0.0 <= run["warm_start"]["eval"]["success"] <= 1.0


@pytest.mark.slow  # ~2 min on 2 cores (5 runs): kept out of the fast suite (`make test-all` runs it)
def test_study_transfer_deviations_part_trains_without_each_kind_and_tests_with_it(tmp_path):
    """``--parts deviations``: one run on EDO-v0 and one per kind with its rate at 0, evaluated with and without the
    kind; the transfer loss and the kind's cost are the differences they say; hand-written policies on both envs."""
    from benchmarks.study_transfer import DEVIATION_REFERENCES, WITHOUT_KIND

    run_script(["-m", "benchmarks.study_transfer", "--smoke", "--parts", "deviations", "--out-dir", str(tmp_path)])
    data = json.loads((tmp_path / "study_transfer.json").read_text())
    assert set(data["deviations"]) == set(WITHOUT_KIND) and "matrix" not in data
    specs = {key: run["spec"] for key, run in data["runs"].items()}
    for kind, off in WITHOUT_KIND.items():
        spec = specs[f"no_{kind}-grpo-s0"]
        assert all(spec["env_kwargs"][k] == v for k, v in off.items()) and spec["env_kwargs"]["text_features"]
        row = data["deviations"][kind]
        learned = row["learned"]["grpo"]
        with_, without = learned["trained_without_tested_with"]["mean"], learned["trained_without_tested_without"]["mean"]
        assert learned["kind_cost"] == pytest.approx(with_ - without)
        assert learned["transfer_loss"] == pytest.approx(with_ - learned["trained_with_tested_with"])
        assert set(row["hand_written"]) == set(DEVIATION_REFERENCES)
        for x in row["hand_written"].values():
            assert x["kind_cost"] == pytest.approx(x["tested_with"] - x["tested_without"])
    assert not any(k in specs["EDO-v0-grpo-s0"]["env_kwargs"] for off in WITHOUT_KIND.values() for k in off)
    assert "## Across deviations" in (tmp_path / "study_transfer.md").read_text()


@pytest.mark.slow  # ~20-60 s on 2 cores: kept out of the fast suite (`make test-all` runs it)
def test_study_ppo_tuning_smoke_one_setting(tmp_path):
    run_script(["-m", "benchmarks.study_ppo_tuning", "--smoke", "--algos", "maskable_ppo", "--settings", "sb3 defaults",
                "--out-dir", str(tmp_path)])  # fmt: skip
    data = check_result(tmp_path, "study_ppo_tuning")
    (row,) = data["rows"].values()
    assert row["algo"] == "maskable_ppo" and row["overrides"]["n_epochs"] == 10
    assert 0.0 <= row["success"]["mean"] <= 1.0


@pytest.mark.slow
def test_smoke_suite_end_to_end(tmp_path):
    run_script(["-m", "benchmarks.run_suite", "--smoke", "--out-dir", str(tmp_path)], timeout=1800)
    for name in (*SCRIPTS, "suite"):
        check_result(tmp_path, name)
    suite = json.loads((tmp_path / "suite.json").read_text())
    assert suite["failed"] == [] and [r["script"] for r in suite["scripts"]] == list(SCRIPTS)
    assert suite["runs"]["missing"] == 0 and suite["runs"]["executed"] == suite["runs"]["planned"] > 0
    schools = json.loads((tmp_path / "study_schools.json").read_text())
    assert schools["settings"]["source_path"] == str(tmp_path / "grpo_vs_ppo.json")  # read the suite's own results


def assert_same_results(a: Any, b: Any, path: str = "") -> None:
    """``a == b`` over nested JSON, floats to 1e-5 relative (GRPO's float32 group statistics differ in the last bits
    between processes), skipping measurements of the machine (``VOLATILE``) and the heuristic references."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert set(a) == set(b), f"{path}: keys differ: {sorted(set(a) ^ set(b))}"
        for key in a:
            if key not in VOLATILE and key != "heuristics":
                assert_same_results(a[key], b[key], f"{path}/{key}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{path}: lengths differ"
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_results(x, y, f"{path}[{k}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-7), f"{path}: {a} != {b}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def table_shape(markdown: str) -> list[str]:
    """The Markdown without its numbers: rows, columns and labels."""
    return [re.sub(r"[-+]?\d[\d,.]*", "#", line) for line in markdown.splitlines() if not line.startswith("Machine:")]


@pytest.mark.slow
def test_serial_and_ray_runs_give_identical_results(tmp_path):
    """The same runs, records and summaries from the serial runner and from Ray tasks.

    Heuristic references are left out of the value comparison: the driver computes them, not the executor, so they
    are the same code in the same process either way and say nothing about how the runs were executed.
    """
    pytest.importorskip("ray")
    names = ["grpo_vs_ppo", "study_horizon"]
    serial, ray = tmp_path / "serial", tmp_path / "ray"
    run_script(["-m", "benchmarks.run_suite", "--smoke", "--only", *names, "--out-dir", str(serial)], timeout=900)
    run_script(["-m", "benchmarks.run_suite", "--smoke", "--only", *names, "--out-dir", str(ray), "--ray", "--ray-workers", "2"],
               timeout=900)  # fmt: skip
    for name in names:
        assert_same_results(check_result(serial, name), check_result(ray, name), name)
        files = [sorted(p.name for p in (d / "records" / name).iterdir()) for d in (serial, ray)]
        assert files[0] == files[1] and files[0]
        assert table_shape((serial / f"{name}.md").read_text()) == table_shape((ray / f"{name}.md").read_text())
    suite = json.loads((ray / "suite.json").read_text())
    assert suite["executor"] == {"kind": "ray", "ray_address": None, "ray_workers": 2, "summarise_only": False}


def test_ray_retries_a_failed_run_once_then_reports_it(tmp_path):
    pytest.importorskip("ray")
    bad = Study(
        name="bad",
        doc=None,
        budgets=Tiered(*(Budget(10, (0,), 1),) * 3),
        algos=Tiered(*(("grpo",),) * 3),
        points=lambda cfg: {"broken": Point(env_id="EDO-NoSuchEnv-v0")},
        summarise=toy_summarise,
    )
    argv = ["--smoke", "--out-dir", str(tmp_path), "--ray", "--ray-workers", "1"]
    args = bad.parser().parse_args(argv)
    attempts: list[tuple[str, int, bool]] = []
    real_execute = executors.execute

    def spy(runs: list[PlannedRun], execution: Execution, on_success: Any, on_failure: Any) -> None:
        def failure(run: PlannedRun, outcome: dict, attempt: int, final: bool) -> None:
            attempts.append((run.key, attempt, final))
            on_failure(run, outcome, attempt, final)

        real_execute(runs, execution, on_success, failure)

    [outcome] = run_studies([(bad, bad.configure(args, argv))], execution_of(args), executor=spy)
    assert attempts == [("broken-grpo-s0", 1, False), ("broken-grpo-s0", 2, True)]
    assert not outcome.ok and "EDO-NoSuchEnv" in outcome.runs.failed["broken-grpo-s0"]
    assert json.loads((tmp_path / "bad.json").read_text())["completeness"]["missing"] == ["broken-grpo-s0"]


@pytest.mark.slow
def test_tune_ent_coef_smoke_same_budget_for_every_trial(tmp_path):
    pytest.importorskip("ray.tune")
    run_script(["-m", "benchmarks.tune_ent_coef", "--smoke", "--algos", "grpo", "ppo", "--ent-coefs", "0", "0.01",
                "--ray-workers", "2", "--out-dir", str(tmp_path)], timeout=900)  # fmt: skip
    data = json.loads((tmp_path / "tune_ent_coef.json").read_text())
    assert data["completeness"]["finished"] == 4 and not data["completeness"]["missing"]
    assert set(data["grid"]) == {"grpo", "ppo"} and set(data["grid"]["grpo"]) == {"0", "0.01"}
    assert {a: b["ent_coef"] in (0.0, 0.01) for a, b in data["best"].items()} == {"grpo": True, "ppo": True}
    specs = [r["spec"] for r in data["runs"].values()]
    assert {(s["total_timesteps"], s["eval_episodes"], s["eval_on"]) for s in specs} == {(300, 3, "validation")}
    assert sorted(s["train_overrides"]["ent_coef"] for s in specs) == [0.0, 0.0, 0.01, 0.01]
    # the comparison's default setup, make train's, in every trial
    assert data["settings"]["setup"] == "make-train"
    assert {(tuple(sorted(s["env_kwargs"].items())), s["train_overrides"]["warm_start"]) for s in specs} == {
        ((("text_features", True),), "static_pipeline")
    }
    proc = run_script(["-m", "benchmarks.tune_ent_coef", "--smoke", "--algos", "grpo", "ppo", "--ent-coefs", "0", "0.01",
                       "--ray-workers", "2", "--out-dir", str(tmp_path)], timeout=300)  # fmt: skip
    assert "4 finished before, 0 to run" in proc.stdout  # a rerun skips finished trials and starts no Tuner


def test_sim_to_real_simulated_column_is_resumable_and_compares_backends(tmp_path):
    """The simulated half of benchmarks/sim_to_real.py end to end (the real half needs the model server: it is
    exercised by the command in docs/benchmarks.md), then the summary with a real column written as the records would be."""
    import gymnasium as gym

    import edo_gym  # noqa: F401
    from baselines.grpo import GRPO
    from benchmarks import sim_to_real

    model = tmp_path / "grpo_tiny.zip"
    GRPO("MultiInputPolicy", gym.make("EDO-v0"), seed=0, policy_kwargs={"net_arch": [8]}).save(model)
    argv = [
        "--backends",
        "simulated",
        "--episodes",
        "2",
        "--policies",
        "static_pipeline",
        "grpo",
        "--policy-model",
        str(model),
    ]
    assert sim_to_real.main([*argv, "--out-dir", str(tmp_path)]) == 0
    payload = json.loads((tmp_path / "sim_to_real.json").read_text())
    rows = payload["results"]["simulated"]
    assert set(rows) == {"static_pipeline", "grpo"} and rows["static_pipeline"]["episodes"] == 2
    assert rows["static_pipeline"]["planner_fallback_rate"] == 0.0  # the simulator writes valid JSON plans
    records = sorted(p.name for p in (tmp_path / "records" / "sim_to_real").iterdir())
    assert records == ["run.json", "simulated-grpo-n2-s0.json", "simulated-static_pipeline-n2-s0.json"]
    records = records[1:]
    # a rerun reuses the records (a changed record shows that it was read, not recomputed)
    path = tmp_path / "records" / "sim_to_real" / records[1]
    saved = json.loads(path.read_text())
    saved["row"]["success_rate"] = 0.123
    path.write_text(json.dumps(saved))
    real = dict(
        saved["row"],
        success_rate=0.0,
        tokens=saved["row"]["tokens"] + 100,
        backend_calls={"real": 3, "cached": 1, "failed": 0},
    )
    (tmp_path / "records" / "sim_to_real" / "real-static_pipeline-n2-s0.json").write_text(json.dumps({"row": real}))
    assert (
        sim_to_real.main(
            [*argv, "--backends", "simulated", "real", "--policies", "static_pipeline", "--out-dir", str(tmp_path)]
        )
        == 0
    )
    payload = json.loads((tmp_path / "sim_to_real.json").read_text())
    assert payload["results"]["simulated"]["static_pipeline"]["success_rate"] == 0.123
    assert payload["deltas"]["static_pipeline"]["success"] == pytest.approx(-0.123)
    assert payload["deltas"]["static_pipeline"]["tokens"] == pytest.approx(100)
    assert "3 real, 1 from cache, 0 failed" in (tmp_path / "sim_to_real.md").read_text()

    # another tier, with a calibrated team: EDO-v0 stays at the top, both tiers are under "tiers"
    from edo_gym.config import small_workers

    team = [dict(dataclasses.asdict(w), shard=list(w.shard), verdict_rate=0.0) for w in small_workers()]
    (tmp_path / "calibration").mkdir()
    (tmp_path / "calibration" / "EDO-Small-v0.json").write_text(json.dumps({"workers": team}))
    small = ["--env", "EDO-Small-v0", "--episodes", "2", "--policies", "static_pipeline", "random", "--out-dir", str(tmp_path)]
    assert sim_to_real.main([*small, "--backends", "simulated", "calibrated"]) == 0
    payload = json.loads((tmp_path / "sim_to_real.json").read_text())
    assert payload["settings"]["env"] == "EDO-v0" and set(payload["results"]["simulated"]) == {
        "static_pipeline"
    }  # its last run
    tier = payload["tiers"]["EDO-Small-v0"]
    assert set(tier["policies"]["random"]) == {"simulated", "calibrated"} and set(payload["tiers"]) == {
        "EDO-v0",
        "EDO-Small-v0",
    }
    assert (tmp_path / "records" / "sim_to_real" / "EDO-Small-v0" / "calibrated-random-n2-s0.json").is_file()
    assert "## Tier EDO-Small-v0" in (tmp_path / "sim_to_real.md").read_text()


def test_sim_to_real_trains_again_when_the_tier_it_trained_on_has_changed(tmp_path, monkeypatch):
    """A saved simulation policy is reused only for the same env, team and registered settings of the id (a tier whose
    registration changed is another env, though its id and ``env_kwargs`` are the same)."""
    import copy

    import gymnasium as gym

    from baselines.experience import warm_start_dataset_id
    from baselines.training import TrainConfig
    from benchmarks.sim_to_real import trained_for

    cfg = TrainConfig(env_id="EDO-Small-v0", output_dir=str(tmp_path), eval_episodes=0)
    cfg.model_path.write_bytes(b"a model")
    dataset = warm_start_dataset_id(cfg.warm_start, cfg.warm_start_episodes, cfg.env_id, cfg.env_kwargs)
    summary = {"config": {"env_id": "EDO-Small-v0", "env_kwargs": {}}, "warm_start": {"dataset": dataset}}
    cfg.model_path.with_suffix(".json").write_text(json.dumps(summary))
    assert trained_for(cfg)
    assert not trained_for(dataclasses.replace(cfg, env_kwargs={"workers": []}))
    spec = copy.deepcopy(gym.spec("EDO-Small-v0"))
    spec.kwargs = {**spec.kwargs, "retrieval_identifier_match": False}
    monkeypatch.setitem(gym.registry, "EDO-Small-v0", spec)
    assert not trained_for(cfg)


def test_sim_to_real_rejects_unknown_policies(capsys):
    from benchmarks import sim_to_real

    with pytest.raises(SystemExit):
        sim_to_real.main(["--policies", "nobody"])
    assert "unknown policies ['nobody']" in capsys.readouterr().err


def bench_record(algo: str, seed: int, update_s: float, steps: int, **overrides: Any) -> dict[str, Any]:
    """A ``run_in_process`` record with what ``grpo_vs_ppo.summarise`` reads."""
    point = {"env_steps": steps, "train_time_s": 10.0, "success": 0.5, "return": 0.1}
    spec = asdict(RunSpec(algo=algo, seed=seed, total_timesteps=steps, train_overrides=overrides))
    return {"spec": spec, "num_timesteps": steps, "wall_time_s": 20.0, "rollout_s": 20.0 - update_s, "update_s": update_s,
            "trainable_params": 100, "optimizer_state_bytes": 800, "peak_rss_bytes": 2**20, "cuda_peak_bytes": None,
            "curve": [point], "final": point}  # fmt: skip


def test_grpo_vs_ppo_summary_update_time_per_sample_epoch():
    from benchmarks.grpo_vs_ppo import markdown, summarise, update_time_per_sample_epoch

    runs = {
        # TrainConfig's default of 4 epochs; medians over seeds: 4.0 s over 1000 steps
        "grpo": [bench_record("grpo", 0, 4.0, 1000), bench_record("grpo", 1, 6.0, 1000), bench_record("grpo", 2, 3.0, 1000)],
        # 10 epochs (as in SB3), 2000 steps: 20 s
        "ppo": [bench_record("ppo", s, 20.0, 2000, n_epochs=10) for s in (0, 1)],
    }
    assert update_time_per_sample_epoch(runs["ppo"][0]) == pytest.approx(20.0 / (2000 * 10))
    summary = summarise(runs)
    assert summary["grpo"]["update_time_per_sample_epoch_s"] == pytest.approx(4.0 / (1000 * 4))
    assert summary["ppo"]["update_time_per_sample_epoch_s"] == pytest.approx(1e-3)
    ratios = summary["grpo_over_ppo"]
    assert ratios["update_time_s"] == pytest.approx(4.0 / 20.0)  # the ratio of total update times is kept
    assert ratios["update_time_per_sample_epoch_s"] == pytest.approx(1.0)
    settings = {"command": "x", "timesteps": 1000, "seeds": [0, 1], "net_arch": [8], "eval_every": 500, "eval_episodes": 3}
    assert "| update_time_per_sample_epoch_s | 1.00 |" in markdown(summary, [], settings, "test machine")
    # a record without the update time or the step count has no per-sample figure
    assert update_time_per_sample_epoch({k: v for k, v in runs["grpo"][0].items() if k != "update_s"}) is None
    assert update_time_per_sample_epoch(runs["grpo"][0] | {"num_timesteps": 0}) is None


def test_grpo_vs_ppo_gives_every_algorithm_the_setups_ent_coef_unless_a_sweep_is_named(tmp_path, monkeypatch):
    """By default every algorithm trains with the setup's ent_coef (make train's 0.02); ``--ent-coef-from`` a
    tune_ent_coef.json gives each its tuned value; ``none`` is the default; a missing file is an error that says what
    to do."""
    from benchmarks.grpo_vs_ppo import SETUPS, STUDY, TUNED_ENT_COEFS, tuned_ent_coefs

    def configure(*argv: str):
        return STUDY.configure(STUDY.parser().parse_args(list(argv)), list(argv))

    monkeypatch.chdir(tmp_path)  # a relative path is resolved against the repository, not the working directory
    full = configure()
    assert tuned_ent_coefs(full) == {}
    planned = {r.algo: r.spec.train_overrides.get("ent_coef") for r in STUDY.plan(full)}
    assert planned == dict.fromkeys(("grpo", "gigpo", "ppo", "maskable_ppo"), SETUPS["make-train"][2]["ent_coef"])
    tuned = configure("--ent-coef-from", TUNED_ENT_COEFS)
    best = json.loads((REPO / TUNED_ENT_COEFS).read_text())["best"]
    assert tuned_ent_coefs(tuned) == {a: float(b["ent_coef"]) for a, b in best.items() if b is not None}
    planned = {r.algo: r.spec.train_overrides.get("ent_coef") for r in STUDY.plan(tuned)}
    assert planned == tuned_ent_coefs(tuned)
    assert tuned_ent_coefs(configure("--ent-coef-from", "none")) == {}
    with pytest.raises(SystemExit, match="no file .*missing.json.*make bench-tune"):
        tuned_ent_coefs(configure("--ent-coef-from", str(tmp_path / "missing.json")))


@pytest.mark.parametrize("name", ["study_horizon", "study_transfer", "study_retriever", "study_planner"])
def test_studies_train_every_run_with_the_chosen_setup(name):
    """``--setup`` (default ``make-train``) reaches every planned run of the study, and every evaluation env of a run gets
    the same observation options as its training env (a model cannot be evaluated on another observation space)."""
    import importlib

    from benchmarks.grpo_vs_ppo import SETUPS

    def observation_options(kwargs: dict[str, Any]) -> dict[str, Any]:
        return {k: kwargs.get(k) for k in ("text_features", "plan_check")}

    study = importlib.import_module(f"benchmarks.{name}").STUDY
    for setup, (_, env_kwargs, overrides) in SETUPS.items():
        argv = [] if setup == "make-train" else ["--setup", setup]
        cfg = study.configure(study.parser().parse_args(argv), argv)
        planned = study.plan(cfg)
        assert planned, f"{name} plans no run at its full tier"
        for run in planned:
            spec = run.spec
            assert observation_options(spec.env_kwargs) == observation_options(env_kwargs), (name, setup, run.key)
            assert spec.train_overrides.get("warm_start") == overrides.get("warm_start"), (name, setup, run.key)
            for _, extra_kwargs in spec.extra_eval:
                assert observation_options(extra_kwargs) == observation_options(env_kwargs), (name, setup, run.key)
    with pytest.raises(SystemExit):
        study.parser().parse_args(["--setup", "no-such-setup"])


def test_a_run_that_submits_at_once_counts_as_collapsed():
    """Submitting at once costs the planner's call at reset (1 call per episode): that is a collapse; a run that
    dispatches at least once on most episodes is not."""
    from benchmarks.summary import summarise_runs

    def record(calls: float) -> dict[str, Any]:
        final = {"success": 0.0, "return": -0.07, "tokens": 300.0, "calls": calls, "latency_s": 1.0}
        return {"spec": {"seed": 0}, "final": final, "wall_time_s": 1.0, "num_timesteps": 10, "grpo_stats": None}

    assert summarise_runs([record(1.0), record(1.02), record(4.5)])["collapsed_runs"] == 2


def test_train_throughput_knows_which_settings_have_worker_processes():
    from benchmarks.train_throughput import has_workers

    assert has_workers(["--vec-env=subproc"]) and has_workers(["--vec-env", "subproc"])
    assert not has_workers([]) and not has_workers(["--vec-env=dummy", "--torch-threads=2"])


def test_train_throughput_per_step_breakdown():
    """Microseconds per recorded step from a repeat's time breakdown, scaled to the training wall time; the step the
    target would need; the in-run ratio as `edo train` prints it."""
    from benchmarks.train_throughput import PARTS, per_step_breakdown

    times = {"total_s": 5.0, "env_s": 2.0, "policy_inference_s": 1.0, "update_s": 1.5, "rollout_other_s": 0.25,
             "other_s": 0.25, "env_steps": 12_000}  # fmt: skip
    run = {"steps": 10_000, "train_wall_s": 10.0, "warm_median": 25_000.0, "time_breakdown": times}
    b = per_step_breakdown(run, target=0.4)
    assert b["train_step"] == pytest.approx(1000.0)
    # each part over the breakdown's own total (5 s) times the wall time (10 s), per recorded step
    assert [b[key] for key in PARTS] == pytest.approx([400.0, 200.0, 300.0, 50.0, 50.0])
    assert sum(b[key] for key in PARTS) == pytest.approx(b["train_step"])
    assert b["env_alone"] == pytest.approx(40.0) and b["needed_for_target"] == pytest.approx(100.0)
    # 1,000 training steps/s over 12,000 env steps in 2 s of env stepping (6,000 steps/s)
    assert b["in_run_ratio"] == pytest.approx(1000.0 / 6000.0)
    assert per_step_breakdown({**run, "time_breakdown": None}) is None
    assert per_step_breakdown({**run, "time_breakdown": {}}) is None


@pytest.mark.slow
def test_train_throughput_tiny_run(tmp_path):
    """One tiny (training, env alone) pair: the ratio is training steps/s over the env's median steps/s (~40 s)."""
    # --no-reachable: the runner's machinery, without embedding the reachable queries into its fresh cache (~15 s)
    run_script(["-m", "benchmarks.train_throughput", "--repeats", "1", "--timesteps", "600", "--warmup", "200", "--steps", "200",
                "--repeats-warm", "2", "--no-reachable", "--out-dir", str(tmp_path)], timeout=900)  # fmt: skip
    data = json.loads((tmp_path / "train_throughput.json").read_text())
    (run,) = data["runs"]
    assert run["steps"] >= 600 and len(run["warm_steps_per_s"]) == 2
    assert run["ratio"] == pytest.approx(run["steps_per_s"] / run["warm_median"])
    assert data["train_over_env"]["median"] == pytest.approx(run["ratio"]) and data["target"] == 0.35
    # the same per CPU second of each process, and the ratio of the medians (one repeat: the repeat's ratio)
    assert len(run["warm_steps_per_cpu_s"]) == 2 and run["steps_per_cpu_s"] > 0
    assert run["cpu_ratio"] == pytest.approx(run["steps_per_cpu_s"] / run["warm_cpu_median"])
    assert data["train_over_env_cpu"]["median"] == pytest.approx(run["cpu_ratio"])
    assert data["median_train_over_median_env"] == pytest.approx(run["ratio"])
    # the per-step breakdown of the repeat, and its medians (one repeat: the repeat's own)
    assert run["per_step_us"]["train_step"] == pytest.approx(1e6 / run["steps_per_s"])
    assert data["per_step_us_median"] == pytest.approx(run["per_step_us"], nan_ok=True)
    md = (tmp_path / "train_throughput.md").read_text()
    assert "Command: `python -m benchmarks.train_throughput --repeats 1" in md and "| in-run ratio |" in md
    assert data["settings"]["no_reachable"] is True


def test_make_train_seeds_tabulates_every_run_and_skips_finished_ones(tmp_path, monkeypatch):
    """The table reads every run summary in the directory (seed, GRPO's row, the clone before RL, the best hand-written
    policy, the oracle left out); a run whose summary is there is not trained again, the others are, each once;
    ``--summarise-only`` trains none and writes the same table."""
    import benchmarks.make_train_seeds as mts

    def summary(seed: int, success: float) -> dict:
        grpo = {"policy": "grpo", "episodes": 300, "success_rate": success, "success_ci95": [success - 0.05, success + 0.05],
                "mean_return": 0.5, "tokens": 700.0}  # fmt: skip
        static = {"policy": "static_pipeline", "success_rate": 0.27, "mean_return": 0.4}
        text = {"policy": "plan_check_text", "success_rate": 0.45, "mean_return": 0.3}
        oracle = {"policy": "oracle", "success_rate": 0.8, "mean_return": 1.2, "uses_hidden_state": True}
        clone = {"policy": "clone of static_pipeline", "success_rate": 0.26, "mean_return": 0.39}
        return {"config": {"seed": seed, "warm_start": "static_pipeline"}, "results": [static, oracle, text, clone, grpo],
                "num_timesteps": 1_000_123, "train_wall_s": 31.0, "machine": "a 2-core test machine"}  # fmt: skip

    (tmp_path / "seed0.json").write_text(json.dumps(summary(0, 0.6)))
    trained = []

    def fake_train_run(seed, timesteps, out_dir, eval_episodes=200, keep_models=None):
        trained.append((seed, timesteps, eval_episodes))
        path = out_dir / f"{mts.run_name(seed)}.json"
        path.write_text(json.dumps(summary(seed, 0.4 + 0.1 * seed)))
        return path

    monkeypatch.setattr(mts, "train_run", fake_train_run)
    assert mts.main(["--seeds", "0", "1", "--timesteps", "500", "--eval-episodes", "300", "--out-dir", str(tmp_path)]) == 0
    assert trained == [(1, 500, 300)]
    md = (tmp_path / "make_train_seeds.md").read_text()
    assert md.startswith(
        "# `make train` across seeds\n\na 2-core test machine. Command: `python -m benchmarks.make_train_seeds"
    )
    assert "evaluated on the same 300 held-out tasks" in md
    assert "| 0 | 0.600 (0.55-0.65) | +0.500 | 700 | 0.260 | plan_check_text 0.450 / +0.300 | +0.150 / +0.200 |" in md
    assert "| 1 | 0.500 (0.45-0.55) |" in md
    assert (
        "| 2 | 0.550 | 0.550 | 0.500-0.600 | +0.500 | +0.100 |" in md
        and "The static pipeline (the warm start's teacher) on the same tasks: 0.270 success and +0.400 return." in md
    )
    (tmp_path / "make_train_seeds.md").unlink()
    assert mts.main(["--seeds", "0", "1", "2", "--summarise-only", "--out-dir", str(tmp_path)]) == 0
    assert trained == [(1, 500, 300)] and (tmp_path / "make_train_seeds.md").read_text() == md.replace(
        "make_train_seeds --seeds 0 1 --timesteps 500 --eval-episodes 300", "make_train_seeds --seeds 0 1 2"
    )
    (tmp_path / "seed5.json").write_text(json.dumps({**summary(5, 0.5), "results": []}))
    with pytest.raises(SystemExit, match="has no grpo row"):
        mts.load_runs(tmp_path)


@pytest.mark.slow
def test_env_throughput_tiny_run(tmp_path):
    """A tiny run of every stage: two cold starts (median kept under the documented key), a warm start, one fresh
    process's first steps, warm windows; the keys scripts read are there."""
    run_script(["-m", "benchmarks.env_throughput", "--steps", "300", "--repeats", "1", "--warmup", "300", "--first-steps",
                "300", "--first-repeats", "1", "--cold-repeats", "2", "--no-reachable", "--out-dir", str(tmp_path)],
               timeout=900)  # fmt: skip
    data = json.loads((tmp_path / "env_throughput.json").read_text())
    cold = data["start"]["cold"]
    runs = sorted(cold["make_reset_runs_s"])
    assert len(runs) == 2 and cold["make_reset_s"] == pytest.approx((runs[0] + runs[1]) / 2)
    assert {"median", "q25", "q75"} <= set(data["edo_over_cartpole"]) and "median" in data["first_50k_over_cartpole"]
    assert "--cold-repeats 2" in (tmp_path / "env_throughput.md").read_text()


@pytest.mark.parametrize(
    "script, args, message",
    [
        ("train_throughput", ["--repeats", "0"], "--repeats must be >= 1"),
        ("train_throughput", ["--train-arg", "subproc"], "the first extra argument must be an option"),
        ("make_train_seeds", ["--seeds", "-1"], "--seeds must be >= 0"),
        ("make_train_seeds", ["--timesteps", "0"], "--timesteps must be >= 1"),
    ],
)
def test_speed_benchmarks_reject_bad_input(script, args, message):
    proc = subprocess.run([sys.executable, "-m", f"benchmarks.{script}", *args], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode != 0 and message in proc.stderr


def test_train_throughput_measures_make_trains_arguments():
    """benchmarks/train_throughput.py (and make_train_seeds through it) runs what `make train` runs: the same options
    and values, less those that only say where output goes, how many tasks are evaluated and the progress bar."""
    from benchmarks.train_throughput import TRAIN_ARGS, option_spans

    recipe = re.search(r"^train:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), flags=re.MULTILINE)
    assert recipe, "Makefile has no train target"
    words = recipe.group(1).replace("\\\n", " ").split()
    words = words[words.index("train") + 1 :]
    ignored = {
        "--timesteps",
        "--output-dir",
        "--tensorboard-dir",
        "--eval-episodes",
        "--no-progress",
        "--overwrite",
        "$(TRAIN_ARGS)",
    }
    make_train = {tuple(span) for span in option_spans(words) if span[0] not in ignored}
    measured = {tuple(span) for span in option_spans(TRAIN_ARGS) if span[0] not in ignored}
    assert make_train == measured and ("--text-features",) in measured


def test_calibration_fits_each_worker_to_its_graded_calls():
    """calibrate_simulator: graded calls -> the worker's hidden profile (rates shrunk towards the defaults)."""
    from benchmarks.calibrate_simulator import Graded, fit_workers, rates
    from edo_gym.config import small_workers

    team = small_workers()
    graded = (
        [Graded("generalist", "lookup", "people", True, k < 9) for k in range(10)]  # 9/10 with the document
        + [Graded("generalist", "lookup", "people", False, False, abstained=k < 5) for k in range(10)]  # none without
        + [Graded("generalist", "verdict", "", False, False) for _ in range(10)]  # never a verdict
        + [Graded("generalist", "write", "policies", False, k < 2) for k in range(10)]
    )
    assert rates(graded)["generalist"]["lookup_with_doc"] == [9, 10]
    assert rates(graded)["generalist"]["abstain_without_doc"] == [5, 10]
    fitted = {w.name: w for w in fit_workers(team, graded, prior_calls=0.0)}
    g = fitted["generalist"]
    assert g.domain_skills["people"] == pytest.approx(0.9) and g.skills["lookup"] == pytest.approx(0.9)
    assert g.memory_coverage == 0.0 and g.abstain_rate == pytest.approx(0.5)
    assert g.verdict_rate == 0.0 and g.skills["write"] == pytest.approx(0.2)
    assert fitted["analyst"] == team[2]  # no calls: unchanged
    # with a prior, few calls move a rate only part of the way
    shrunk = {w.name: w for w in fit_workers(team, graded, prior_calls=10.0)}["generalist"]
    assert 0.0 < shrunk.verdict_rate < 1.0


def test_calibrated_verifier_gives_no_verdict_at_verdict_rate_zero():
    import gymnasium as gym

    import edo_gym  # noqa: F401
    from edo_gym.config import small_workers

    team = [dataclasses.replace(w, verdict_rate=0.0) for w in small_workers()]
    env = gym.make("EDO-Small-v0", workers=team)
    try:
        base = env.unwrapped
        env.reset(seed=0)
        assert base.decode_action(7) == ("dispatch", 3, True)
        env.step(7)  # the generalist, with retrieval
        for w in range(4):  # every worker verifies the result
            env.step(base.A_VERIFY + w)
        assert len(base.episode.plan.verdicts[0]) == 4 and all(v == "unsure" for v in base.episode.plan.verdicts[0])
    finally:
        env.close()


def test_sim_to_real_tiers_rank_the_simulators_against_the_real_model():
    from benchmarks.sim_to_real import kendall_tau, tier_summary

    def row(success):
        return {"success_rate": success, "mean_return": success - 0.1, "tokens": 100.0, "calls": 2.0,
                "success_ci95": [0.0, 1.0]}  # fmt: skip

    records = {
        "simulated": {"a": row(0.9), "b": row(0.8), "c": row(0.1)},
        "calibrated": {"a": row(0.6), "b": row(0.5), "c": row(0.2)},
        "real": {"a": row(0.5), "b": row(0.6), "c": row(0.1)},
    }
    t = tier_summary({"env": "EDO-Small-v0"}, records)
    assert t["policies"]["a"]["real"] == {"success": 0.5, "return": 0.4, "tokens": 100.0, "calls": 2.0,
                                          "success_ci95": [0.0, 1.0]}  # fmt: skip
    assert t["kendall_tau"]["simulated"] == pytest.approx(1 / 3) == t["kendall_tau"]["calibrated"]
    assert t["success_mae"]["simulated"] == pytest.approx((0.4 + 0.2 + 0.0) / 3)
    assert t["success_mae"]["calibrated"] == pytest.approx((0.1 + 0.1 + 0.1) / 3)
    assert kendall_tau([1.0], [2.0]) is None and kendall_tau([1.0, 1.0], [1.0, 2.0]) is None


def test_calibration_fits_token_counts_to_what_the_server_reported():
    """fit_tokens: a server that reports 1.5x the env's prompt estimate and 9 completion tokens more than the
    simulator's reply gives prompt_token_scale 1.5 and that verbosity; the calibrated simulator then counts as it."""
    import gymnasium as gym

    import edo_gym  # noqa: F401
    from benchmarks.calibrate_simulator import fit_tokens
    from edo_gym.agents.protocol import LLMRequest, LLMResponse
    from edo_gym.agents.simulator import SimulatedBackend

    env = gym.make("EDO-Small-v0")
    try:
        base = env.unwrapped
        team = base.config.workers
        sim = SimulatedBackend(base.world, team, base.config.planner, base.pool.tasks)
        calls = []
        for k, person in enumerate(base.world.entities["person"][:12]):
            request = LLMRequest("worker", "wiki_agent", "system", "task", f"Who is the mentor of {person}?", seed=k)
            estimate = base.caller.estimate_prompt_tokens(request)
            reply = sim.complete(request).text
            completion = base.caller.count_tokens(reply) + 9
            calls.append((request, LLMResponse(reply, prompt_tokens=round(1.5 * estimate), completion_tokens=completion)))
        calls.append((calls[0][0], LLMResponse("x")))  # no counts reported: left out
        fitted, table, mae = fit_tokens(env, team, calls)
    finally:
        env.close()
    wiki = {w.name: w for w in fitted}["wiki_agent"]
    assert wiki.prompt_token_scale == pytest.approx(1.5, abs=0.03) and wiki.verbosity == 9  # (the counts are rounded)
    assert {w.name: w for w in fitted}["analyst"] == team[2]  # no calls: unchanged
    assert table["wiki_agent"]["calls"] == 12
    assert table["wiki_agent"]["prompt"]["calibrated"] == pytest.approx(table["wiki_agent"]["prompt"]["real"], rel=0.01)
    assert mae["calibrated"] < 1.0 < mae["default"]


def test_the_deviations_table_reports_each_policys_drop_and_the_oracles_lead(tmp_path):
    """benchmarks/deviations.py: per kind and split a row per policy; the drop is train minus test, the best
    hand-written policy is the best observation-only one on test, and the oracle's lead is measured against it."""
    import json

    from benchmarks.deviations import KINDS, main

    assert set(KINDS) >= {"none", "phrasing", "team", "drift", "extra_step", "all", "default"}
    assert main(["--tasks", "4", "--kinds", "none", "team", "--out-dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "deviations.json").read_text())
    assert set(result["table"]) == {"none", "team"} and (tmp_path / "deviations.md").exists()
    for kind, splits in result["table"].items():
        summary = result["summary"][kind]
        test = splits["test"]
        assert "oracle" in test and "static_pipeline" in test and "plan_check_text" in test
        for policy, row in test.items():
            assert summary["drop"][policy] == pytest.approx(splits["train"][policy]["success"] - row["success"])
        best = summary["best_hand_written_on_test"]
        assert best != "oracle" and all(test[best]["success"] >= v["success"] for k, v in test.items() if k != "oracle")
        assert summary["oracle_lead_success"] == pytest.approx(test["oracle"]["success"] - test[best]["success"])
    # a later run of another kind with the same tasks and seeds adds it, keeping the kinds measured before
    first = result["table"]["none"]
    assert main(["--tasks", "4", "--kinds", "default", "--out-dir", str(tmp_path)]) == 0
    merged = json.loads((tmp_path / "deviations.json").read_text())
    assert list(merged["table"]) == ["none", "team", "default"] and merged["table"]["none"] == first
    assert set(merged["measured"]) == {"none", "team", "default"}
    assert main(["--tasks", "5", "--kinds", "team", "--out-dir", str(tmp_path)]) == 0  # other tasks: a new table
    assert list(json.loads((tmp_path / "deviations.json").read_text())["table"]) == ["team"]


def test_the_deviations_table_adds_a_learned_models_drop_on_the_default_kind(tmp_path, capsys):
    """``--models NAME=PATH``: a model saved by ``train`` is evaluated on the default kind's two splits, on the env
    settings saved beside it; its drop is train minus test; its row is kept by a later run with the same tasks and
    seeds; bad specs are clear errors."""
    from baselines.training import TrainConfig, train
    from benchmarks.deviations import main

    cfg = TrainConfig(total_timesteps=64, n_envs=2, group_size=2, groups_per_rollout=2, warm_start=None, eval_episodes=0,
                      progress_bar=False, env_kwargs={"text_features": True}, output_dir=str(tmp_path / "runs"))  # fmt: skip
    train(cfg)
    model = cfg.model_path
    out = tmp_path / "out"
    assert main(["--tasks", "3", "--kinds", "default", "--models", f"tiny={model}", "--out-dir", str(out)]) == 0
    result = json.loads((out / "deviations.json").read_text())
    row = result["learned"]["tiny"]
    assert row["drop"] == pytest.approx(row["train"]["success"] - row["test"]["success"])
    assert row["train"]["episodes"] == 3 and "grpo" in row["description"]
    md = (out / "deviations.md").read_text()
    assert "## Learned policies on the defaults" in md and "| tiny (learned) |" in md and "| rule_based |" in md
    assert main(["--tasks", "3", "--kinds", "--out-dir", str(out)]) == 0  # no kind: the file's table and models kept
    assert json.loads((out / "deviations.json").read_text())["learned"]["tiny"] == row
    for bad, message in ((["--models", "tiny"], "NAME=PATH"), (["--models", f"x={tmp_path / 'no.zip'}"], "no saved model")):
        with pytest.raises(SystemExit):
            main(["--tasks", "3", "--kinds", "default", *bad, "--out-dir", str(out)])
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):  # nothing measured and no results file to keep
        main(["--tasks", "3", "--kinds", "--out-dir", str(tmp_path / "empty")])


def test_make_train_seeds_keeps_each_runs_model_and_settings_when_asked(tmp_path, monkeypatch):
    """``--keep-models DIR``: the model and the .json edo train wrote beside it are copied to DIR as seed<s>.zip/.json
    (the training itself is edo train's, tested with the CLI; here its process only writes the two files)."""
    import benchmarks.make_train_seeds as mts

    real_run = subprocess.run

    def fake_edo_train(cmd, **kwargs):
        if "baselines.cli" not in cmd:  # another command (the machine description's): run as it is
            return real_run(cmd, **kwargs)
        out = Path(cmd[cmd.index("--output-dir") + 1])
        (out / "grpo_EDO-v0_3.zip").write_bytes(b"model bytes")
        (out / "grpo_EDO-v0_3.json").write_text(json.dumps({"config": {"seed": 3}}))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(mts.subprocess, "run", fake_edo_train)
    (tmp_path / "out").mkdir()
    mts.train_run(3, 10, tmp_path / "out", keep_models=tmp_path / "kept")
    assert (tmp_path / "kept" / "seed3.zip").read_bytes() == b"model bytes"
    assert json.loads((tmp_path / "kept" / "seed3.json").read_text()) == {"config": {"seed": 3}}
    assert json.loads((tmp_path / "out" / "seed3.json").read_text())["config"] == {"seed": 3}
    mts.train_run(4, 10, tmp_path / "out")  # without it nothing is kept
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["seed3.json", "seed3.zip"]

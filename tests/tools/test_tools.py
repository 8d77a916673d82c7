"""The developer tools in ``tools/``: tiny runs of each script, their checks on bad input, and their timers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_script(args: list[str], timeout: int = 600, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))  # fmt: skip
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"{args} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.parametrize(
    "script, args, message",
    [
        ("ab_search_cache", ["--windows", "0"], "--windows must be >= 1"),
        ("step_breakdown", ["--repeats", "0"], "--repeats must be >= 1"),
        ("step_breakdown", ["--warmup", "-1"], "--warmup must be >= 0"),
        ("step_breakdown", ["--cache", "mine"], "invalid choice: 'mine'"),
        ("ab_idle_envs", ["--repeats", "0"], "--repeats must be >= 1"),
        ("ab_idle_envs", ["--timesteps", "0"], "--timesteps must be >= 1"),
        ("ab_revisions", ["--base", "HEAD", "--repeats", "0"], "--repeats must be >= 1"),
        ("ab_revisions", ["--base", "HEAD", "--timesteps", "0"], "--timesteps must be >= 1"),
        ("ab_revisions", ["--base", "no-such-revision"], "is not a commit of this repository"),
        ("ab_revisions", [], "the following arguments are required: --base"),
        ("ab_encoders", ["--rounds", "0"], "--rounds must be >= 1"),
        ("ab_encoders", ["--steps", "0"], "--steps must be >= 1"),
        ("ab_encoders", ["--warmup", "-1"], "--warmup must be >= 0"),
        ("train_call_costs", ["--timesteps", "0"], "--timesteps must be >= 1"),
        ("train_call_costs", ["--warmup", "-1"], "--warmup must be >= 0"),
        ("train_call_costs", ["--cache", "mine"], "invalid choice: 'mine'"),
        ("train_call_costs", ["--cache", "default", "--no-reachable"], "--no-reachable applies to --cache prepared only"),
        ("render_cost", ["--episodes", "0"], "--episodes must be >= 1"),
        ("render_cost", ["--repeats", "0"], "--repeats must be >= 1"),
        ("render_cost", ["--seed", "-1"], "--seed must be >= 0"),
        ("step_interference", ["--steps", "0"], "--steps must be >= 1"),
        ("step_interference", ["--sweep-mib", "0"], "--sweep-mib must be >= 1"),
        ("step_interference", ["--warmup", "-1"], "--warmup must be >= 0"),
        ("first_seen_queries", ["--steps", "0"], "--steps must be >= 1"),
        ("first_seen_queries", ["--steps", "15000"], "--steps must be a multiple of --window"),
        ("first_seen_queries", ["--settle", "300000"], "--settle must be a multiple of --window below --steps"),
    ],
)
def test_tools_reject_bad_input(script, args, message):
    proc = subprocess.run([sys.executable, "-m", f"tools.{script}", *args], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode != 0 and message in proc.stderr


@pytest.mark.slow  # ~20-60 s on 2 cores: kept out of the fast suite (`make test-all` runs it)
def test_diagnostics_horizon_one_tiny_run_its_file_and_bad_input(tmp_path):
    out = tmp_path / "diag"
    args = ["-m", "tools.diagnostics", "horizon", "--algo", "grpo", "--hops", "3", "--min-hops", "2", "--timesteps", "200",
            "--episodes", "2", "--set", "group_size=2", "--out-dir", str(out)]  # fmt: skip
    run_script(args)
    (path,) = out.glob("*.json")
    assert path.name == "horizon-grpo-h3-from2-multihop-ent0.01-group_size_2-s0.json"
    data = json.loads(path.read_text())
    assert data["train_env_kwargs"]["tasks"] == {"families": ["multihop"], "min_hops": 2, "max_hops": 3}
    assert data["eval_env_kwargs"]["tasks"] == {"families": ["multihop"], "min_hops": 3, "max_hops": 3}
    assert data["overrides"] == {"ent_coef": 0.01, "group_size": 2} and data["learned"]["episodes"] == 2
    assert set(data["heuristics"]) == {"rule_based", "static_pipeline"}
    assert "exists" in run_script(args).stdout  # not recomputed
    for bad, message in ((["--set", "group_size"], "FIELD=VALUE"), (["--set", "filter_on=x"], "filter_on must be one of"),
                         (["--min-hops", "9"], "--min-hops must be in 1..")):  # fmt: skip
        proc = subprocess.run([sys.executable, "-m", "tools.diagnostics", "horizon", "--hops", "3", "--timesteps", "10",
                               "--out-dir", str(tmp_path / "bad"), *bad], cwd=REPO, capture_output=True, text=True)  # fmt: skip
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_diagnostics_recurrent_ppo_carries_its_lstm_state_through_each_episode(tmp_path):
    from baselines.evaluation import heldout_task_ids, make_eval_env
    from baselines.training import TrainConfig
    from tools.diagnostics import evaluate_recurrent, train_recurrent

    cfg = TrainConfig(algo="ppo", total_timesteps=64, n_envs=2, n_steps=32, net_arch=(16,), eval_episodes=0,
                      progress_bar=False, output_dir=str(tmp_path))  # fmt: skip
    model = train_recurrent(cfg)
    assert type(model).__name__ == "RecurrentPPO" and model.num_timesteps >= 64
    calls = []
    predict = model.predict

    def spy(obs, state=None, episode_start=None, deterministic=False):
        calls.append((state is None, bool(episode_start[0])))
        return predict(obs, state=state, episode_start=episode_start, deterministic=deterministic)

    model.predict = spy
    env = make_eval_env("EDO-v0")
    result = evaluate_recurrent(model, env, heldout_task_ids(env, 3))
    assert result.episodes == 3 and result.policy == "recurrent_ppo"
    starts = [i for i, (_, start) in enumerate(calls) if start]
    assert len(starts) == 3 and starts[0] == 0  # one fresh start per episode
    assert all(calls[i][0] for i in starts) and not any(no_state for no_state, start in calls if not start)


def test_render_cost_tiny_run(tmp_path):
    """Frames and steps timed side by side (one episode, one repeat: ~10 s, most of it the env's first reset)."""
    run_script(["-m", "tools.render_cost", "--episodes", "1", "--repeats", "1", "--out-dir", str(tmp_path)], timeout=300)
    data = json.loads((tmp_path / "render_cost.json").read_text())
    (run,) = data["runs"]
    assert run["frames"] >= 1 and run["frame_ms_median"] > 0 and run["step_ms_median"] > 0
    assert run["frame_over_step"] == pytest.approx(run["frame_ms_median"] / run["step_ms_median"])
    assert data["frame_ms"]["median"] == pytest.approx(run["frame_ms_median"])
    assert "ms a frame" in (tmp_path / "render_cost.md").read_text()


def test_first_seen_queries_sorts_query_texts_into_families():
    from edo_gym.world.language import compute_instruction, question, reply_instruction
    from tools.first_seen_queries import family_of

    assert family_of(compute_instruction("sum", ["850", "probably 650, I think", "I don't know"])) == "compute"
    assert family_of(compute_instruction("max", ["12"])) == "compute"
    assert family_of(reply_instruction("about 30 days")) == "reply"
    assert family_of(question(("employer",), "I. Rask")) == "other"


@pytest.mark.slow
def test_first_seen_queries_tiny_run(tmp_path):
    """A prepared fresh cache, then two windows of random legal steps; every text counted once, in its family (~60 s,
    most of it the preparation)."""
    run_script(["-m", "tools.first_seen_queries", "--steps", "2000", "--window", "1000", "--settle", "1000",
                "--out-dir", str(tmp_path)], timeout=900)  # fmt: skip
    from tools.first_seen_queries import FAMILIES, family_of

    data = json.loads((tmp_path / "first_seen_queries.json").read_text())
    assert len(data["texts_per_window"]) == 2 and sum(data["texts_per_window"]) == len(data["texts"])
    assert sum(data["by_family"].values()) == len(data["texts"]) and set(data["by_family"]) == set(FAMILIES)
    assert sum(data["by_family_after_settle"].values()) == data["texts_per_window"][1]
    assert all(t["family"] == family_of(t["text"]) and t["window"] in (0, 1) for t in data["texts"])
    assert data["prepare_s"] > 0
    assert "texts to the model" in (tmp_path / "first_seen_queries.md").read_text()


def test_every_runs_its_callable_once_per_n_calls():
    from tools.step_interference import every

    calls = []
    call = every(3, lambda: calls.append(1))
    for _ in range(7):
        call()
    assert len(calls) == 3  # calls 1, 4 and 7


@pytest.mark.slow
def test_step_interference_tiny_run(tmp_path):
    """Each arm replays the same recorded steps; ratios are against the tight arm of the same round (~20 s)."""
    run_script(["-m", "tools.step_interference", "--steps", "300", "--repeats", "2", "--warmup", "100",
                "--out-dir", str(tmp_path)], timeout=600)  # fmt: skip
    data = json.loads((tmp_path / "step_interference.json").read_text())
    assert data["steps"] >= 300 and len(data["rounds"]) == 2
    for rnd in data["rounds"]:
        assert rnd["over_tight"]["tight"] == 1.0
        for arm, rate in rnd["steps_per_s"].items():
            assert rate > 0 and rnd["over_tight"][arm] == pytest.approx(rate / rnd["steps_per_s"]["tight"])
    assert set(data["summary"]) == {"tight", "policy", "policy / 16 calls", "cache sweep"}


@pytest.mark.slow
def test_train_call_costs_tiny_run(tmp_path):
    """Per-call timers in training and alone, and the forward pass tight and alternated, each on its own copy of a
    freshly prepared cache directory (the script checks that each ran there) (~40 s)."""
    run_script(["-m", "tools.train_call_costs", "--timesteps", "600", "--warmup", "200", "--steps", "300",
                "--forward-iters", "20", "--no-reachable", "--out-dir", str(tmp_path)], timeout=900)  # fmt: skip
    data = json.loads((tmp_path / "train_call_costs.json").read_text())
    assert data["settings"]["cache"] == "prepared" and data["settings"]["no_reachable"] is True
    md = (tmp_path / "train_call_costs.md").read_text()
    # the commit is a machine-readable field of the JSON; the Markdown cites the command and the machine instead
    assert data["revision"] and data["revision"][:7] not in md
    assert "own copy of one fresh cache directory prepared" in md
    train, alone = data["train"], data["alone"]
    # every env step is timed once, by kind too; the policy's forward pass runs in training only
    assert train["step"]["calls_per_step"] == alone["step"]["calls_per_step"] == 1.0
    for parts in (train, alone):
        kinds = [v["calls_per_step"] for k, v in parts.items() if k.startswith("step: ")]
        assert sum(kinds) == pytest.approx(1.0) and parts["reset"]["calls_per_step"] > 0
    assert "policy forward pass (per vector step)" in train and "policy forward pass (per vector step)" not in alone
    assert set(data["forward_us"]["tight"]) == {"observations to tensors", "features", "MLP", "sampling"}
    assert all(v > 0 for v in data["forward_us"]["alternated"].values())
    assert "Command: `python -m tools.train_call_costs --timesteps 600" in md


def test_ab_revisions_leaves_out_options_the_base_lacks(tmp_path, monkeypatch):
    """Both arms get the same arguments: make train's, less any option the base's ``edo train --help`` does not list
    (with its value); a flag without a value is kept or dropped alone."""
    import tools.ab_revisions as ab

    help_text = "usage: edo train [-h] [--algo {grpo,ppo}] [--seed SEED]\n  -h, --help  show this help\n  --no-progress\n"
    monkeypatch.setattr(ab, "TRAIN_ARGS", ["--algo", "grpo", "--update-threads", "2", "--seed", "0", "--no-progress"])
    monkeypatch.setattr(ab.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=help_text, stderr=""))
    kept, dropped = ab.shared_train_args(tmp_path, tmp_path)
    assert kept == ["--algo", "grpo", "--seed", "0", "--no-progress"] and dropped == ["--update-threads", "2"]
    monkeypatch.setattr(ab, "TRAIN_ARGS", ["--algo", "grpo", "--seed", "0"])
    assert ab.shared_train_args(tmp_path, tmp_path) == (["--algo", "grpo", "--seed", "0"], [])


@pytest.mark.slow
def test_ab_revisions_tiny_run(tmp_path):
    """One (base, head) pair with base = HEAD: the same code on both sides trains the same parameters (~2 min)."""

    def worktrees() -> list[str]:
        return subprocess.run(["git", "worktree", "list"], cwd=REPO, capture_output=True, text=True).stdout.splitlines()

    before = worktrees()
    run_script(["-m", "tools.ab_revisions", "--base", "HEAD", "--repeats", "1", "--timesteps", "1500", "--no-reachable",
                "--out-dir", str(tmp_path)], timeout=900)  # fmt: skip
    data = json.loads((tmp_path / "ab_revisions.json").read_text())
    (base,), (head,) = data["runs"]["base"], data["runs"]["head"]
    assert base["steps"] == head["steps"] >= 1500 and data["same_parameters"] == [True]
    assert data["head_over_base_wall"] == [pytest.approx(head["train_wall_s"] / base["train_wall_s"])]
    assert set(data["median_parts_s"]["head"]) == {"env_s", "policy_inference_s", "update_s", "rollout_other_s", "other_s"}
    assert "| 1 |" in (tmp_path / "ab_revisions.md").read_text()
    assert worktrees() == before  # the base revision's temporary worktree is gone


@pytest.mark.slow
def test_ab_encoders_tiny_run(tmp_path):
    """Two alternated rounds of the default and the static encoder, each on its own prepared cache (~100 s); the
    static arm computes its query vectors (none are stored), so its windows count embedded texts."""
    run_script(["-m", "tools.ab_encoders", "--rounds", "2", "--steps", "300", "--warmup", "200",
                "--out-dir", str(tmp_path)], timeout=900)  # fmt: skip
    data = json.loads((tmp_path / "ab_encoders.json").read_text())
    assert [r["first"] for r in data["rounds"]] == ["default", "static"]
    for r in data["rounds"]:
        assert r["static_over_default_time"] == pytest.approx(r["static"]["edo_s"] / r["default"]["edo_s"])
    assert set(data["summary"]) == {"static_over_default_time", "default", "static"}
    assert sum(data["summary"]["static"]["embedder_calls_per_window"]) > 0  # static vectors are computed, not stored
    assert "| 1 | static |" in (tmp_path / "ab_encoders.md").read_text()


@pytest.mark.slow
def test_ab_search_cache_tiny_run(tmp_path):
    """One (off, on) pair on a prepared cache: "on" reads search results from disk instead of querying the index."""
    run_script(["-m", "tools.ab_search_cache", "--repeats", "1", "--first-steps", "2000", "--warmup", "0", "--steps",
                "1000", "--windows", "1", "--out-dir", str(tmp_path)], timeout=900)  # fmt: skip
    data = json.loads((tmp_path / "ab_search_cache.json").read_text())
    (off,), (on,) = data["runs"]["off"], data["runs"]["on"]
    assert off["disk_hits"] == 0 < off["searches"]
    assert on["disk_hits"] > 0 and on["searches"] < off["searches"]
    assert set(data["summary"]) == {"off", "on"}
    assert "| on |" in (tmp_path / "ab_search_cache.md").read_text()


@pytest.mark.slow
def test_step_breakdown_tiny_run(tmp_path):
    """Parts nest as documented (a part's time contains its nested parts'), and the timers leave the env as it was."""
    run_script(["-m", "tools.step_breakdown", "--steps", "400", "--repeats", "2", "--warmup", "300", "--out-dir",
                str(tmp_path)], timeout=900)  # fmt: skip
    data = json.loads((tmp_path / "step_breakdown.json").read_text())
    parts = data["parts"]
    assert {"reset", "step", "dispatch", "verify", "make_plan", "search", "forward", "call", "model", "harness"} <= set(parts)
    for w in data["windows"]:
        us = w["us_per_step"]
        assert us["step"] >= us["dispatch"] + us["verify"] > 0
        assert us["call"] >= us["model"] > 0 and us["search"] >= us["forward"] >= 0
        assert w["instrumented_us_per_step"] == pytest.approx(us["reset"] + us["step"] + us["harness"])
        assert w["forward_passes"] == round(w["calls_per_step"]["forward"] * 400)
        # the uninstrumented window's floor: its time less the first-seen queries' forward passes and index searches
        seen = w["uninstrumented_first_seen_queries"]
        assert (
            seen["forward_s"] >= 0 and seen["index_search_s"] >= 0 and (seen["forward_passes"] > 0) == (seen["forward_s"] > 0)
        )
        assert w["rest_us_per_step"] == pytest.approx(
            w["uninstrumented_us_per_step"] - 1e6 * (seen["forward_s"] + seen["index_search_s"]) / 400
        )
        assert w["rest_over_cartpole"] == pytest.approx(
            w["edo_over_cartpole"] * w["uninstrumented_us_per_step"] / w["rest_us_per_step"]
        )
    md = (tmp_path / "step_breakdown.md").read_text()
    assert data["edo_over_cartpole"] > 0 and "| `step` |" in md
    # the default: a fresh cache directory, prepared first, not the one earlier runs filled
    assert data["settings"]["cache"] == "prepared" and "prepared as `edo prepare` leaves it" in md


def test_part_timers_come_off_and_leave_the_trajectory_unchanged(small_world_kwargs):
    import gymnasium as gym
    import numpy as np

    import edo_gym  # noqa: F401
    from tools.step_breakdown import PartTimers

    def run(timed: bool) -> list:
        env = gym.make("EDO-v0", **small_world_kwargs)
        timers = PartTimers(env) if timed else None
        env.reset(seed=3)
        out, rng = [], np.random.default_rng(3)
        for _ in range(120):
            legal = np.flatnonzero(env.unwrapped.action_masks())
            obs, reward, terminated, truncated, info = env.step(int(legal[int(rng.integers(len(legal)))]))
            out.append((reward, info["task_id"], obs["subtasks"].tobytes()))
            if terminated or truncated:
                env.reset()
        if timers is not None:
            assert timers.calls["step"] == 120 and timers.seconds["model"] > 0
            timers.remove()
            assert "step" not in vars(env.unwrapped) and "call" not in vars(env.unwrapped.caller)
        return out

    assert run(True) == run(False)


def test_forward_timer_times_the_real_forward_passes_and_comes_off(small_world_kwargs):
    """step_breakdown's timer of the first-seen queries' forward passes counts each real ``encode_one`` call and its
    time, and leaves the embedder as it was."""
    import gymnasium as gym

    import edo_gym  # noqa: F401
    from tools.step_breakdown import ForwardTimer

    env = gym.make("EDO-v0", **small_world_kwargs)
    env.reset(seed=0)
    embedder = env.unwrapped.service.encoders[0].embedder
    before = embedder.encode_one("a query text no cache holds: 8817, 2203, 51.")
    timer = ForwardTimer(env)
    after = embedder.encode_one("a query text no cache holds: 8817, 2203, 51.")
    embedder.encode_one("another one: 1, 2, 3.")
    assert timer.calls["forward"] == 2 and timer.seconds["forward"] > 0
    assert (after == before).all()
    timer.remove()
    embedder.encode_one("a third: 4.")
    assert timer.calls["forward"] == 2 and "encode_one" not in vars(embedder)


@pytest.mark.slow
def test_ab_idle_envs_tiny_run(tmp_path):
    """One (off, on) pair: with idle envs left where they are, fewer env steps for the same recorded steps."""
    run_script(["-m", "tools.ab_idle_envs", "--repeats", "1", "--timesteps", "2000", "--out-dir", str(tmp_path)],
               timeout=900)  # fmt: skip
    data = json.loads((tmp_path / "ab_idle_envs.json").read_text())
    (off,), (on,) = data["runs"]["off"], data["runs"]["on"]
    assert off["steps"] == on["steps"] and on["env_steps"] == on["steps"] < off["env_steps"]
    assert "| on / off |" in (tmp_path / "ab_idle_envs.md").read_text()

"""EDO-v0 with a real language model behind planner, workers and verifiers: the bundled SmolLM2 served by llama.cpp
(``xllamacpp``) on a free port, reached over HTTP through the OpenAI client, recorded and replayed offline."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("openai")
pytest.importorskip("xllamacpp")

import edo_gym  # noqa: E402,F401 - registers the ids
from baselines.heuristics import StaticPipeline  # noqa: E402
from edo_gym.llm import CachedBackend, OpenAIBackend, ResponseCache  # noqa: E402
from edo_gym.llm.server import INSTALL_MODEL_HINT, LocalLLMServer, bundled_model_path  # noqa: E402

pytestmark = pytest.mark.skipif(bundled_model_path() is None, reason=f"bundled model missing: {INSTALL_MODEL_HINT}")


def _episode(env, seed: int) -> list:
    """Everything reset/step returned in one static-pipeline episode (with a verification of the first result)."""
    policy = StaticPipeline()
    obs, info = env.reset(seed=seed, options={"task_id": 3})
    policy.reset(obs, info)
    out = [(obs, info)]
    verified = False
    while True:
        action = policy.act(obs, info)
        if not verified and env.unwrapped.episode.plan.done_stack:
            action, verified = env.unwrapped.A_VERIFY + 3, True
        obs, reward, terminated, truncated, info = env.step(action)
        out.append((obs, reward, terminated, truncated, info))
        if terminated or truncated:
            return out


def _same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x, y, strict=True):
            if isinstance(u, dict):
                assert u.keys() == v.keys()
                for k in u:
                    if isinstance(u[k], np.ndarray):
                        np.testing.assert_array_equal(u[k], v[k])
                    else:
                        assert u[k] == v[k], k
            else:
                assert u == v


def test_an_episode_over_http_then_replayed_with_the_server_stopped(tmp_path):
    with LocalLLMServer() as base_url:
        model = "SmolLM2-135M-Instruct-Q4_1"
        live = CachedBackend(OpenAIBackend(base_url, model, timeout_s=60), tmp_path, mode="record")
        env = gym.make("EDO-v0", backend=live)
        recorded = _episode(env, seed=0)
        assert live.counts.real > 0
    stats = recorded[-1][4]["episode_stats"]
    assert stats["calls"] >= 3 and stats["tokens"] > 0
    trace = env.unwrapped.episode.trace
    assert any(e[0] == "dispatch" for e in trace) and any(e[0] == "verify" for e in trace)
    # the server is gone: replay answers every request from the cache, identically
    offline = CachedBackend(OpenAIBackend("http://127.0.0.1:9/v1", model, timeout_s=2, retries=0), tmp_path, mode="replay")
    replayed = _episode(gym.make("EDO-v0", backend=offline), seed=0)
    _same(recorded, replayed)
    assert offline.counts.real == 0 and offline.counts.cached > 0


def test_a_replay_miss_is_a_clear_error_reported_as_a_failed_call(tmp_path):
    ResponseCache(tmp_path).close()  # an empty recording
    offline = CachedBackend(OpenAIBackend("http://127.0.0.1:9/v1", "m", timeout_s=2, retries=0), tmp_path, mode="replay")
    env = gym.make("EDO-v0", backend=offline)
    obs, info = env.reset(seed=0)
    base = env.unwrapped
    assert base.episode.plan.source == "fallback"  # the planner's request was not recorded: charged, then the fallback plan
    assert any(e[0] == "plan_fallback" and "replay" in e[1].lower() for e in base.episode.trace)
    _, _, _, _, info = env.step(0)
    assert info["call_failed"] and "replay" in info["call_error"].lower()


@pytest.mark.slow  # ~20-60 s on 2 cores: kept out of the fast suite (`make test-all` runs it)
def test_edo_evaluate_with_the_local_model_records_then_replays_offline(tmp_path, capsys):
    """`edo evaluate` takes the backend flags of `edo demo`: a saved policy against the real local model, recorded;
    then the same command in replay mode against a stopped server prints the same table from the cache."""
    from baselines.cli import main
    from baselines.grpo import GRPO

    path = tmp_path / "grpo_tiny.zip"
    GRPO("MultiInputPolicy", gym.make("EDO-v0"), seed=0, policy_kwargs={"net_arch": [8]}).save(path)
    cache = tmp_path / "cache"
    common = [str(path), "--algo", "grpo", "--episodes", "1", "--no-heuristics", "--llm-cache", str(cache)]
    rc = main(["evaluate", *common, "--backend", "local", "--agent-model", "analyst=SmolLM2-135M-Instruct-Q4_1"])
    recorded = capsys.readouterr().out
    assert rc == 0, recorded
    assert "local backend" in recorded and "backend calls:" in recorded
    calls = recorded.split("backend calls:")[1].split()
    assert int(calls[0]) > 0 and calls[1] == "real,"  # at least the planner went to the server
    table = recorded.split("backend:\n")[1].split("backend calls:")[0]
    # `--backend local` in replay mode starts no server; the requests keep the served model's name, so they hit
    rc = main(
        [
            "evaluate",
            *common,
            "--backend",
            "local",
            "--llm-cache-mode",
            "replay",
            "--agent-model",
            "analyst=SmolLM2-135M-Instruct-Q4_1",
        ]
    )
    replayed = capsys.readouterr().out
    assert rc == 0, replayed
    assert "no server started" in replayed and "local model server at" not in replayed
    assert replayed.split("backend:\n")[1].split("backend calls:")[0] == table, (recorded, replayed)
    assert "backend calls: 0 real" in replayed and ", 0 failed" in replayed
    # the same recording through --backend openai must name the model it was recorded with; a wrong name is a miss
    # whose error says which models the cache holds
    offline = ["--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", "--llm-cache-mode", "replay"]
    rc = main(
        [
            "evaluate",
            *common,
            *offline,
            "--model",
            "SmolLM2-135M-Instruct-Q4_1",
            "--agent-model",
            "analyst=SmolLM2-135M-Instruct-Q4_1",
        ]
    )
    assert rc == 0 and capsys.readouterr().out.split("backend:\n")[1].split("backend calls:")[0] == table


def test_edo_evaluate_rejects_backend_flags_that_cannot_apply(tmp_path, capsys):
    from baselines.cli import main

    model = str(tmp_path / "m.zip")
    assert main(["evaluate", model, "--algo", "grpo", "--llm-cache", str(tmp_path)]) == 2
    assert "--llm-cache needs --backend" in capsys.readouterr().err
    assert main(["evaluate", model, "--algo", "grpo", "--backend", "openai"]) == 2
    assert "--base-url" in capsys.readouterr().err
    args = ["evaluate", model, "--algo", "grpo", "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1"]
    assert main([*args, "--agent-model", "nobody=m"]) == 2
    assert "unknown agents or roles ['nobody']" in capsys.readouterr().err

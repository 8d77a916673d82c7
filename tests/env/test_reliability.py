"""Injected faults: failing planner, worker and verifier calls, a failing retriever, a damaged embedding cache, an
interrupted persistent chromadb build. In each case the env records the fault, charges what it cost, and keeps going.

Fault injection uses real classes behind the real interfaces (``tests/reliability_helpers.py``): an ``LLMBackend``
wrapping ``SimulatedBackend`` that faults the calls of chosen roles, a retriever / chromadb collection that raises
chromadb errors. Read-only cache directories are simulated without ``chmod`` (the tests may run as root, which
ignores file modes): a cache path under a regular file, an ``os.replace`` that raises ``PermissionError``, a lock
that cannot be taken.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from dataclasses import replace
from pathlib import Path

import chromadb.errors
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import edo_gym.retrieval.service as service_mod
from edo_gym.agents.backend import CallOutcome, InvalidGenerationError, RetryPolicy, call_backend, validate_response
from edo_gym.agents.planner import PLAN_INSTRUCTION, REPAIR_INSTRUCTION, PlanError, parse_plan
from edo_gym.agents.protocol import LLMResponse
from edo_gym.agents.worker import LATENCY_MODEL, AgentCaller
from edo_gym.config import EDOConfig, RetrievalConfig, TaskConfig, WorldConfig, default_workers
from edo_gym.envs import observation as obs_lib
from edo_gym.envs.edo_env import PLANNER_SIZE, EDOEnv, shared_world
from edo_gym.retrieval.cache import CacheWarning, EmbeddingCache, texts_hash
from edo_gym.retrieval.search import ShardRetriever
from edo_gym.retrieval.service import RetrievalService
from tests.reliability_helpers import (
    BAD_TEXTS,
    GARBAGE,
    BrokenCollection,
    EpisodeChecker,
    FailingRetriever,
    FaultyBackend,
    det_vectors,
    simulated_backend,
)

SMALL_TASKS = {"n_tasks": 40}
#: A support task whose first plan step is a shipping lookup (in worker 0's shard); action 1 dispatches it to worker 0
#: with retrieval.
TASK_ID = 3
#: Planner replies that are valid responses but not valid plans.
BAD_PLANS = sorted(name for name in BAD_TEXTS if name != "no_verdict")


@pytest.fixture(scope="module")
def world():
    return shared_world(WorldConfig())


@pytest.fixture(scope="module")
def default_service(world):
    return RetrievalService.get(world, RetrievalConfig(), [w.shard for w in default_workers()])


@pytest.fixture
def shared_embedder(monkeypatch, default_service):
    """New ``RetrievalService`` instances reuse the already loaded model (keeps these tests fast)."""
    embedder = default_service.embedders[0]
    monkeypatch.setattr(service_mod, "Embedder", lambda model="default", **kw: embedder)
    return embedder


def make_env(schedule=None, **kwargs):
    """An env (trace rendering on) whose backend is a ``FaultyBackend`` around the env's own simulated backend."""
    cfg = EDOConfig.from_kwargs(**{"tasks": SMALL_TASKS, **kwargs})
    backend = FaultyBackend(simulated_backend(cfg), schedule)
    return EDOEnv(cfg, render_mode="ansi", backend=backend), backend


def reset_checked(env, checker, seed=0, task_id=TASK_ID):
    obs, info = env.reset(seed=seed, options={"task_id": task_id})
    checker.after_reset(env, obs, info)
    return obs, info


def step_checked(env, checker, info, action):
    mask = info["action_mask"]
    obs, reward, terminated, truncated, info = env.step(action)
    checker.after_step(env, action, mask, obs, reward, terminated, truncated, info)
    return obs, reward, terminated, truncated, info


def first_dispatch(schedule=None, action=1, **kwargs):
    """Reset to ``TASK_ID`` and dispatch its first step (action 1 = worker 0 with retrieval), checking invariants."""
    env, backend = make_env(schedule, **kwargs)
    checker = EpisodeChecker()
    _, info = reset_checked(env, checker)
    obs, reward, _, _, info = step_checked(env, checker, info, action)
    assert env.episode.trace[-1][0] == "dispatch"
    return env, backend, obs, reward, info, env.episode.trace[-1][3]


def failed_attempt_latency(env, record, kind):
    """Simulated latency of one failed attempt of ``record``'s call (every attempt sends the same prompt)."""
    base, per_prompt, _ = LATENCY_MODEL[env.config.workers[record.worker].size]
    return (
        env.config.backend_timeout_s
        if kind == "timeout"
        else base + per_prompt * (record.cost.prompt_tokens / record.attempts)
    )


def planner_attempt_cost(env, backend, request, fault):
    """``(tokens, latency_s)`` the env charges for one attempt of a planner ``request`` that got ``fault``.

    A clean attempt costs what the same request costs on the unfaulted backend (replies depend on the request only);
    a failed one sends the (estimated) prompt and costs the fixed overhead plus prompt time, or the whole timeout.
    """
    if fault == "ok":
        _, _, cost = AgentCaller(backend.inner, env.service, env.retry_policy).call(request, PLANNER_SIZE)
        return cost.tokens, cost.latency_s
    estimate = env.caller.estimate_prompt_tokens(request)
    base, per_prompt, _ = LATENCY_MODEL[PLANNER_SIZE]
    return estimate, env.config.backend_timeout_s if fault == "timeout" else base + per_prompt * estimate


# -- worker call faults ---------------------------------------------------------------------------------------------
def test_raising_backend_is_a_charged_failed_call_and_the_episode_goes_on():
    env, backend, obs, reward, info, rec = first_dispatch({"worker": ["error"]})
    assert info["call_failed"] is True and info["event"] == "dispatch"
    assert info["call_error"].startswith("RuntimeError: worker backend exploded")
    assert info["backend_attempts"] == 1  # a non-transient error is not retried
    assert rec.failed and rec.text == "" and rec.confidence is None and rec.cost.completion_tokens == 0
    assert rec.cost.calls == 1 and rec.cost.prompt_tokens > 0 and rec.cost.latency_s > 0
    assert info["cost"]["calls"] == 2  # the planner's call at reset is charged on the first step, with this one
    assert reward < 0 and math.isfinite(reward)
    assert env.episode.failed_calls == 1 and env.episode.calls == 2
    # the step stays undone and current; the attempt is visible in the observation
    assert env.episode.plan.results[0] is None and env.episode.plan.current_step == 0 and env.episode.plan.attempts[0] == 1
    assert obs["subtasks"][0, obs_lib.C_DONE] == 0 and obs["subtasks"][0, obs_lib.C_CURRENT] == 1
    assert obs["subtasks"][0, obs_lib.C_ATTEMPTS] > 0 and obs["workers"][0, obs_lib.W_CALLS] > 0
    text = env.render()
    assert "call FAILED: RuntimeError: worker backend exploded" in text and "1 failed calls" in text
    # the backend recovers: the same step can be dispatched again, and the episode ends normally
    _, _, _, _, info = env.step(1)
    assert not info["call_failed"] and info["call_error"] == "" and env.episode.plan.results[0] is not None
    _, _, terminated, _, info = env.step(env.A_SUBMIT)
    assert terminated and info["episode_stats"]["failed_calls"] == 1 and info["episode_stats"]["calls"] == 3
    assert backend.faults("worker") == ["error", "ok"] and backend.faults("planner") == ["ok"]


def test_transient_errors_are_retried_with_backoff_and_charged():
    _, _, _, _, _, ref = first_dispatch()
    env, backend, _, _, info, rec = first_dispatch({"worker": ["transient", "transient"]})
    assert backend.faults("worker") == ["transient", "transient", "ok"]
    assert not rec.failed and info["call_failed"] is False and info["call_error"] == ""
    assert rec.attempts == 3 and info["backend_attempts"] == 3 and rec.cost.calls == 3
    assert env.episode.call_retries == 2 and env.episode.failed_calls == 0
    # the fault-free attempt answers exactly as the clean run; every attempt sent the prompt
    assert (rec.text, rec.confidence, rec.retrieved) == (ref.text, ref.confidence, ref.retrieved)
    assert rec.cost.prompt_tokens == 3 * ref.cost.prompt_tokens and rec.cost.completion_tokens == ref.cost.completion_tokens
    backoff = 0.5 + 1.0  # default backend_backoff_s, doubling
    expected = ref.cost.latency_s + backoff + 2 * failed_attempt_latency(env, rec, "transient")
    assert rec.cost.latency_s == pytest.approx(expected)
    text = env.render()
    assert "after 3 attempts" in text and "2 retries" in text


@pytest.mark.parametrize("retries", [0, 1, 3])
def test_retries_exhausted_give_a_failed_call(retries):
    backoff_s = 0.25
    env, _, _, _, info, rec = first_dispatch(
        {"worker": ["transient"] * (retries + 1)}, backend_retries=retries, backend_backoff_s=backoff_s
    )
    assert rec.failed and rec.attempts == retries + 1 == info["backend_attempts"] == rec.cost.calls
    assert info["call_error"].startswith("TransientBackendError: HTTP 503")
    assert env.episode.call_retries == retries and env.episode.failed_calls == 1
    retrieval = env.service.config.latency_s
    expected = backoff_s * (2**retries - 1) + (retries + 1) * failed_attempt_latency(env, rec, "transient") + retrieval
    assert rec.cost.latency_s == pytest.approx(expected)


@pytest.mark.parametrize("fault", ["timeout", "timeout_reported"])
def test_timeouts_are_retried_then_fail_charging_the_timeout(fault):
    env, _, _, _, info, rec = first_dispatch({"worker": [fault] * 3}, backend_timeout_s=5.0)
    assert rec.failed and rec.attempts == 3 and "Timeout" in info["call_error"]
    assert rec.cost.latency_s == pytest.approx(3 * 5.0 + 0.5 + 1.0 + env.service.config.latency_s)
    # one timeout, then an answer
    env, _, _, _, info, rec = first_dispatch({"worker": [fault]}, backend_timeout_s=5.0)
    assert not rec.failed and rec.attempts == 2 and env.episode.call_retries == 1


def test_a_call_slower_than_the_timeout_counts_as_failed():
    env, backend = make_env({"worker": ["slow"]}, backend_timeout_s=0.05)
    backend.sleep_s = 0.2
    env.reset(seed=0, options={"task_id": TASK_ID})
    _, _, _, _, info = env.step(1)
    rec = env.episode.trace[-1][3]
    assert rec.attempts == 2 and not rec.failed  # the slow reply was discarded, the retry answered
    assert backend.faults("worker") == ["slow", "ok"]
    env, backend = make_env({"worker": ["slow"]}, backend_timeout_s=0.05, backend_retries=0)
    backend.sleep_s = 0.2
    env.reset(seed=0, options={"task_id": TASK_ID})
    _, _, _, _, info = env.step(1)
    assert info["call_failed"] and "took" in info["call_error"] and "timeout 0.05" in info["call_error"]


@pytest.mark.parametrize("garbage", sorted(GARBAGE))
def test_garbage_replies_are_failed_calls_and_never_reach_the_episode(garbage):
    env, _, obs, reward, info, rec = first_dispatch({"worker": [f"garbage:{garbage}"]})
    assert rec.failed and info["call_failed"] and rec.attempts == 1  # garbage is not retried
    assert info["call_error"].startswith("InvalidGenerationError"), info["call_error"]
    assert rec.text == "" and rec.confidence is None and env.episode.plan.results[0] is None
    assert env.observation_space.contains(obs) and math.isfinite(reward)


class ReportingServer:
    """A backend that reports usage and latency as a server would (numpy numbers included) and no confidence."""

    def __init__(self, inner):
        self.inner = inner

    def complete(self, request):
        reply = self.inner.complete(request)
        if request.role != "worker":
            return reply
        return replace(reply, prompt_tokens=np.int64(321), completion_tokens=7, latency_s=np.float32(0.25), confidence=None)


def test_reported_usage_is_charged_and_a_missing_confidence_is_shown_as_missing():
    cfg = EDOConfig.from_kwargs(tasks=SMALL_TASKS)
    env = EDOEnv(cfg, backend=ReportingServer(simulated_backend(cfg)))
    env.reset(seed=0, options={"task_id": TASK_ID})
    obs, _, _, _, info = env.step(1)
    rec = env.episode.trace[-1][3]
    assert not info["call_failed"] and rec.confidence is None
    assert (rec.cost.prompt_tokens, rec.cost.completion_tokens) == (321, 7)
    assert type(rec.cost.latency_s) is float
    assert rec.cost.latency_s == pytest.approx(0.25 + env.service.config.latency_s)
    assert obs["subtasks"][0, obs_lib.C_DONE] == 1
    assert obs["subtasks"][0, obs_lib.C_CONF_GIVEN] == 0 and obs["subtasks"][0, obs_lib.C_CONF] == 0
    assert obs["plan"][obs_lib.P_LAST_CONF_GIVEN] == 0


def test_validate_response_accepts_numpy_numbers_and_returns_plain_types():
    res = validate_response(LLMResponse("42", np.int64(3), np.int32(5), np.float64(1.5), np.float32(0.5)))
    assert type(res.prompt_tokens) is int and type(res.completion_tokens) is int
    assert type(res.latency_s) is float and type(res.confidence) is float
    clean = LLMResponse("42", 3, 5, 1.5, 0.5)
    assert validate_response(clean) is clean
    for bad in (LLMResponse("x", completion_tokens=10**7), LLMResponse("x", confidence=np.float32("nan"))):
        with pytest.raises(InvalidGenerationError):
            validate_response(bad)


def test_call_backend_never_raises_an_exception():
    class Weird(Exception):
        def __str__(self):
            raise RuntimeError("no message for you")

    def boom():
        raise Weird()

    out = call_backend(boom, validate_response, RetryPolicy())
    assert isinstance(out, CallOutcome) and out.failed and out.error.startswith("Weird") and out.attempts == 1
    with pytest.raises(KeyboardInterrupt):  # not an Exception: it must still stop the program

        def interrupt():
            raise KeyboardInterrupt

        call_backend(interrupt, validate_response, RetryPolicy())


# -- verifier call faults -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("schedule", "attempts", "error"),
    [
        (["error"], 1, "RuntimeError: verifier backend exploded"),
        (["garbage:str"], 1, "InvalidGenerationError"),
        (["garbage:none"], 1, "InvalidGenerationError"),
        (["garbage:conf_nan"], 1, "InvalidGenerationError"),
        (["transient"] * 3, 3, "TransientBackendError"),
        (["timeout"] * 3, 3, "TimeoutError"),
    ],
)
def test_verifier_call_failures_are_charged_and_record_no_verdict(schedule, attempts, error):
    env, backend = make_env()
    checker = EpisodeChecker()
    _, info = reset_checked(env, checker)
    _, _, _, _, info = step_checked(env, checker, info, 1)
    backend.inject("verifier", *schedule)
    obs, reward, _, _, info = step_checked(env, checker, info, env.A_VERIFY)
    check = env.episode.trace[-1][1]
    assert check.failed and check.verdict == "" and check.attempts == attempts == info["backend_attempts"]
    assert info["call_failed"] and info["call_error"].startswith(error) and check.error == info["call_error"]
    assert info["cost"]["calls"] == attempts and info["cost"]["tokens"] > 0 and info["cost"]["latency_s"] > 0
    assert reward < 0 and env.episode.failed_calls == 1 and env.episode.call_retries == attempts - 1
    # no verdict reaches the episode: the result is still unchecked
    assert env.episode.plan.verdicts[0] == [] and env.episode.worker_counts[:, 4][0] == 1
    row = obs["subtasks"][0]
    assert row[obs_lib.C_OK] == row[obs_lib.C_FLAG] == row[obs_lib.C_UNSURE] == row[obs_lib.C_NVERIFY] == 0
    assert obs["workers"][0, obs_lib.W_VERIFIED] > 0
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    assert f"verify step 1 by support_agent: call FAILED{tries}: {check.error}" in env.render()
    # another verifier checks it; the episode goes on
    _, _, _, _, info = step_checked(env, checker, info, env.A_VERIFY + 1)
    assert not info["call_failed"] and env.episode.plan.verdicts[0] == [env.episode.trace[-1][1].verdict]
    _, _, terminated, _, info = step_checked(env, checker, info, env.A_SUBMIT)
    assert terminated and info["episode_stats"]["failed_calls"] == 1


def verify_after_first_dispatch(verifier_faults=()):
    env, backend, *_ = first_dispatch()
    backend.inject("verifier", *verifier_faults)
    obs, _, _, _, info = env.step(env.A_VERIFY)
    return env, obs, info, env.episode.trace[-1][1]


def test_verifier_timeout_is_retried_and_the_retry_gives_the_clean_verdict():
    *_, ref = verify_after_first_dispatch()
    env, obs, info, check = verify_after_first_dispatch(["timeout"])
    assert not check.failed and not info["call_failed"] and check.attempts == 2 == info["backend_attempts"]
    assert (check.verdict, check.text, check.retrieved) == (ref.verdict, ref.text, ref.retrieved)
    assert check.cost.prompt_tokens == 2 * ref.cost.prompt_tokens
    assert check.cost.latency_s == pytest.approx(ref.cost.latency_s + 0.5 + env.config.backend_timeout_s)
    assert env.episode.plan.verdicts[0] == [ref.verdict] and env.episode.call_retries == 1


def test_a_verifier_reply_without_a_verdict_is_unsure():
    env, obs, info, check = verify_after_first_dispatch(["text:no_verdict"])
    assert not check.failed and check.verdict == "unsure" and check.text == BAD_TEXTS["no_verdict"]
    assert env.episode.plan.verdicts[0] == ["unsure"] and env.episode.failed_calls == 0
    assert obs["subtasks"][0, obs_lib.C_UNSURE] == 1.0 and obs["plan"][obs_lib.P_LAST_UNSURE] == 1.0
    assert obs["subtasks"][0, obs_lib.C_OK] == obs["subtasks"][0, obs_lib.C_FLAG] == 0.0


def test_a_failed_verification_leaves_the_result_unchecked_by_that_worker():
    env, backend, *_ = first_dispatch({"verifier": ["error"]})
    _, _, _, _, info = env.step(env.A_VERIFY)
    assert info["call_failed"] and env.episode.plan.verdicts[0] == []
    assert info["action_mask"][env.A_VERIFY] == 1  # unchecked: the same worker may verify again
    _, _, _, _, info = env.step(env.A_VERIFY)
    assert not info["call_failed"] and len(env.episode.plan.verdicts[0]) == 1


def test_a_verifier_whose_retriever_fails_reports_the_fallback():
    env, backend, *_ = first_dispatch()
    env.workers[0].retriever = FailingRetriever(env.workers[0].retriever)
    _, _, _, _, info = env.step(env.A_VERIFY)
    assert not info["call_failed"] and env.episode.trace[-1][1].retrieved == ()
    assert info["retrieval_fallback"] is True and env.episode.retrieval_fallbacks == 1


# -- planner faults -------------------------------------------------------------------------------------------------
def test_malformed_plan_json_gets_one_repair_call_and_both_are_charged():
    """The simulated planner itself cuts its JSON off (``malformed_rate=1``); the repair request does not."""
    env, backend = make_env(planner_malformed_rate=1.0)
    checker = EpisodeChecker()
    obs, info = reset_checked(env, checker)
    planner = [r for r in backend.requests if r.role == "planner"]
    assert len(planner) == 2 and planner[0].instruction == PLAN_INSTRUCTION
    assert planner[1].instruction.startswith("Your previous plan was invalid (invalid JSON")
    assert env.episode.plan.source == "repaired" and obs["plan"][obs_lib.P_REPAIRED] == 1.0
    _, _, _, _, info = step_checked(env, checker, info, 1)
    assert info["cost"]["calls"] == 2 + env.episode.trace[-1][3].attempts  # both planner calls, then the dispatch
    assert "repaired" in env.render()


@pytest.mark.parametrize("bad", BAD_PLANS)
def test_an_invalid_plan_is_repaired_with_the_error_quoted(bad):
    env, backend = make_env({"planner": [f"text:{bad}"]})
    checker = EpisodeChecker()
    obs, info = reset_checked(env, checker)
    with pytest.raises(PlanError) as excinfo:
        parse_plan(BAD_TEXTS[bad], env.config.max_subtasks)
    first, repair = backend.requests
    assert first.instruction == PLAN_INSTRUCTION
    assert repair.instruction == REPAIR_INSTRUCTION.format(error=str(excinfo.value))
    assert repair.seed != first.seed  # a fresh sample, not the same reply again
    assert env.episode.plan.source == "repaired" and obs["plan"][obs_lib.P_REPAIRED] == 1.0
    assert obs["plan"][obs_lib.P_FALLBACK] == 0.0 and env.episode.failed_calls == 0  # a bad plan is not a failed call
    step_checked(env, checker, info, 1)


def test_two_invalid_plans_give_the_fallback_plan_of_the_tasks_shape_and_the_episode_goes_on():
    env, backend = make_env({"planner": ["text:prose", "text:cut_json"]})
    checker = EpisodeChecker()
    obs, info = reset_checked(env, checker)
    with pytest.raises(PlanError) as excinfo:
        parse_plan(BAD_TEXTS["cut_json"], env.config.max_subtasks)
    assert env.episode.trace[1] == ("plan_fallback", str(excinfo.value))
    # a support task: a lookup with the customer's message, then the reply written from it
    assert env.episode.plan.source == "fallback" and [s.label for s in env.episode.plan.steps] == ["lookup", "write"]
    assert env.episode.plan.steps[0].instruction == env.episode.task.text and env.episode.plan.steps[1].deps == (0,)
    assert obs["plan"][obs_lib.P_FALLBACK] == 1.0 and obs["plan"][obs_lib.P_CONF_GIVEN] == 0.0
    assert obs["plan"][obs_lib.P_LEN] == pytest.approx(2 / env.config.max_subtasks)
    assert obs["subtasks"][2:, obs_lib.C_PRESENT].sum() == 0
    assert "planner gave no valid plan" in env.render()
    # both planner calls are charged on the first step; the fallback plan is worked like any other
    _, reward, _, _, info = step_checked(env, checker, info, 1)
    assert info["cost"]["calls"] == 3 and reward < 0
    assert env.episode.plan.current_step == 1 and info["action_mask"][: env.n_dispatch].sum() > 0
    _, _, terminated, _, info = step_checked(env, checker, info, env.A_SUBMIT)
    assert terminated and info["episode_stats"]["failed_calls"] == 0 and info["episode_stats"]["calls"] == 3


def test_planner_call_failures_are_charged_and_counted_then_fall_back():
    env, backend = make_env({"planner": ["error", "garbage:none"]})
    checker = EpisodeChecker()
    obs, info = reset_checked(env, checker)
    first, repair = backend.requests
    assert repair.instruction.startswith("Your previous plan was invalid (RuntimeError: planner backend exploded")
    assert env.episode.plan.source == "fallback" and env.episode.trace[1][0] == "plan_fallback"
    assert env.episode.trace[1][1].startswith("InvalidGenerationError")
    assert env.episode.failed_calls == 2 and env.episode.call_retries == 0  # neither fault is transient
    tokens_a, latency_a = planner_attempt_cost(env, backend, first, "error")
    tokens_b, latency_b = planner_attempt_cost(env, backend, repair, "error")
    _, _, _, _, info = step_checked(env, checker, info, 0)  # worker 0, no retrieval
    rec = env.episode.trace[-1][3]
    assert info["cost"]["calls"] == 2 + rec.cost.calls
    assert info["cost"]["tokens"] == tokens_a + tokens_b + rec.cost.tokens
    assert info["cost"]["latency_s"] == pytest.approx(latency_a + latency_b + rec.cost.latency_s)
    _, _, _, _, info = step_checked(env, checker, info, env.A_SUBMIT)
    assert info["episode_stats"]["failed_calls"] == 2


@pytest.mark.parametrize(
    ("faults", "source", "failed", "retries"),
    [
        (["transient"], "planner", 0, 1),
        (["timeout", "timeout"], "planner", 0, 2),
        (["transient"] * 3, "repaired", 1, 2),
        (["transient"] * 3 + ["error"], "fallback", 2, 2),
    ],
)
def test_planner_transient_faults_are_retried_with_backoff_and_charged(faults, source, failed, retries):
    env, backend = make_env({"planner": faults}, backend_timeout_s=5.0)
    checker = EpisodeChecker()
    _, info = reset_checked(env, checker)
    assert env.episode.plan.source == source and (env.episode.failed_calls, env.episode.call_retries) == (failed, retries)
    assert backend.faults("planner") == faults + ["ok"] * (len(backend.requests) - len(faults))
    # every attempt is charged; every retry waited its back-off (0.5 s, then 1 s)
    charged = [
        planner_attempt_cost(env, backend, r, f) for r, f in zip(backend.requests, backend.faults("planner"), strict=True)
    ]
    backoff = [0.0, 0.5, 1.5][retries]
    _, _, _, _, info = step_checked(env, checker, info, 0)
    rec = env.episode.trace[-1][3]
    assert info["cost"]["calls"] == len(charged) + rec.cost.calls
    assert info["cost"]["tokens"] == sum(t for t, _ in charged) + rec.cost.tokens
    assert info["cost"]["latency_s"] == pytest.approx(backoff + sum(lat for _, lat in charged) + rec.cost.latency_s)


def test_replan_with_invalid_plans_falls_back_mid_episode_and_charges_the_planner():
    env, backend = make_env()
    checker = EpisodeChecker()
    _, info = reset_checked(env, checker)
    _, _, _, _, info = step_checked(env, checker, info, 1)
    assert env.episode.plan.results[0] is not None
    backend.inject("planner", "text:no_steps", "text:unknown_domain")
    obs, reward, _, _, info = step_checked(env, checker, info, env.A_REPLAN)
    assert [e[0] for e in env.episode.trace[-2:]] == ["plan_fallback", "replan"]
    assert (
        env.episode.plan.source == "fallback"
        and env.episode.plan.results == [None, None]
        and env.episode.plan.current_step == 0
    )
    assert info["event"] == "replan" and info["cost"]["calls"] == 2 and reward < 0
    assert obs["plan"][obs_lib.P_FALLBACK] == 1.0 and obs["plan"][obs_lib.P_REPLANS] > 0
    assert "planner gave no valid plan" in env.render()


#: A 4,012-character planner reply (well under ``MAX_RESULT_CHARS``) nested deeper than Python's recursion limit.
DEEPLY_NESTED_PLAN = '{"steps": [' + "[" * 2000 + "]" * 2000 + "]}"


def test_a_deeply_nested_planner_reply_is_an_invalid_plan_not_a_crash():
    class NestingPlanner:
        """Answers the first plan request with JSON nested deeper than Python's recursion limit."""

        def __init__(self, inner):
            self.inner, self.sent = inner, False

        def complete(self, request):
            if request.role == "planner" and not self.sent:
                self.sent = True
                return LLMResponse(DEEPLY_NESTED_PLAN)
            return self.inner.complete(request)

    cfg = EDOConfig.from_kwargs(tasks=SMALL_TASKS)
    env = EDOEnv(cfg, backend=NestingPlanner(simulated_backend(cfg)))
    env.reset(seed=0, options={"task_id": TASK_ID})
    assert env.episode.plan.source == "repaired"


def test_a_replan_whose_planner_calls_fail_reports_the_failure_in_info():
    env, backend = make_env()
    env.reset(seed=0, options={"task_id": TASK_ID})
    env.step(1)
    backend.inject("planner", "error", "error")
    _, _, _, _, info = env.step(env.A_REPLAN)
    assert info["cost"]["calls"] == 2 and env.episode.plan.source == "fallback"
    assert info["call_failed"] is True and info["call_error"].startswith("RuntimeError: planner backend exploded")
    assert info["backend_attempts"] == 2


# -- faults everywhere ----------------------------------------------------------------------------------------------
def test_failures_do_not_leak_into_the_next_episode():
    env, backend = make_env()
    backend.rate = 0.6
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=1)
    for _ in range(200):
        obs, _, terminated, truncated, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        if terminated or truncated:
            break
    assert env.episode.failed_calls + env.episode.call_retries > 0
    backend.rate = 0.0
    checker = EpisodeChecker()
    obs, info = env.reset(seed=2)
    checker.after_reset(env, obs, info)
    assert (env.episode.failed_calls, env.episode.call_retries, env.episode.retrieval_fallbacks) == (0, 0, 0)
    assert env.episode.plan.source == "planner"
    assert "failed calls" not in env.render() and "retries" not in env.render()
    mask = info["action_mask"]
    obs, reward, terminated, truncated, info = env.step(1)
    checker.after_step(env, 1, mask, obs, reward, terminated, truncated, info)
    assert (info["call_failed"], info["call_error"], info["backend_attempts"], info["retrieval_fallback"]) == (
        False,
        "",
        1,
        False,
    )


def test_random_faults_everywhere_keep_every_invariant():
    env, backend = make_env(retrieval_decider="orchestrator", max_steps=40)
    backend.rate = 0.3  # planner, worker and verifier calls alike
    for i, w in enumerate(env.workers):
        w.retriever = FailingRetriever(w.retriever, mode=("raise", "bad_ids")[i % 2], rate=0.3, seed=i)
    rng = np.random.default_rng(5)
    checker = EpisodeChecker()
    totals = {"failed": 0, "fallbacks": 0, "episodes": 0}
    sources, events = set(), set()
    for episode in range(25):
        obs, info = env.reset(seed=episode)
        checker.after_reset(env, obs, info)
        sources.add(env.episode.plan.source)
        while True:
            mask = info["action_mask"]
            a = int(rng.choice(np.flatnonzero(mask))) if rng.random() < 0.9 else int(rng.integers(env.n_actions))
            obs, reward, terminated, truncated, info = env.step(a)
            checker.after_step(env, a, mask, obs, reward, terminated, truncated, info)
            events.add(info["event"])
            if info["event"] == "replan":
                sources.add(env.episode.plan.source)
            if terminated or truncated:
                totals["failed"] += info["episode_stats"]["failed_calls"]
                totals["fallbacks"] += info["episode_stats"]["retrieval_fallbacks"]
                totals["episodes"] += 1
                break
        assert env.render().splitlines()[-1].startswith("  totals:")
    assert totals["failed"] > 0 and totals["fallbacks"] > 0
    for faults in (("error",), ("transient", "timeout", "timeout_reported")):  # failures and retries in every role
        assert {role for role, fault in backend.log if fault in faults} == {"planner", "worker", "verifier"}
    assert sources >= {"planner", "repaired"} and events >= {"dispatch", "verify", "rollback", "replan", "submit"}


def test_backend_must_implement_the_interface():
    with pytest.raises(TypeError, match="backend must implement LLMBackend"):
        EDOEnv(backend=object(), tasks=SMALL_TASKS)


@pytest.mark.parametrize(
    ("field", "value", "exc"),
    [
        ("backend_retries", -1, ValueError),
        ("backend_retries", 11, ValueError),
        ("backend_retries", 1.5, TypeError),
        ("backend_retries", True, TypeError),
        ("backend_backoff_s", -0.1, ValueError),
        ("backend_backoff_s", math.nan, ValueError),
        ("backend_backoff_s", "1", TypeError),
        ("backend_timeout_s", 0, ValueError),
        ("backend_timeout_s", math.inf, ValueError),
        ("backend_timeout_s", None, TypeError),
    ],
)
def test_backend_config_fields_are_validated(field, value, exc):
    with pytest.raises(exc, match=f"EDOConfig.{field}"):
        EDOEnv(**{field: value})


# -- retriever faults ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["raise", "bad_ids"])
def test_retriever_failure_falls_back_to_answering_without_retrieval(mode):
    *_, plain = first_dispatch(action=0)  # worker 0 without retrieval
    env, _ = make_env()
    env.workers[0].retriever = FailingRetriever(env.workers[0].retriever, mode=mode)
    checker = EpisodeChecker()
    _, info = reset_checked(env, checker)
    obs, _, _, _, info = step_checked(env, checker, info, 1)  # worker 0 with retrieval
    rec = env.episode.trace[-1][3]
    assert info["retrieval_fallback"] is True and info["call_failed"] is False
    assert env.episode.retrieval_fallbacks == 1 and not rec.used_retrieval and rec.retrieved == ()
    assert rec.retrieval_error.startswith("InternalError" if mode == "raise" else "retriever returned unknown")
    # it answered exactly as without retrieval, and paid for the retrieval it tried
    assert (rec.text, rec.cost.prompt_tokens, rec.cost.completion_tokens) == (
        plain.text,
        plain.cost.prompt_tokens,
        plain.cost.completion_tokens,
    )
    assert rec.cost.latency_s == pytest.approx(plain.cost.latency_s + env.service.config.latency_s)
    assert obs["subtasks"][0, obs_lib.C_RETR] == 0.0
    assert "retrieval FAILED" in env.render() and "1 retrieval fallbacks" in env.render()
    _, _, terminated, _, info = step_checked(env, checker, info, env.A_SUBMIT)
    assert terminated and info["episode_stats"]["retrieval_fallbacks"] == 1


def test_chromadb_error_in_a_real_shard_retriever():
    env, _ = make_env(retrieval_decider="worker")
    real = env.workers[0].retriever
    broken = ShardRetriever(BrokenCollection(real.size), real.encoder, real.domains, 16)
    env.workers[0].retriever = broken
    env.reset(seed=0, options={"task_id": TASK_ID})  # step 1 is a shipping lookup, in worker 0's shard
    _, _, _, _, info = env.step(0)
    assert info["retrieval_fallback"] and "malformed" in env.episode.trace[-1][3].retrieval_error
    assert len(broken.memo) == 0  # a failure is never memoised
    env.workers[0].retriever = real
    env.step(env.A_ROLLBACK)
    _, _, _, _, info = env.step(0)
    assert not info["retrieval_fallback"] and env.episode.trace[-1][3].retrieved


def _flaky_lazy_retriever(env) -> tuple[ShardRetriever, list[int]]:
    """Put in worker 0's place a lazily built copy of its retriever whose first build fails (chromadb "database is
    locked"); later builds return the real collection. Returns the copy and the list of build attempts."""
    real = env.workers[0].retriever
    builds: list[int] = []

    def flaky_build():
        builds.append(1)
        if len(builds) == 1:
            raise chromadb.errors.InternalError("could not create collection: database is locked")
        return real._collection()  # built once, kept by the real retriever too

    lazy = ShardRetriever(None, real.encoder, real.domains, 16, factory=flaky_build, size=real.size, vectors=real.vectors)
    env.workers[0].retriever = lazy
    return lazy, builds


def test_a_shard_collection_that_cannot_be_built_is_retried_at_the_next_search():
    """Built at the first search (``index_at_reset=False``), a build that fails is a fallback, and is tried again."""
    env, _ = make_env(retrieval_decider="worker", retrieval={"index_at_reset": False})
    real = env.workers[0].retriever
    lazy, builds = _flaky_lazy_retriever(env)
    env.reset(seed=0, options={"task_id": TASK_ID})
    _, _, _, _, info = env.step(0)
    assert info["retrieval_fallback"] and "database is locked" in env.episode.trace[-1][3].retrieval_error
    assert lazy.collection is None and len(builds) == 1
    env.step(env.A_ROLLBACK)
    _, _, _, _, info = env.step(0)
    rec = env.episode.trace[-1][3]
    assert not info["retrieval_fallback"] and len(builds) == 2 and lazy.collection is not None
    assert rec.retrieved == real.search(rec.instruction, env.config.workers[0].top_k)


def test_a_shard_collection_that_cannot_be_built_at_reset_warns_and_is_built_at_the_first_search():
    """Built at the first reset (the default), a build that fails there warns, and the first search builds it."""
    env, _ = make_env(retrieval_decider="worker")
    real = env.workers[0].retriever
    lazy, builds = _flaky_lazy_retriever(env)
    with pytest.warns(RuntimeWarning, match=r"worker 0 \(support_agent\) at reset: InternalError: .*database is locked"):
        env.reset(seed=0, options={"task_id": TASK_ID})
    assert lazy.collection is None and len(builds) == 1
    _, _, _, _, info = env.step(0)
    rec = env.episode.trace[-1][3]
    assert not info["retrieval_fallback"] and len(builds) == 2 and lazy.collection is not None
    assert rec.retrieved == real.search(rec.instruction, env.config.workers[0].top_k)


# -- on-disk embedding cache ----------------------------------------------------------------------------------------
TEXTS = [f"document number {i} about {w}" for i, w in enumerate(["cats", "dogs", "ships", "trains", "maps"] * 4)]
MODEL = "test-model==1"


class CountingBuild:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, texts):
        self.calls += 1
        return det_vectors(texts)


def cache_file(directory: Path, texts=TEXTS, model=MODEL) -> Path:
    return EmbeddingCache(directory).path_for("corpus", model, texts_hash(texts))


def write_npz(path: Path, vectors: np.ndarray, header: dict) -> None:
    with open(path, "wb") as fh:
        np.savez(fh, vectors=vectors, header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8))


def good_header(vectors, model=MODEL, texts=TEXTS):
    return {
        "format": 1,
        "model_id": model,
        "content_hash": texts_hash(texts),
        "shape": list(vectors.shape),
        "sha256": hashlib.sha256(vectors.tobytes()).hexdigest(),
    }


def _damage(kind: str, path: Path, tmp: Path) -> None:
    truth = det_vectors(TEXTS)
    if kind == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "garbage_bytes":
        path.write_bytes(os.urandom(3000))
    elif kind == "flipped_vector_byte":  # the zip is rewritten valid, the vectors are wrong: checksum mismatch
        bad = truth.copy()
        bad[3, 5] += 0.25
        write_npz(path, bad, good_header(truth))
    elif kind == "other_model":
        other = cache_file(tmp / "other", model="other-model==2")
        EmbeddingCache(tmp / "other").load_or_build("corpus", "other-model==2", TEXTS, lambda t: det_vectors(t) * -1)
        shutil.copy(other, path)
    elif kind == "other_corpus":
        texts = TEXTS[:-1] + ["a new version of the last document"]
        EmbeddingCache(tmp / "other").load_or_build("corpus", MODEL, texts, det_vectors)
        shutil.copy(cache_file(tmp / "other", texts=texts), path)
    elif kind == "non_finite":
        bad = truth.copy()
        bad[0, 0] = np.nan
        write_npz(path, bad, good_header(bad))
    elif kind == "wrong_shape":
        bad = truth[:-2]
        write_npz(path, bad, good_header(bad))
    elif kind == "old_format":
        write_npz(path, truth, {**good_header(truth), "format": 0})
    elif kind == "header_not_json":
        with open(path, "wb") as fh:
            np.savez(fh, vectors=truth, header=np.frombuffer(b"\xff{not json", dtype=np.uint8))
    elif kind == "missing_vectors":
        with open(path, "wb") as fh:
            np.savez(fh, header=np.frombuffer(json.dumps(good_header(truth)).encode(), dtype=np.uint8))
    elif kind == "pickled_object_array":
        with open(path, "wb") as fh:
            np.savez(fh, vectors=np.array([object()] * 3, dtype=object), header=np.zeros(3, dtype=np.uint8))
    elif kind == "directory":
        path.unlink()
        path.mkdir()
    else:
        raise AssertionError(kind)


DAMAGES = [
    "truncated",
    "empty",
    "garbage_bytes",
    "flipped_vector_byte",
    "other_model",
    "other_corpus",
    "non_finite",
    "wrong_shape",
    "old_format",
    "header_not_json",
    "missing_vectors",
    "pickled_object_array",
    "directory",
]


def test_cache_round_trip(tmp_path):
    build = CountingBuild()
    first = EmbeddingCache(tmp_path).load_or_build("corpus", MODEL, TEXTS, build)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = EmbeddingCache(tmp_path).load_or_build("corpus", MODEL, TEXTS, build)
    assert build.calls == 1 and np.array_equal(first, second) and np.array_equal(first, det_vectors(TEXTS))
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".lock", ".npz"]


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_cache_is_detected_and_rebuilt(tmp_path, damage):
    EmbeddingCache(tmp_path).load_or_build("corpus", MODEL, TEXTS, det_vectors)
    path = cache_file(tmp_path)
    _damage(damage, path, tmp_path)
    build = CountingBuild()
    if damage == "directory":  # cannot be replaced by a file: detected, then kept in memory
        with pytest.warns(CacheWarning) as record:
            vectors = EmbeddingCache(tmp_path).load_or_build("corpus", MODEL, TEXTS, build)
        assert any("ignoring embedding cache" in str(w.message) for w in record)
        assert any("keeping vectors in memory" in str(w.message) for w in record)
        assert np.array_equal(vectors, det_vectors(TEXTS)) and build.calls == 1
        return
    with pytest.warns(CacheWarning, match="ignoring embedding cache .*rebuilding it"):
        vectors = EmbeddingCache(tmp_path).load_or_build("corpus", MODEL, TEXTS, build)
    assert build.calls == 1 and np.array_equal(vectors, det_vectors(TEXTS))  # never the wrong vectors
    with warnings.catch_warnings():  # the rebuilt file is valid
        warnings.simplefilter("error")
        again = EmbeddingCache(tmp_path).load_or_build("corpus", MODEL, TEXTS, build)
    assert build.calls == 1 and np.array_equal(again, vectors)
    assert not list(tmp_path.glob("*.tmp"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_randomly_damaged_cache_never_yields_wrong_vectors(tmp_path_factory, data):
    directory = tmp_path_factory.mktemp("cache")
    EmbeddingCache(directory).load_or_build("corpus", MODEL, TEXTS, det_vectors)
    path = cache_file(directory)
    raw = bytearray(path.read_bytes())
    how = data.draw(st.sampled_from(["truncate", "flip", "overwrite"]))
    if how == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    else:
        for _ in range(data.draw(st.integers(1, 4))):
            pos = data.draw(st.integers(0, len(raw) - 1))
            raw[pos] = (raw[pos] ^ data.draw(st.integers(1, 255))) if how == "flip" else data.draw(st.integers(0, 255))
    path.write_bytes(bytes(raw))
    build = CountingBuild()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheWarning)
        vectors = EmbeddingCache(directory).load_or_build("corpus", MODEL, TEXTS, build)
    assert np.array_equal(vectors, det_vectors(TEXTS))  # loaded intact, or rebuilt: never wrong


def test_cache_dir_under_a_regular_file_runs_from_memory(tmp_path):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("I am a file")
    build = CountingBuild()
    with pytest.warns(CacheWarning, match="not writable.*keeping corpus embeddings in memory"):
        vectors = EmbeddingCache(blocker / "cache").load_or_build("corpus", MODEL, TEXTS, build)
    assert build.calls == 1 and np.array_equal(vectors, det_vectors(TEXTS))
    assert blocker.read_text() == "I am a file"


def test_cache_write_refused_runs_from_memory(tmp_path, monkeypatch):
    def refuse(src, dst):
        raise PermissionError(13, "Permission denied", str(dst))

    monkeypatch.setattr("edo_gym.retrieval.cache.os.replace", refuse)
    with pytest.warns(CacheWarning, match="could not write embedding cache .*keeping vectors in memory"):
        vectors = EmbeddingCache(tmp_path).load_or_build("corpus", MODEL, TEXTS, det_vectors)
    assert np.array_equal(vectors, det_vectors(TEXTS))
    assert not list(tmp_path.glob("*.npz")) and not list(tmp_path.glob("*.tmp"))  # nothing half-written left


def test_cache_lock_refused_runs_from_memory(tmp_path, monkeypatch):
    class NoLock:
        def acquire(self):
            raise PermissionError(13, "Permission denied", "x.lock")

    monkeypatch.setattr(EmbeddingCache, "_lock", lambda self, path: NoLock())
    with pytest.warns(CacheWarning, match="not writable"):
        vectors = EmbeddingCache(tmp_path).load_or_build("corpus", MODEL, TEXTS, det_vectors)
    assert np.array_equal(vectors, det_vectors(TEXTS))


def test_stale_temporaries_of_a_dead_writer_are_removed(tmp_path):
    path = cache_file(tmp_path)
    stale = tmp_path / (path.name + ".abc123.tmp")
    stale.write_bytes(b"half a file")
    EmbeddingCache(tmp_path).load_or_build("corpus", MODEL, TEXTS, det_vectors)
    assert not stale.exists() and path.exists()


def test_build_returning_a_wrong_shape_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="embedding build returned shape"):
        EmbeddingCache(tmp_path).load_or_build("corpus", MODEL, TEXTS, lambda t: np.zeros((len(t) + 1, 4)))


def test_env_rebuilds_a_damaged_task_cache(tmp_path, world, default_service, shared_embedder):
    """End to end: a copy of the real cache with the task-embedding file damaged; the env warns and rebuilds it."""
    src = default_service.cache.directory
    for f in src.glob("*.npz"):
        if f.name.startswith(("corpus-", "queries-")):
            shutil.copy(f, tmp_path / f.name)
    tasks = TaskConfig(n_tasks=20, seed=5)
    pool_texts = [t.text for t in EDOEnv(tasks=tasks).pool.tasks]  # built with the default cache dir
    truth = default_service.embed_texts("tasks", pool_texts)
    path = EmbeddingCache(tmp_path).path_for("tasks", default_service.model_id, texts_hash(pool_texts))
    write_npz(path, truth[::-1].copy(), good_header(truth[::-1].copy(), default_service.model_id, pool_texts[::-1]))
    with pytest.warns(CacheWarning, match="different texts"):
        env = EDOEnv(tasks=tasks, retrieval={"cache_dir": str(tmp_path)})
    got = env.service.embed_texts("tasks", pool_texts)
    np.testing.assert_allclose(got, truth, atol=1e-5)
    env.reset(seed=0)
    env.step(1)


@pytest.mark.slow
def test_env_rebuilds_damaged_corpus_and_query_caches(tmp_path, world, default_service, shared_embedder):
    """End to end, with real re-embedding: a truncated corpus file and a query file from another model."""
    src = default_service.cache.directory
    corpus = [d.text for d in world.documents]
    queries = world.canonical_queries()
    model_id = default_service.model_id
    corpus_path = EmbeddingCache(tmp_path).path_for("corpus", model_id, texts_hash(corpus))
    query_path = EmbeddingCache(tmp_path).path_for("queries", model_id, texts_hash(queries))
    shutil.copy(EmbeddingCache(src).path_for("corpus", model_id, texts_hash(corpus)), corpus_path)
    corpus_path.write_bytes(corpus_path.read_bytes()[:100_000])
    foreign = default_service.encoders[0].canonical_vectors[::-1].copy()
    write_npz(query_path, foreign, good_header(foreign, "some-other-model==9", queries))
    with pytest.warns(CacheWarning) as record:
        env = EDOEnv(tasks=SMALL_TASKS, retrieval={"cache_dir": str(tmp_path)})
    messages = " ".join(str(w.message) for w in record)
    assert "unreadable" in messages and "written by model 'some-other-model==9'" in messages
    np.testing.assert_allclose(env.service.doc_vectors, default_service.doc_vectors, atol=1e-5)
    np.testing.assert_allclose(
        env.service.encoders[0].canonical_vectors, default_service.encoders[0].canonical_vectors, atol=1e-5
    )
    queries_sample = _queries(world)
    assert _results(env.service, queries_sample) == _results(default_service, queries_sample)


@pytest.mark.slow
def test_env_runs_from_memory_when_the_cache_dir_cannot_be_created(tmp_path, world, default_service, shared_embedder):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    with pytest.warns(CacheWarning, match="not writable"):
        env = EDOEnv(tasks=SMALL_TASKS, retrieval={"cache_dir": str(blocker / "cache")})
    np.testing.assert_allclose(env.service.doc_vectors, default_service.doc_vectors, atol=1e-5)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(1)
    assert math.isfinite(reward) and not info["call_failed"]
    assert blocker.read_text() == "not a directory"


# -- persistent chromadb directory ----------------------------------------------------------------------------------
def _queries(world, n=12):
    return world.canonical_queries()[:: max(1, len(world.canonical_queries()) // n)][:n]


def _results(service, queries):
    return [[r.search(q, 3) for r in service.retrievers] for q in queries]


def test_incomplete_persistent_collections_are_detected_and_rebuilt(tmp_path, world, default_service, shared_embedder):
    shards = [w.shard for w in default_workers()]
    cfg = RetrievalConfig(chroma_dir=str(tmp_path / "chroma"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fresh directory builds without complaint
        first = RetrievalService(world, cfg, shards)
    collections = {id(r.collection): r.collection for r in first.retrievers}
    a, b, c = list(collections.values())[:3]
    n_a = a.count()
    a.modify(metadata={"edo_complete": False, "edo_count": n_a})  # killed after the adds, before the mark
    ids_b = b.get(include=[])["ids"]
    b.delete(ids=ids_b[: len(ids_b) // 2])  # marked complete but vectors lost
    first.client.delete_collection(c.name)  # killed half-way through the adds: no mark at all
    part = c.name
    cc = first.client.create_collection(part, embedding_function=None, metadata={"edo_count": 5})
    cc.add(ids=["0", "1"], embeddings=first.doc_vectors[[0, 1]])
    with pytest.warns(UserWarning, match="incomplete") as record:
        second = RetrievalService(world, cfg, shards)
    assert sum("incomplete" in str(w.message) for w in record) == 3
    for r in second.retrievers:
        meta = r.collection.metadata
        assert meta["edo_complete"] is True and r.collection.count() == meta["edo_count"] == r.size
    queries = _queries(world)
    assert _results(second, queries) == _results(default_service, queries)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # now complete: reused as they are
        third = RetrievalService(world, cfg, shards)
    assert _results(third, queries) == _results(default_service, queries)


_KILLED_BUILD = textwrap.dedent(
    """
    import os, sys, time
    os.environ["HF_HUB_OFFLINE"] = "1"
    import chromadb.api.models.Collection as C
    import edo_gym.retrieval.service as service
    from edo_gym.config import RetrievalConfig, WorldConfig, default_workers
    from edo_gym.envs.edo_env import shared_world
    from edo_gym.retrieval.embedder import resolve_model

    class StubEmbedder:  # the corpus vectors come from the cache; no model needed to build collections
        dim = 384
        def __init__(self, model="default", **kw):
            self.model_id = resolve_model(model)[1]
        def count_tokens(self, texts):
            return [len(t.split()) for t in texts]
        def encode(self, texts):
            raise AssertionError("the cache must be warm")

    service.Embedder = StubEmbedder
    make_client = service.chroma_client
    def small_batches(chroma_dir):
        client = make_client(chroma_dir)
        client.get_max_batch_size = lambda: 50
        return client
    service.chroma_client = small_batches
    add = C.Collection.add
    def slow_add(self, *a, **k):
        add(self, *a, **k)
        print("ADDED", self.name, self.count(), flush=True)
        time.sleep(600)
    C.Collection.add = slow_add
    service.RetrievalService(shared_world(WorldConfig()), RetrievalConfig(cache_dir=sys.argv[2], chroma_dir=sys.argv[1]),
                           [w.shard for w in default_workers()])
    """
)


def test_build_killed_mid_way_is_redone_at_the_next_start(tmp_path, world, default_service, shared_embedder):
    chroma_dir = tmp_path / "chroma"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_BUILD, str(chroma_dir), str(default_service.cache.directory)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        line = ""
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("ADDED") or not line:
                break
        assert line.startswith("ADDED"), f"child never started adding: {line!r} {proc.stderr.read()[-2000:]}"
        name, count = line.split()[1], int(line.split()[2])
        assert count == 50
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    cfg = RetrievalConfig(chroma_dir=str(chroma_dir))
    shards = [w.shard for w in default_workers()]
    with pytest.warns(UserWarning, match=f"collection {name} is incomplete"):
        service = RetrievalService(world, cfg, shards)
    for r in service.retrievers:
        assert r.collection.metadata["edo_complete"] is True and r.collection.count() == r.size
    queries = _queries(world)
    assert _results(service, queries) == _results(default_service, queries)

"""Injected faults: a failing generation backend, a failing retriever, a damaged embedding cache, an interrupted
persistent chromadb build. In each case the env records the fault, charges what it cost, and keeps going.

Fault injection uses real classes behind the real interfaces (``tests/reliability_helpers.py``): a
``GenerationBackend`` wrapping ``SimulatedBackend``, a retriever / chromadb collection that raises chromadb errors.
Read-only cache directories are simulated without ``chmod`` (the tests may run as root, which ignores file
modes): a cache path under a regular file, an ``os.replace`` that raises ``PermissionError``, a lock that cannot
be taken.
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
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import edo_gym.retrieval.store as store_mod
from edo_gym.agents.backend import (
    CallOutcome,
    GenerationResult,
    InvalidGenerationError,
    RetryPolicy,
    SimulatedBackend,
    call_backend,
    validate_result,
)
from edo_gym.agents.worker import LATENCY_MODEL
from edo_gym.config import EDOConfig, RetrievalConfig, TaskConfig, WorldConfig, default_workers
from edo_gym.envs import observation as obs_lib
from edo_gym.envs.edo_env import EDOEnv, _world
from edo_gym.retrieval.cache import CacheWarning, EmbeddingCache, texts_hash
from edo_gym.retrieval.store import RetrievalService, ShardRetriever

try:
    from tests.reliability_helpers import (
        GARBAGE,
        BrokenCollection,
        EpisodeChecker,
        FailingRetriever,
        FaultyBackend,
        det_vectors,
    )
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from reliability_helpers import (  # type: ignore[no-redef]
        GARBAGE,
        BrokenCollection,
        EpisodeChecker,
        FailingRetriever,
        FaultyBackend,
        det_vectors,
    )

SMALL_TASKS = {"n_tasks": 40}
TASK_ID = 3


@pytest.fixture(scope="module")
def world():
    return _world(WorldConfig())


@pytest.fixture(scope="module")
def default_service(world):
    return RetrievalService.get(world, RetrievalConfig(), [w.shard for w in default_workers()])


@pytest.fixture
def shared_embedder(monkeypatch, default_service):
    """New ``RetrievalService`` instances reuse the already loaded model (keeps these tests fast)."""
    embedder = default_service.embedders[0]
    monkeypatch.setattr(store_mod, "Embedder", lambda model="default", **kw: embedder)
    return embedder


def make_env(world, schedule=(), **kwargs):
    cfg = EDOConfig.from_kwargs(**{"tasks": SMALL_TASKS, **kwargs})
    backend = FaultyBackend(SimulatedBackend(world, cfg.verify_recall, cfg.verify_false_alarm), schedule)
    env = EDOEnv(cfg, render_mode="ansi", backend=backend)
    return env, backend


def first_dispatch(world, schedule=(), action=1, **kwargs):
    """Reset to a fixed task and dispatch its first step (action 1 = worker 0 with retrieval)."""
    env, backend = make_env(world, schedule, **kwargs)
    env.reset(seed=0, options={"task_id": TASK_ID})
    obs, reward, terminated, truncated, info = env.step(action)
    return env, backend, obs, reward, info, env.trace[-1]


def failed_attempt_latency(env, record, kind):
    base, per_prompt, _ = LATENCY_MODEL[env.config.workers[record.worker].size]
    return env.config.backend_timeout_s if kind == "timeout" else base + per_prompt * (record.prompt_tokens / record.attempts)


# -- generation backend faults ------------------------------------------------------------------------------------
def test_raising_backend_is_a_charged_failed_call_and_the_episode_goes_on(world):
    env, backend, obs, reward, info, event = first_dispatch(world, ["error"])
    assert info["call_failed"] is True and info["event"] == "dispatch"
    assert info["call_error"].startswith("RuntimeError: backend exploded")
    assert info["backend_attempts"] == 1  # a non-transient error is not retried
    assert info["cost"]["calls"] == 1 and info["cost"]["tokens"] > 0 and info["cost"]["latency_s"] > 0
    assert reward < 0 and math.isfinite(reward)
    rec = event[3]
    assert event[0] == "dispatch" and rec.failed and rec.text == "" and rec.completion_tokens == 0
    assert env.failed_calls == 1 and env.calls == 1
    # the step stays undone and current; the attempt is visible in the observation
    assert env.results[0] is None and env.current_step == 0 and env.attempts[0] == 1
    assert obs["subtasks"][0, obs_lib.C_DONE] == 0 and obs["subtasks"][0, obs_lib.C_CURRENT] == 1
    assert obs["subtasks"][0, obs_lib.C_ATTEMPTS] > 0 and obs["workers"][0, -3] > 0
    text = env.render()
    assert "call FAILED: RuntimeError: backend exploded" in text and "1 failed calls" in text
    # the backend recovers: the same step can be dispatched again, and the episode ends normally
    _, _, _, _, info = env.step(1)
    assert not info["call_failed"] and env.results[0] is not None
    _, _, terminated, _, info = env.step(env.A_SUBMIT)
    assert terminated and info["episode_stats"]["failed_calls"] == 1 and info["episode_stats"]["calls"] == 2


def test_transient_errors_are_retried_with_backoff_and_charged(world):
    _, _, _, _, clean_info, clean = first_dispatch(world, [])
    env, backend, _, _, info, event = first_dispatch(world, ["transient", "transient"])
    rec, ref = event[3], clean[3]
    assert backend.generate_log == ["transient", "transient", "ok"]
    assert not rec.failed and info["call_failed"] is False and info["call_error"] is None
    assert rec.attempts == 3 and info["backend_attempts"] == 3 and info["cost"]["calls"] == 3
    assert env.call_retries == 2 and env.failed_calls == 0
    # the fault-free attempt answers exactly as the clean run; every attempt sent the prompt
    assert (rec.text, rec.confidence, rec.retrieved) == (ref.text, ref.confidence, ref.retrieved)
    assert rec.prompt_tokens == 3 * ref.prompt_tokens and rec.completion_tokens == ref.completion_tokens
    backoff = 0.5 + 1.0  # default backend_backoff_s, doubling
    expected = ref.latency_s + backoff + 2 * failed_attempt_latency(env, rec, "transient")
    assert rec.latency_s == pytest.approx(expected)
    assert info["cost"]["latency_s"] == pytest.approx(expected)
    assert "after 3 attempts" in env.render() and "2 retries" in env.render()


@pytest.mark.parametrize("retries", [0, 1, 3])
def test_retries_exhausted_give_a_failed_call(world, retries):
    backoff_s = 0.25
    env, backend, _, _, info, event = first_dispatch(
        world, ["transient"] * (retries + 1), backend_retries=retries, backend_backoff_s=backoff_s
    )
    rec = event[3]
    assert rec.failed and rec.attempts == retries + 1 == info["backend_attempts"] == info["cost"]["calls"]
    assert info["call_error"].startswith("TransientBackendError: HTTP 503")
    assert env.call_retries == retries and env.failed_calls == 1
    retrieval = env.service.config.latency_s
    expected = backoff_s * (2**retries - 1) + (retries + 1) * failed_attempt_latency(env, rec, "transient") + retrieval
    assert rec.latency_s == pytest.approx(expected)


@pytest.mark.parametrize("fault", ["timeout", "timeout_reported"])
def test_timeouts_are_retried_then_fail_charging_the_timeout(world, fault):
    env, backend, _, _, info, event = first_dispatch(world, [fault] * 3, backend_timeout_s=5.0)
    rec = event[3]
    assert rec.failed and rec.attempts == 3 and "Timeout" in info["call_error"]
    assert rec.latency_s == pytest.approx(3 * 5.0 + 0.5 + 1.0 + env.service.config.latency_s)
    assert backend.timeouts_seen == [5.0, 5.0, 5.0]  # the backend is told the timeout it must honour
    # one timeout, then an answer
    env, backend, _, _, info, event = first_dispatch(world, [fault], backend_timeout_s=5.0)
    assert not event[3].failed and event[3].attempts == 2 and env.call_retries == 1


def test_a_call_slower_than_the_timeout_counts_as_failed(world):
    env, backend = make_env(world, ["slow"], backend_timeout_s=0.05)
    backend.sleep_s = 0.2
    env.reset(seed=0, options={"task_id": TASK_ID})
    _, _, _, _, info = env.step(1)
    rec = env.trace[-1][3]
    assert rec.attempts == 2 and not rec.failed  # the slow reply was discarded, the retry answered
    assert backend.generate_log == ["slow", "ok"]
    env, backend = make_env(world, ["slow"], backend_timeout_s=0.05, backend_retries=0)
    backend.sleep_s = 0.2
    env.reset(seed=0, options={"task_id": TASK_ID})
    _, _, _, _, info = env.step(1)
    assert info["call_failed"] and "took" in info["call_error"] and "timeout 0.05" in info["call_error"]


@pytest.mark.parametrize("garbage", sorted(GARBAGE))
def test_garbage_replies_are_failed_calls_and_never_reach_the_episode(world, garbage):
    env, backend, obs, reward, info, event = first_dispatch(world, [f"garbage:{garbage}"])
    rec = event[3]
    assert rec.failed and info["call_failed"] and rec.attempts == 1  # garbage is not retried
    assert info["call_error"].startswith("InvalidGenerationError"), info["call_error"]
    assert rec.text == "" and rec.confidence == 0.0 and env.results[0] is None
    assert env.observation_space.contains(obs) and math.isfinite(reward)


def test_validate_result_accepts_numpy_numbers_and_returns_plain_types():
    res = validate_result(GenerationResult("42", np.float32(0.5), np.int64(3), np.float64(1.5)))
    assert type(res.confidence) is float and type(res.completion_tokens) is int and type(res.latency_s) is float
    for bad in (GenerationResult("x", 0.5, 10**7), GenerationResult("x", np.float32("nan"))):
        with pytest.raises(InvalidGenerationError):
            validate_result(bad)


def test_call_backend_never_raises_an_exception():
    class Weird(Exception):
        def __str__(self):
            raise RuntimeError("no message for you")

    def boom():
        raise Weird()

    out = call_backend(boom, validate_result, RetryPolicy())
    assert isinstance(out, CallOutcome) and out.failed and out.error.startswith("Weird") and out.attempts == 1
    with pytest.raises(KeyboardInterrupt):  # not an Exception: it must still stop the program

        def interrupt():
            raise KeyboardInterrupt

        call_backend(interrupt, validate_result, RetryPolicy())


@pytest.mark.parametrize(
    ("schedule", "attempts", "failed", "error"),
    [
        (["error"], 1, True, "ConnectionResetError"),
        (["garbage:str"], 1, True, "InvalidGenerationError"),
        (["garbage:none"], 1, True, "InvalidGenerationError"),
        (["garbage:float"], 1, True, "InvalidGenerationError"),
        (["transient"] * 3, 3, True, "TransientBackendError"),
        (["timeout", "ok"], 2, False, None),
    ],
)
def test_verifier_faults(world, schedule, attempts, failed, error):
    env, backend = make_env(world)
    env.reset(seed=0, options={"task_id": TASK_ID})
    env.step(1)
    backend.verify_schedule.extend(schedule)
    obs, _, _, _, info = env.step(env.A_VERIFY)
    event = env.trace[-1]
    assert event[0] == "verify" and event[3] == attempts == info["backend_attempts"] == info["cost"]["calls"]
    assert info["call_failed"] is failed and env.failed_calls == int(failed)
    if failed:
        assert info["call_error"].startswith(error) and event[2] is None and event[4] == info["call_error"]
        assert env.verified[0] == 0 and info["action_mask"][env.A_VERIFY] == 1  # unchecked: verify is legal again
        assert "verify step 0: call FAILED" in env.render()
        _, _, _, _, info = env.step(env.A_VERIFY)
        assert not info["call_failed"] and env.verified[0] in (1, 2)
    else:
        assert env.verified[0] in (1, 2) and event[2] in (True, False)


def test_failures_do_not_leak_into_the_next_episode(world):
    env, backend = make_env(world)
    backend.rate = backend.verify_rate = 0.6
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=1)
    for _ in range(200):
        obs, _, terminated, truncated, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        if terminated or truncated:
            break
    assert env.failed_calls + env.call_retries > 0
    backend.rate = backend.verify_rate = 0.0
    checker = EpisodeChecker()
    obs, info = env.reset(seed=2)
    checker.after_reset(env, obs, info)
    assert (env.failed_calls, env.call_retries, env.retrieval_fallbacks) == (0, 0, 0)
    assert "failed calls" not in env.render() and "retries" not in env.render()
    mask = info["action_mask"]
    obs, reward, terminated, truncated, info = env.step(1)
    checker.after_step(env, 1, mask, obs, reward, terminated, truncated, info)
    assert (info["call_failed"], info["call_error"], info["backend_attempts"], info["retrieval_fallback"]) == (
        False,
        None,
        1,
        False,
    )


def test_random_faults_everywhere_keep_every_invariant(world):
    env, backend = make_env(world, retrieval_decider="orchestrator", max_steps=40)
    backend.rate = backend.verify_rate = 0.3
    for i, w in enumerate(env.workers):
        w.retriever = FailingRetriever(w.retriever, mode=("raise", "bad_ids")[i % 2], rate=0.3, seed=i)
    rng = np.random.default_rng(5)
    checker = EpisodeChecker()
    stats = {"failed": 0, "fallbacks": 0, "episodes": 0}
    for episode in range(25):
        obs, info = env.reset(seed=episode)
        checker.after_reset(env, obs, info)
        while True:
            mask = info["action_mask"]
            a = int(rng.choice(np.flatnonzero(mask))) if rng.random() < 0.9 else int(rng.integers(env.n_actions))
            obs, reward, terminated, truncated, info = env.step(a)
            checker.after_step(env, a, mask, obs, reward, terminated, truncated, info)
            if terminated or truncated:
                stats["failed"] += info["episode_stats"]["failed_calls"]
                stats["fallbacks"] += info["episode_stats"]["retrieval_fallbacks"]
                stats["episodes"] += 1
                break
        assert env.render().splitlines()[-1].startswith("  totals:")
    assert stats["failed"] > 0 and stats["fallbacks"] > 0


def test_backend_must_implement_the_interface(world):
    with pytest.raises(TypeError, match="backend must implement GenerationBackend"):
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
def test_retriever_failure_falls_back_to_answering_without_retrieval(world, mode):
    _, _, _, _, _, plain = first_dispatch(world, [], action=0)  # worker 0 without retrieval
    env, backend = make_env(world)
    env.workers[0].retriever = FailingRetriever(env.workers[0].retriever, mode=mode)
    env.reset(seed=0, options={"task_id": TASK_ID})
    obs, reward, _, _, info = env.step(1)  # worker 0 with retrieval
    rec, ref = env.trace[-1][3], plain[3]
    assert info["retrieval_fallback"] is True and info["call_failed"] is False
    assert env.retrieval_fallbacks == 1 and not rec.used_retrieval and rec.retrieved == ()
    assert rec.retrieval_error.startswith("InternalError" if mode == "raise" else "retriever returned unknown")
    # it answered exactly as without retrieval, and paid for the retrieval it tried
    assert (rec.text, rec.prompt_tokens, rec.completion_tokens) == (ref.text, ref.prompt_tokens, ref.completion_tokens)
    assert rec.latency_s == pytest.approx(ref.latency_s + env.service.config.latency_s)
    assert obs["subtasks"][0, obs_lib.C_RETR] == 0.0
    assert "retrieval FAILED" in env.render() and "1 retrieval fallbacks" in env.render()
    obs, reward, terminated, _, info = env.step(env.A_SUBMIT)
    assert terminated and info["episode_stats"]["retrieval_fallbacks"] == 1


def test_chromadb_error_in_a_real_shard_retriever(world):
    env, _ = make_env(world, retrieval_decider="worker")
    real = env.workers[0].retriever
    broken = ShardRetriever(BrokenCollection(real.collection), real.encoder, real.domains, 16)
    env.workers[0].retriever = broken
    env.reset(seed=0, options={"task_id": TASK_ID})  # a support task: step 0 is an orders lookup in worker 0's shard
    _, _, _, _, info = env.step(0)
    assert info["retrieval_fallback"] and "malformed" in env.trace[-1][3].retrieval_error
    assert len(broken.memo) == 0  # a failure is never memoised
    env.workers[0].retriever = real
    env.step(env.A_ROLLBACK)
    _, _, _, _, info = env.step(0)
    assert not info["retrieval_fallback"] and env.trace[-1][3].retrieved


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
    import edo_gym.retrieval.store as store
    from edo_gym.config import RetrievalConfig, WorldConfig, default_workers
    from edo_gym.envs.edo_env import _world
    from edo_gym.retrieval.embedder import resolve_model

    class StubEmbedder:  # the corpus vectors come from the cache; no model needed to build collections
        def __init__(self, model="default", **kw):
            self.model_id = resolve_model(model)[1]
        def count_tokens(self, texts):
            return [len(t.split()) for t in texts]
        def encode(self, texts):
            raise AssertionError("the cache must be warm")

    store.Embedder = StubEmbedder
    make_client = store._chroma_client
    def small_batches(chroma_dir):
        client = make_client(chroma_dir)
        client.get_max_batch_size = lambda: 50
        return client
    store._chroma_client = small_batches
    add = C.Collection.add
    def slow_add(self, *a, **k):
        add(self, *a, **k)
        print("ADDED", self.name, self.count(), flush=True)
        time.sleep(600)
    C.Collection.add = slow_add
    store.RetrievalService(_world(WorldConfig()), RetrievalConfig(cache_dir=sys.argv[2], chroma_dir=sys.argv[1]),
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

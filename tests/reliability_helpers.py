"""Fault-injecting fakes behind the real interfaces, and invariant checks, shared by the reliability tests.

``FaultyBackend`` implements the ``GenerationBackend`` protocol by wrapping ``SimulatedBackend`` (the allowed
stand-in for a remote LLM service) and injecting faults on a fixed schedule or at a seeded random rate; it
never touches the env's RNG when it injects a fault, so a fault-free call gives exactly what the wrapped
backend gives. ``FailingRetriever`` stands in for a ``ShardRetriever`` whose chromadb collection errors.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import chromadb.errors
import numpy as np

from edo_gym.agents.backend import MAX_RESULT_CHARS, GenerationResult, SimulatedBackend, TransientBackendError

#: Garbage replies, each built from a real result ``r``.
GARBAGE: dict[str, Any] = {
    "none": lambda r: None,
    "str": lambda r: r.text,
    "dict": lambda r: {"text": r.text, "confidence": r.confidence},
    "text_none": lambda r: GenerationResult(None, r.confidence),  # type: ignore[arg-type]
    "text_bytes": lambda r: GenerationResult(r.text.encode(), r.confidence),  # type: ignore[arg-type]
    "text_huge": lambda r: GenerationResult("x" * (MAX_RESULT_CHARS + 1), r.confidence),
    "conf_nan": lambda r: GenerationResult(r.text, math.nan),
    "conf_inf": lambda r: GenerationResult(r.text, math.inf),
    "conf_negative": lambda r: GenerationResult(r.text, -0.1),
    "conf_above_one": lambda r: GenerationResult(r.text, 1.5),
    "conf_str": lambda r: GenerationResult(r.text, "0.9"),  # type: ignore[arg-type]
    "conf_none": lambda r: GenerationResult(r.text, None),  # type: ignore[arg-type]
    "conf_bool": lambda r: GenerationResult(r.text, True),
    "conf_huge_int": lambda r: GenerationResult(r.text, 10**400),
    "tokens_negative": lambda r: GenerationResult(r.text, r.confidence, -3),
    "tokens_float": lambda r: GenerationResult(r.text, r.confidence, 2.5),  # type: ignore[arg-type]
    "latency_negative": lambda r: GenerationResult(r.text, r.confidence, 0, -1.0),
    "latency_nan": lambda r: GenerationResult(r.text, r.confidence, 0, math.nan),
}
GENERATE_FAULTS = ("ok", "error", "transient", "timeout", "timeout_reported", *(f"garbage:{g}" for g in GARBAGE))
VERIFY_FAULTS = ("ok", "error", "transient", "timeout", "garbage:str", "garbage:none", "garbage:float")


class FaultyBackend:
    """A ``GenerationBackend`` that wraps ``SimulatedBackend`` and injects faults.

    :param schedule: fault of each ``generate`` call in order (then ``rate`` takes over), from ``GENERATE_FAULTS``
        plus ``"slow"`` (sleeps ``sleep_s`` wall-clock seconds, then answers).
    :param rate: probability that an unscheduled call gets a fault drawn uniformly from ``kinds``.
    :param verify_schedule: / ``verify_rate`` / ``verify_kinds``: the same for ``verify`` calls.
    """

    def __init__(
        self,
        inner: SimulatedBackend,
        schedule: Iterable[str] = (),
        rate: float = 0.0,
        kinds: Iterable[str] = GENERATE_FAULTS[1:],
        verify_schedule: Iterable[str] = (),
        verify_rate: float = 0.0,
        verify_kinds: Iterable[str] = VERIFY_FAULTS[1:],
        seed: int = 0,
        sleep_s: float = 0.0,
    ) -> None:
        self.inner = inner
        self.schedule = deque(schedule)
        self.verify_schedule = deque(verify_schedule)
        self.rate, self.kinds = rate, tuple(kinds)
        self.verify_rate, self.verify_kinds = verify_rate, tuple(verify_kinds)
        self.random = random.Random(seed)
        self.sleep_s = sleep_s
        self.generate_log: list[str] = []
        self.verify_log: list[str] = []
        self.timeouts_seen: list[float | None] = []

    def _next(self, schedule: deque, rate: float, kinds: tuple[str, ...]) -> str:
        if schedule:
            return schedule.popleft()
        if rate > 0 and self.random.random() < rate:
            return self.random.choice(kinds)
        return "ok"

    def generate(self, request, rng):
        fault = self._next(self.schedule, self.rate, self.kinds)
        self.generate_log.append(fault)
        self.timeouts_seen.append(request.timeout_s)
        if fault == "error":
            raise RuntimeError("backend exploded (HTTP 500)")
        if fault == "transient":
            raise TransientBackendError("HTTP 503: service unavailable, retry later")
        if fault == "timeout":
            raise TimeoutError("read timed out")
        if fault == "slow":
            time.sleep(self.sleep_s)
        result = self.inner.generate(request, rng)
        if fault == "timeout_reported":
            return replace(result, latency_s=1e6)
        if fault.startswith("garbage:"):
            return GARBAGE[fault.split(":", 1)[1]](result)
        return result

    def verify(self, prompt, answer, hidden_correct, rng):
        fault = self._next(self.verify_schedule, self.verify_rate, self.verify_kinds)
        self.verify_log.append(fault)
        if fault == "error":
            raise ConnectionResetError("connection reset by peer")
        if fault == "transient":
            raise TransientBackendError("HTTP 429: rate limited")
        if fault == "timeout":
            raise TimeoutError("verifier timed out")
        if fault == "garbage:str":
            return "yes"
        if fault == "garbage:none":
            return None
        if fault == "garbage:float":
            return 0.7
        return self.inner.verify(prompt, answer, hidden_correct, rng)


class FailingRetriever:
    """Stands in for a ``ShardRetriever`` whose chromadb collection fails (or returns unknown ids).

    :param mode: ``"raise"`` (a chromadb ``InternalError``) or ``"bad_ids"``.
    :param rate: probability of failing each search (seeded); 1.0 = always.
    """

    def __init__(self, inner: Any, mode: str = "raise", rate: float = 1.0, seed: int = 0) -> None:
        self.inner = inner
        self.size = inner.size
        self.domains = inner.domains
        self.mode = mode
        self.rate = rate
        self.random = random.Random(seed)
        self.failures = 0

    def search(self, query: str, k: int) -> tuple[int, ...]:
        if self.random.random() < self.rate:
            self.failures += 1
            if self.mode == "bad_ids":
                return (10**9, -1)
            raise chromadb.errors.InternalError("Error executing plan: segment reader failed")
        return self.inner.search(query, k)


class BrokenCollection:
    """A chromadb collection whose queries fail (counts still work), to wrap in a real ``ShardRetriever``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def count(self) -> int:
        return self.inner.count()

    def query(self, **kwargs: Any) -> Any:
        raise chromadb.errors.InternalError("database disk image is malformed")


# -- invariants ---------------------------------------------------------------------------------------------------
_EVENT_KINDS = {"dispatch", "verify", "rollback", "replan", "submit", "illegal"}


class EpisodeChecker:
    """Checks every step of an ``EDOEnv`` against its observation space, reward breakdown and trace.

    Call ``after_reset(env, obs, info)`` and ``after_step(env, action, obs, reward, terminated, truncated, info)``.
    """

    def after_reset(self, env: Any, obs: dict, info: dict) -> None:
        u = env.unwrapped
        assert u.observation_space.contains(obs), _space_diff(u, obs)
        assert np.array_equal(info["action_mask"], obs["action_mask"])
        assert len(u.trace) == 1 and u.trace[0][0] == "reset"
        assert (u.tokens, u.calls, u.latency_s, u.steps) == (0, 0, 0.0, 0)
        assert (u.failed_calls, u.call_retries, u.retrieval_fallbacks, u.illegal_actions) == (0, 0, 0, 0)
        self.sums = [0, 0, 0.0]
        self.trace_len = 1
        self.ended = False

    def after_step(self, env: Any, action: int, mask_before: np.ndarray, obs, reward, terminated, truncated, info) -> None:
        u = env.unwrapped
        assert not self.ended
        assert u.observation_space.contains(obs), _space_diff(u, obs)
        assert np.array_equal(info["action_mask"], obs["action_mask"])
        assert isinstance(reward, float) and math.isfinite(reward)
        terms = info["reward_terms"]
        assert all(math.isfinite(v) for v in terms.values())
        assert math.isclose(sum(terms.values()), reward, rel_tol=1e-12, abs_tol=1e-12)
        cost = info["cost"]
        assert cost["tokens"] >= 0 and cost["calls"] >= 0 and cost["latency_s"] >= 0
        self.sums[0] += cost["tokens"]
        self.sums[1] += cost["calls"]
        self.sums[2] += cost["latency_s"]
        assert (u.tokens, u.calls) == (self.sums[0], self.sums[1])
        assert math.isclose(u.latency_s, self.sums[2], rel_tol=1e-9, abs_tol=1e-9)
        # the trace: exactly one event per step, of the step's kind (plus "budget" when the budget ran out)
        new = u.trace[self.trace_len :]
        self.trace_len = len(u.trace)
        legal = bool(mask_before[action] > 0)
        assert info["illegal_action"] is (not legal)
        assert info["event"] == ("illegal" if not legal else u.decode_action(action)[0])
        assert new[0][0] == info["event"], (new, info["event"])
        extra = [e[0] for e in new[1:]]
        assert extra in ([], ["budget"]), extra
        if extra:
            assert terminated and u.tokens > u.config.token_budget
        event = new[0]
        kind = event[0]
        assert kind in _EVENT_KINDS
        if kind == "dispatch":
            rec = event[3]
            assert event[2] == u.decode_action(action)[1]
            assert cost["calls"] == rec.attempts == info["backend_attempts"] >= 1
            assert cost["tokens"] == rec.prompt_tokens + rec.completion_tokens
            assert math.isclose(cost["latency_s"], rec.latency_s)
            assert info["call_failed"] is rec.failed
            assert info["call_error"] == rec.error
            assert info["retrieval_fallback"] is rec.retrieval_fallback
            assert (rec.error is not None) is rec.failed
            if rec.failed:
                assert rec.text == "" and rec.completion_tokens == 0 and u.results[event[1]] is None
            if rec.retrieval_fallback:
                assert rec.retrieved == () and not rec.used_retrieval
            assert 0.0 <= rec.confidence <= 1.0
        elif kind == "verify":
            assert cost["calls"] == event[3] == info["backend_attempts"] >= 1
            assert info["call_failed"] is (event[2] is None) is (event[4] is not None)
            assert info["retrieval_fallback"] is False
        elif kind == "replan":
            assert cost["calls"] == 1 and not info["call_failed"] and info["backend_attempts"] == 0
        else:  # rollback, submit, illegal: no call
            assert cost == {"tokens": 0, "calls": 0, "latency_s": 0.0}
            assert info["backend_attempts"] == 0 and not info["call_failed"] and not info["retrieval_fallback"]
        if kind == "illegal":
            assert terms["illegal"] == -u.config.reward.illegal_action_penalty
        else:
            assert terms["illegal"] == 0.0
        if kind == "submit":
            assert terminated and terms["success"] == event[3]
        else:
            assert terms["success"] == 0.0
        # counters agree with the whole trace
        events = [e for e in u.trace if e[0] in _EVENT_KINDS]
        assert u.steps == len(events)
        dispatches = [e for e in events if e[0] == "dispatch"]
        verifies = [e for e in events if e[0] == "verify"]
        assert int(u.worker_calls.sum()) == len(dispatches)
        for w in range(len(u.workers)):
            assert u.worker_calls[w] == sum(1 for e in dispatches if e[2] == w)
        assert u.failed_calls == sum(e[3].failed for e in dispatches) + sum(e[2] is None for e in verifies)
        assert u.call_retries == sum(e[3].attempts - 1 for e in dispatches) + sum(e[3] - 1 for e in verifies)
        assert u.retrieval_fallbacks == sum(e[3].retrieval_fallback for e in dispatches)
        assert u.illegal_actions == sum(1 for e in events if e[0] == "illegal")
        assert u.replans == sum(1 for e in events if e[0] == "replan")
        # since the last replan (or reset), the plan's attempts count its dispatches
        start = max((k for k, e in enumerate(u.trace) if e[0] in ("reset", "replan")), default=0)
        since = [e for e in u.trace[start:] if e[0] == "dispatch"]
        assert sum(u.attempts) == len(since)
        # termination
        assert not (terminated and truncated)
        if truncated:
            assert u.steps >= u.step_limit
        ended = terminated or truncated
        if ended:
            stats = info["episode_stats"]
            assert stats["failed_calls"] == u.failed_calls and stats["calls"] == u.calls
            assert stats["call_retries"] == u.call_retries and stats["retrieval_fallbacks"] == u.retrieval_fallbacks
            assert not obs["action_mask"].any()
        else:
            assert "episode_stats" not in info
            assert obs["action_mask"][u.A_SUBMIT] == 1.0
        self.ended = ended


def _space_diff(env: Any, obs: dict) -> str:
    bad = [k for k, space in env.observation_space.spaces.items() if not space.contains(obs.get(k))]
    return f"observation keys outside the space: {bad}"


def det_vectors(texts: list[str], dim: int = 16) -> np.ndarray:
    """Deterministic unit vectors per text (a stand-in build function for cache tests that need no model)."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for i, t in enumerate(texts):
        seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
        out[i] = v / np.linalg.norm(v)
    return out

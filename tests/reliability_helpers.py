"""Fault-injecting fakes behind the real interfaces, and invariant checks, shared by the reliability tests.

``FaultyBackend`` implements the ``LLMBackend`` protocol by wrapping a real backend (``SimulatedBackend``, the
allowed stand-in for a remote LLM service) and injecting faults into the calls of chosen roles (planner, worker,
verifier), on a fixed schedule per role or at a seeded random rate. It draws from its own RNG only, and a reply
depends only on the request (whose ``seed`` the env drew), so a fault-free call gives exactly what the wrapped
backend gives. ``FailingRetriever`` stands in for a ``ShardRetriever`` whose chromadb collection errors.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

import chromadb.errors
import numpy as np

from edo_gym.agents.backend import MAX_COMPLETION_TOKENS, MAX_RESULT_CHARS, TransientBackendError
from edo_gym.agents.planner import fallback_plan
from edo_gym.agents.protocol import ROLES, LLMBackend, LLMRequest, LLMResponse
from edo_gym.agents.simulator import SimulatedBackend
from edo_gym.config import EDOConfig
from edo_gym.envs import observation as obs_lib
from edo_gym.envs.edo_env import PLANNER_PRICE, shared_task_pool, shared_world

#: Garbage replies (not a valid ``LLMResponse``), each built from a real reply ``r``.
GARBAGE: dict[str, Callable[[LLMResponse], Any]] = {
    "none": lambda r: None,
    "str": lambda r: r.text,
    "dict": lambda r: {"text": r.text, "confidence": r.confidence},
    "text_none": lambda r: replace(r, text=None),
    "text_bytes": lambda r: replace(r, text=r.text.encode()),
    "text_huge": lambda r: replace(r, text="x" * (MAX_RESULT_CHARS + 1)),
    "conf_nan": lambda r: replace(r, confidence=math.nan),
    "conf_inf": lambda r: replace(r, confidence=math.inf),
    "conf_negative": lambda r: replace(r, confidence=-0.1),
    "conf_above_one": lambda r: replace(r, confidence=1.5),
    "conf_str": lambda r: replace(r, confidence="0.9"),
    "conf_bool": lambda r: replace(r, confidence=True),
    "conf_huge_int": lambda r: replace(r, confidence=10**400),
    "tokens_negative": lambda r: replace(r, completion_tokens=-3),
    "tokens_float": lambda r: replace(r, prompt_tokens=2.5),
    "tokens_bool": lambda r: replace(r, completion_tokens=True),
    "tokens_huge": lambda r: replace(r, completion_tokens=MAX_COMPLETION_TOKENS + 1),
    "latency_negative": lambda r: replace(r, latency_s=-1.0),
    "latency_nan": lambda r: replace(r, latency_s=math.nan),
    "latency_str": lambda r: replace(r, latency_s="1.0"),
}


def _plan(steps: list[dict]) -> str:
    return json.dumps({"steps": steps})


_STEP = {"type": "lookup", "domain": "orders", "instruction": "Who placed order 1?", "inputs": []}
#: Reply texts that are valid ``LLMResponse``\ s but not valid plans (for the planner) or verdicts (for a verifier).
BAD_TEXTS: dict[str, str] = {
    "prose": "I would start by looking up the order, then reply to the customer.",
    "cut_json": 'Here is the plan:\n{"steps": [{"type": "lookup", "domain": "orders", "instr',
    "not_an_object": "[1, 2, 3]",
    "no_steps": _plan([]),
    "steps_not_a_list": json.dumps({"steps": "lookup then write"}),
    "unknown_type": _plan([{**_STEP, "type": "search"}]),
    "unknown_domain": _plan([{**_STEP, "domain": "weather"}]),
    "empty_instruction": _plan([{**_STEP, "instruction": "  "}]),
    "reads_itself": _plan([{**_STEP, "inputs": [1]}]),
    "reads_a_missing_step": _plan([_STEP, {**_STEP, "inputs": [7]}]),
    "bool_input": _plan([_STEP, {**_STEP, "inputs": [True]}]),
    "too_many_steps": _plan([_STEP] * 40),
    "no_verdict": "Hmm, hard to say; it looks plausible to me.",
}
#: Faults of one call: ``ok``; ``error`` (a non-transient exception), ``transient``, ``timeout`` (raised),
#: ``timeout_reported`` (a reply that reports a huge latency), ``slow`` (sleeps ``sleep_s`` wall-clock seconds, then
#: answers); ``garbage:<name>`` (an invalid reply, see ``GARBAGE``); ``text:<name>`` (a valid reply whose text is
#: ``BAD_TEXTS[name]``).
FAULTS = (
    "ok",
    "error",
    "transient",
    "timeout",
    "timeout_reported",
    *(f"garbage:{g}" for g in GARBAGE),
    *(f"text:{t}" for t in BAD_TEXTS),
)
#: What random faults are drawn from, uniformly (``slow`` would only slow the tests down); a bare ``garbage`` or
#: ``text`` stands for one of its kind, drawn uniformly, so that the many garbage kinds do not crowd out the rest.
RANDOM_FAULTS = ("error", "transient", "timeout", "timeout_reported", "garbage", "text")


class FaultyBackend:
    """An ``LLMBackend`` that wraps another one and injects faults into the calls of chosen roles.

    :param schedule: per role, the fault of each of its calls in order (then ``rate`` takes over), from ``FAULTS``
        plus ``"slow"``.
    :param rate: probability that an unscheduled call of a role in ``roles`` gets a fault drawn from ``kinds``.
    :param sleep_s: wall-clock seconds a ``slow`` call sleeps.
    """

    def __init__(
        self,
        inner: LLMBackend,
        schedule: Mapping[str, Iterable[str]] | None = None,
        rate: float = 0.0,
        roles: Iterable[str] = ("planner", "worker", "verifier"),
        kinds: Iterable[str] = RANDOM_FAULTS,
        seed: int = 0,
        sleep_s: float = 0.0,
    ) -> None:
        self.inner = inner
        self.schedule: dict[str, deque[str]] = {role: deque() for role in ROLES}
        for role, faults in (schedule or {}).items():
            self.inject(role, *faults)
        self.rate, self.roles, self.kinds = rate, tuple(roles), tuple(kinds)
        self.random = random.Random(seed)
        self.sleep_s = sleep_s
        #: ``(role, fault)`` of every call, in order.
        self.log: list[tuple[str, str]] = []
        #: Every request received, in order.
        self.requests: list[LLMRequest] = []

    def inject(self, role: str, *faults: str) -> None:
        """Schedule ``faults`` for the next calls of ``role``."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        for fault in faults:
            if fault != "slow" and fault not in FAULTS:
                raise ValueError(f"unknown fault {fault!r}")
        self.schedule[role].extend(faults)

    def faults(self, role: str) -> list[str]:
        """The fault of each call of ``role`` so far."""
        return [fault for r, fault in self.log if r == role]

    def _next(self, role: str) -> str:
        if self.schedule[role]:
            return self.schedule[role].popleft()
        if self.rate > 0 and role in self.roles and self.random.random() < self.rate:
            kind = self.random.choice(self.kinds)
            if kind == "garbage":
                return f"garbage:{self.random.choice(sorted(GARBAGE))}"
            if kind == "text":
                return f"text:{self.random.choice(sorted(BAD_TEXTS))}"
            return kind
        return "ok"

    def complete(self, request: LLMRequest) -> LLMResponse:
        fault = self._next(request.role)
        self.log.append((request.role, fault))
        self.requests.append(request)
        if fault == "error":
            raise RuntimeError(f"{request.role} backend exploded (HTTP 500)")
        if fault == "transient":
            raise TransientBackendError("HTTP 503: service unavailable, retry later")
        if fault == "timeout":
            raise TimeoutError("read timed out")
        if fault == "slow":
            time.sleep(self.sleep_s)
        response = self.inner.complete(request)
        if fault == "timeout_reported":
            return replace(response, latency_s=1e6)
        if fault.startswith("garbage:"):
            return GARBAGE[fault.split(":", 1)[1]](response)
        if fault.startswith("text:"):
            return replace(response, text=BAD_TEXTS[fault.split(":", 1)[1]])
        return response


def simulated_backend(config: EDOConfig) -> SimulatedBackend:
    """The ``SimulatedBackend`` an ``EDOEnv`` with ``config`` builds for itself (same world, team, planner, tasks)."""
    world = shared_world(config.world)
    return SimulatedBackend(world, config.workers, config.planner, shared_task_pool(config.world, config.tasks).tasks)


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
    """A chromadb collection of ``size`` documents whose queries fail, to put in a real ``ShardRetriever``."""

    def __init__(self, size: int) -> None:
        self.size = size

    def count(self) -> int:
        return self.size

    def query(self, **kwargs: Any) -> Any:
        raise chromadb.errors.InternalError("database disk image is malformed")


# -- invariants ---------------------------------------------------------------------------------------------------
#: Trace events a step appends (one per step); ``plan_fallback`` and ``budget`` are extra events.
STEP_EVENTS = {"dispatch", "verify", "verify_plan", "rollback", "replan", "submit", "illegal"}
INFO_KEYS = {
    "action_mask",
    "is_success",
    "reward_terms",
    "cost",
    "event",
    "illegal_action",
    "task_id",
    "call_failed",
    "call_error",
    "backend_attempts",
    "retrieval_fallback",
}
EPISODE_STATS = {
    "ended": bool,
    "success": bool,
    "score": float,
    "tokens": int,
    "calls": int,
    "latency_s": float,
    "steps": int,
    "family": str,
    "budget_exhausted": bool,
    "failed_calls": int,
    "worker_down_calls": int,
    "call_retries": int,
    "retrieval_fallbacks": int,
}


def _plain(value: Any) -> bool:
    """A plain ``info`` value: bool, int, float, str, a numeric numpy array, or a dict of those (never ``None``)."""
    if type(value) in (bool, int, float, str):
        return True
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "biuf"
    if type(value) is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    return False


def _plan_checks(u: Any, obs: dict, fallback_events: int) -> None:
    """The plan in force agrees with its trace events and the observation's fallback/repaired flags."""
    source = u.episode.plan.source
    assert source in ("planner", "repaired", "fallback")
    assert fallback_events == int(source == "fallback")
    assert obs["plan"][obs_lib.P_FALLBACK] == float(source == "fallback")
    assert obs["plan"][obs_lib.P_REPAIRED] == float(source == "repaired")
    if source == "fallback":
        assert u.episode.plan.plan == fallback_plan(u.episode.task.text)  # read from the task's text alone
    assert 1 <= len(u.episode.plan.steps) <= u.config.max_subtasks


class EpisodeChecker:
    """Checks every step of an ``EDOEnv`` against its observation space, reward breakdown, trace and counters.

    Call ``after_reset(env, obs, info)`` and ``after_step(env, action, mask_before, obs, reward, terminated,
    truncated, info)``. The planner's cost at reset is charged on the first step: it is read from the env's
    pending charge (nothing else records it), and checked to be at least one planner call.
    """

    def after_reset(self, env: Any, obs: dict, info: dict) -> None:
        u = env.unwrapped
        assert u.observation_space.contains(obs), _space_diff(u, obs)
        assert np.array_equal(info["action_mask"], obs["action_mask"])
        assert set(info) == {"action_mask", "task_id"} and _plain(info)
        kinds = [e[0] for e in u.episode.trace]
        assert kinds in (["reset", "plan"], ["reset", "plan_fallback", "plan"]), kinds
        assert u.episode.trace[0][1] == info["task_id"] and u.episode.trace[-1][1] is u.episode.plan.plan
        _plan_checks(u, obs, kinds.count("plan_fallback"))
        assert (u.episode.tokens, u.episode.calls, u.episode.latency_s, u.episode.steps) == (0, 0, 0.0, 0)
        assert (u.episode.retrieval_fallbacks, u.episode.illegal_actions, u.episode.replans) == (0, 0, 0)
        # the planner was called (once, or twice with the repair), possibly with failures and retries
        pending = u.episode.pending
        planner_calls = pending.calls - u.episode.call_retries
        assert planner_calls in (1, 2) and pending.tokens > 0 and pending.latency_s > 0
        assert planner_calls == (1 if u.episode.plan.source == "planner" else 2)
        assert 0 <= u.episode.failed_calls <= planner_calls
        self.pending = (pending.tokens, pending.calls, pending.latency_s)
        self.counters = (u.episode.failed_calls, u.episode.call_retries, u.episode.retrieval_fallbacks)
        self.sums = [pending.tokens, pending.calls, pending.latency_s]
        self.trace_len = len(u.episode.trace)
        self.current, self.top = u.episode.plan.current_step, None
        self.info_keys: set[str] | None = None
        self.ended = False

    def after_step(self, env: Any, action: int, mask_before: np.ndarray, obs, reward, terminated, truncated, info) -> None:
        u, cfg = env.unwrapped, env.unwrapped.config
        assert not self.ended
        assert u.observation_space.contains(obs), _space_diff(u, obs)
        assert np.array_equal(info["action_mask"], obs["action_mask"])
        # info: plain values, the same keys and types on every step (plus the episode's stats at its end)
        assert _plain(info), info
        assert set(info) - {"episode_stats"} == INFO_KEYS
        assert type(info["call_error"]) is str and type(info["backend_attempts"]) is int
        assert type(info["call_failed"]) is bool and type(info["retrieval_fallback"]) is bool
        # reward = sum of its terms
        assert isinstance(reward, float) and math.isfinite(reward)
        terms = info["reward_terms"]
        assert set(terms) == {"success", "tokens", "calls", "latency", "illegal"}
        assert all(math.isfinite(v) for v in terms.values())
        assert math.isclose(sum(terms.values()), reward, rel_tol=1e-12, abs_tol=1e-12)
        # the trace: one event per step, of the step's kind (a replan may first record a fallback; "budget" may follow)
        new = u.episode.trace[self.trace_len :]
        self.trace_len = len(u.episode.trace)
        legal = bool(mask_before[action] > 0)
        assert info["illegal_action"] is (not legal)
        kind = "illegal" if not legal else u.decode_action(action)[0]
        assert info["event"] == kind
        kinds = [e[0] for e in new]
        main = kinds.index(kind)
        assert kinds[:main] == (["plan_fallback"] if kind == "replan" and main else []), kinds
        assert kinds[main + 1 :] in ([], ["budget"]), kinds
        event = new[main]
        # what the step cost: the pending charge (the planner at reset) plus the step's own work
        cost = info["cost"]
        assert type(cost["tokens"]) is int and type(cost["calls"]) is int and type(cost["latency_s"]) is float
        p_tokens, p_calls, p_latency = self.pending
        own = (cost["tokens"] - p_tokens, cost["calls"] - p_calls, cost["latency_s"] - p_latency)
        assert own[0] >= 0 and own[1] >= 0 and own[2] >= -1e-9, (cost, self.pending)
        price = 1.0
        failed, retries, fallbacks = (u.episode.failed_calls, u.episode.call_retries, u.episode.retrieval_fallbacks)
        d_failed, d_retries, d_fallbacks = (
            failed - self.counters[0],
            retries - self.counters[1],
            fallbacks - self.counters[2],
        )
        if kind == "dispatch":
            _, i, w, rec = event
            assert (i, w) == (self.current, u.decode_action(action)[1]) and rec.worker == w
            price = u.episode.team.specs[w].price  # the episode's drawn price (the public one without a team draw)
            assert (own[0], own[1]) == (rec.cost.tokens, rec.cost.calls) and math.isclose(own[2], rec.cost.latency_s)
            assert rec.cost.calls == rec.attempts == info["backend_attempts"] >= 1
            assert rec.attempts <= cfg.backend_retries + 1
            assert info["call_failed"] is rec.failed and info["call_error"] == rec.error
            assert (rec.error != "") is rec.failed
            assert info["retrieval_fallback"] is rec.retrieval_fallback
            assert (d_failed, d_retries, d_fallbacks) == (int(rec.failed), rec.attempts - 1, int(rec.retrieval_fallback))
            if rec.failed:
                assert rec.text == "" and rec.confidence is None and rec.cost.completion_tokens == 0
                assert u.episode.plan.results[i] is None
            else:
                assert (
                    u.episode.plan.results[i] is rec
                    and u.episode.plan.done_stack[-1] == i
                    and u.episode.plan.verdicts[i] == []
                )
                assert rec.confidence is None or 0.0 <= rec.confidence <= 1.0
            if rec.retrieval_fallback:
                assert rec.retrieved == () and not rec.used_retrieval
            assert len(rec.retrieved) <= cfg.workers[w].top_k
        elif kind == "verify":
            check = event[1]
            w = u.decode_action(action)[1]
            # a verifier that gave a verdict may not verify this result again; one whose call failed may
            assert (check.worker, check.step) == (w, self.top) and (w in u.episode.plan.verified_by[check.step]) is (
                not check.failed
            )
            price = u.episode.team.specs[w].price
            assert (own[0], own[1]) == (check.cost.tokens, check.cost.calls) and math.isclose(own[2], check.cost.latency_s)
            assert check.cost.calls == check.attempts == info["backend_attempts"] >= 1
            assert info["call_failed"] is check.failed and info["call_error"] == check.error
            assert (check.error != "") is check.failed
            assert (check.verdict == "") is check.failed
            assert check.failed or check.verdict in ("ok", "flagged", "unsure")
            if not check.failed:
                assert u.episode.plan.verdicts[check.step][-1] == check.verdict
            # whether a verifier's retrieval fault counts as a fallback is the env's call: at most one per verification
            assert (d_failed, d_retries) == (int(check.failed), check.attempts - 1) and d_fallbacks in (0, 1)
        elif kind == "verify_plan":
            check = event[1]
            w = u.decode_action(action)[1]
            plan = u.episode.plan
            # a critic that gave a verdict may not critique this plan again; one whose call failed may
            assert check.worker == w and (w in plan.reviewed_by) is (not check.failed)
            price = u.episode.team.specs[w].price
            assert (own[0], own[1]) == (check.cost.tokens, check.cost.calls) and math.isclose(own[2], check.cost.latency_s)
            assert check.cost.calls == check.attempts == info["backend_attempts"] >= 1
            assert info["call_failed"] is check.failed and info["call_error"] == check.error
            assert (check.error != "") is check.failed and (check.verdict == "") is check.failed
            assert check.failed or (check.verdict in ("ok", "flagged", "unsure") and plan.reviews[-1] == check.verdict)
            assert (d_failed, d_retries, d_fallbacks) == (int(check.failed), check.attempts - 1, 0)
            assert not info["retrieval_fallback"] and check.retrieved == ()
        elif kind == "replan":
            price = PLANNER_PRICE
            planner_calls = own[1] - d_retries
            assert planner_calls == (1 if u.episode.plan.source == "planner" else 2), (own, d_retries, u.episode.plan.source)
            assert 0 <= d_failed <= planner_calls and d_fallbacks == 0
            assert own[0] > 0 and own[2] > 0 and event[1] is u.episode.plan.plan
            assert info["backend_attempts"] >= 0
        else:  # rollback, submit, illegal: no call
            if kind == "rollback":
                assert (
                    own == (cfg.rollback_tokens, 0, 0.0) and event[1] == self.top and u.episode.plan.results[self.top] is None
                )
            else:
                assert own == (0, 0, 0.0)
            assert (d_failed, d_retries, d_fallbacks) == (0, 0, 0)
            assert info["backend_attempts"] == 0 and not info["call_failed"] and info["call_error"] == ""
            assert not info["retrieval_fallback"]
        if kind == "replan":
            _plan_checks(u, obs, kinds.count("plan_fallback"))
        # the reward's cost terms price the pending charge at the planner's price and the step's own tokens at its
        expected_tokens = -cfg.reward.token_weight * (PLANNER_PRICE * p_tokens + price * own[0]) / 1000.0
        assert math.isclose(terms["tokens"], expected_tokens, rel_tol=1e-9, abs_tol=1e-12), (terms, expected_tokens)
        assert math.isclose(terms["calls"], -cfg.reward.call_weight * cost["calls"], rel_tol=1e-9, abs_tol=1e-12)
        assert math.isclose(terms["latency"], -cfg.reward.latency_weight * cost["latency_s"], rel_tol=1e-9, abs_tol=1e-12)
        assert terms["illegal"] == (-cfg.reward.illegal_action_penalty if kind == "illegal" else 0.0)
        if kind == "submit":
            assert terminated and terms["success"] == event[2] == u.episode.score
        else:
            assert terms["success"] == 0.0
        # running sums agree with the env's counters
        self.sums[0] += own[0]
        self.sums[1] += own[1]
        self.sums[2] += own[2]
        assert (u.episode.tokens, u.episode.calls) == (self.sums[0], self.sums[1])
        assert math.isclose(u.episode.latency_s, self.sums[2], rel_tol=1e-9, abs_tol=1e-9)
        # counters agree with the whole trace
        events = [e for e in u.episode.trace if e[0] in STEP_EVENTS]
        assert u.episode.steps == len(events)
        dispatches = [e for e in events if e[0] == "dispatch"]
        verifies = [e[1] for e in events if e[0] == "verify"]
        for w in range(len(u.workers)):
            assert u.episode.worker_counts[:, 0][w] == sum(1 for e in dispatches if e[2] == w)
            assert u.episode.worker_counts[:, 4][w] == sum(1 for v in verifies if v.worker == w)
        assert u.episode.illegal_actions == sum(1 for e in events if e[0] == "illegal")
        assert u.episode.replans == sum(1 for e in events if e[0] == "replan")
        # since the last replan (or reset), the plan's attempts count its dispatches
        start = max(k for k, e in enumerate(u.episode.trace) if e[0] in ("reset", "replan"))
        assert sum(u.episode.plan.attempts) == sum(1 for e in u.episode.trace[start:] if e[0] == "dispatch")
        # termination
        assert not (terminated and truncated)
        if "budget" in kinds:
            assert terminated and kind != "submit" and u.episode.tokens > u.token_budget and u.episode.budget_exhausted
        if truncated:
            assert u.episode.steps >= u.step_limit
        ended = terminated or truncated
        stats = info["episode_stats"]  # on every step (strict replay buffers), final when "ended"
        assert {k: type(v) for k, v in stats.items()} == EPISODE_STATS
        assert stats["ended"] is ended
        assert stats["family"] == u.episode.task.family and stats["steps"] == u.episode.steps
        if ended:
            assert (stats["tokens"], stats["calls"], stats["failed_calls"]) == (
                u.episode.tokens,
                u.episode.calls,
                u.episode.failed_calls,
            )
            assert (stats["call_retries"], stats["retrieval_fallbacks"]) == (
                u.episode.call_retries,
                u.episode.retrieval_fallbacks,
            )
            assert stats["budget_exhausted"] is ("budget" in kinds)
            # calls to a worker the episode's drift stopped are failed calls too (and there are none without such a drift)
            drift = u.episode.drift
            assert stats["worker_down_calls"] == u.episode.down_calls <= u.episode.failed_calls
            assert u.episode.down_calls == 0 or (drift is not None and drift.kind == "failure")
            assert stats["success"] is u.episode.success and stats["score"] == u.episode.score
            assert not obs["action_mask"].any()
        else:
            assert stats["success"] is False
            assert obs["action_mask"][u.A_SUBMIT] == 1.0
        self.ended = ended
        self.pending = (0, 0, 0.0)
        self.counters = (failed, retries, fallbacks)
        self.current = u.episode.plan.current_step
        self.top = u.episode.plan.done_stack[-1] if u.episode.plan.done_stack else None


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

"""The generation backend: the one place where an LLM would produce text.

Workers build a :class:`GenerationRequest` (prompt text plus the structured facts a simulator needs) and ask
a :class:`GenerationBackend` for an answer. The default :class:`SimulatedBackend` is a seeded, calibrated
reader: for a lookup it reads the answer from the documents the real retriever returned (right when the
gold document is among them, with the worker's skill), otherwise it falls back to "parametric memory", a
plausible wrong value, or an abstention. A real LLM backend implements the same two methods from
``request.prompt`` alone and ignores ``request.hidden``.

Faults. A remote service fails; :func:`call_backend` is the one place a backend is called, and it never lets a
fault escape into the environment: a :class:`TransientBackendError` or a ``TimeoutError`` (raised, or a call
that reports a ``latency_s`` above, or takes longer in wall-clock time than, ``RetryPolicy.timeout_s``) is
retried up to ``RetryPolicy.retries`` times with a simulated, doubling back-off; any other exception, or a
reply that is not a valid :class:`GenerationResult` (see :func:`validate_result`), fails the call at once.
A failed call is reported in a :class:`CallOutcome`; the worker turns it into a charged, failed
:class:`~edo_gym.agents.worker.CallRecord`. A backend that can hang must honour ``request.timeout_s`` itself
(as HTTP clients do): a synchronous call cannot be interrupted from outside.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from edo_gym.config import WorkerSpec
from edo_gym.world.generator import RELATIONS, World
from edo_gym.world.tasks import apply_op, phrase
from edo_gym.world.text import ABSTAIN_TEXT, RECOVERABLE_DRIFTS, UNRECOVERABLE_DRIFTS, drift, normalize

_ALL_DRIFTS = RECOVERABLE_DRIFTS + UNRECOVERABLE_DRIFTS


@dataclass
class GenerationRequest:
    """What a worker sends to its backend.

    :param prompt: the full prompt text (instructions, input, retrieved documents); what a real LLM reads.
    :param kind: ``lookup``, ``merged`` (a planner-merged two-hop lookup), ``compute`` or ``write``.
    :param inputs: the input answer texts, exactly as upstream workers gave them (``None`` = not available).
    :param subject: the parsed subject entity of a lookup, or ``None`` when the input could not be parsed.
    :param relations: relation names of a lookup (two for ``merged``).
    :param op: operation of a compute/write step.
    :param retrieved: corpus indices of the documents the retriever returned (empty without retrieval).
    """

    worker: WorkerSpec
    prompt: str
    kind: str
    inputs: list[str | None]
    subject: str | None = None
    relations: tuple[str, ...] = ()
    op: str | None = None
    retrieved: tuple[int, ...] = ()
    hidden: dict = field(default_factory=dict)
    #: Seconds after which the caller counts the call as failed; a remote backend should pass it to its client.
    timeout_s: float | None = None


@dataclass
class GenerationResult:
    """A backend's answer. ``text`` is what downstream workers and the grader see.

    ``completion_tokens`` (0 = count ``text`` with the embedder's tokenizer) and ``latency_s`` (``None`` = use
    the worker's size-based latency model) let a real backend report what the call actually cost.
    """

    text: str
    confidence: float
    completion_tokens: int = 0
    latency_s: float | None = None


#: Longest answer text accepted from a backend (characters); a longer reply is garbage, not an answer.
MAX_RESULT_CHARS = 20_000
#: Most completion tokens a backend may report for one call.
MAX_COMPLETION_TOKENS = 1_000_000


class TransientBackendError(Exception):
    """A temporary failure of the generation service (rate limit, overload, dropped connection): retried."""


class InvalidGenerationError(ValueError):
    """A backend returned something that is not a valid answer (wrong type, non-str text, bad confidence)."""


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _finite_in(value: Any, low: float, high: float) -> bool:
    """``value`` is a real number (not a bool), finite, in ``[low, high]``."""
    if not _is_real(value):
        return False
    try:
        v = float(value)
    except OverflowError:  # an int too large for a float
        return False
    return math.isfinite(v) and low <= v <= high


def validate_result(result: Any) -> GenerationResult:
    """``result`` as a clean :class:`GenerationResult` (plain ``float``/``int`` fields).

    :raises InvalidGenerationError: when it is not a ``GenerationResult``, its ``text`` is not a ``str`` (or is
        longer than ``MAX_RESULT_CHARS``), its ``confidence`` is not a finite number in [0, 1], its
        ``completion_tokens`` is not an integer in [0, ``MAX_COMPLETION_TOKENS``], or its ``latency_s`` is not
        ``None`` or a finite non-negative number.
    """
    if not isinstance(result, GenerationResult):
        raise InvalidGenerationError(f"backend returned {type(result).__name__}, expected GenerationResult")
    text, conf, ntok, lat = result.text, result.confidence, result.completion_tokens, result.latency_s
    if not isinstance(text, str):
        raise InvalidGenerationError(f"GenerationResult.text must be str, got {type(text).__name__}")
    if len(text) > MAX_RESULT_CHARS:
        raise InvalidGenerationError(f"GenerationResult.text has {len(text)} characters, more than {MAX_RESULT_CHARS}")
    if not _finite_in(conf, 0.0, 1.0):
        raise InvalidGenerationError(f"GenerationResult.confidence must be a finite number in [0, 1], got {conf!r}")
    if not isinstance(ntok, (int, np.integer)) or isinstance(ntok, (bool, np.bool_)) or not 0 <= ntok <= MAX_COMPLETION_TOKENS:
        raise InvalidGenerationError(
            f"GenerationResult.completion_tokens must be an integer in [0, {MAX_COMPLETION_TOKENS}], got {ntok!r}"
        )
    if lat is not None and not _finite_in(lat, 0.0, math.inf):
        raise InvalidGenerationError(f"GenerationResult.latency_s must be None or a finite number >= 0, got {lat!r}")
    if type(conf) is float and type(ntok) is int and (lat is None or type(lat) is float):
        return result
    return GenerationResult(text, float(conf), int(ntok), None if lat is None else float(lat))


def validate_verdict(verdict: Any) -> bool:
    """A verifier's answer as a ``bool``; :raises InvalidGenerationError: for anything but a (numpy) bool."""
    if not isinstance(verdict, (bool, np.bool_)):
        raise InvalidGenerationError(f"verify() must return a bool, got {type(verdict).__name__} {verdict!r}")
    return bool(verdict)


@dataclass(frozen=True)
class RetryPolicy:
    """How backend calls are retried (``EDOConfig.backend_retries`` / ``backend_backoff_s`` / ``backend_timeout_s``).

    Retry ``r`` (0-based) is preceded by a simulated back-off of ``backoff_s * 2**r`` seconds, charged to the
    episode as latency (never slept).
    """

    retries: int = 2
    backoff_s: float = 0.5
    timeout_s: float = 30.0

    def backoff(self, retry: int) -> float:
        return self.backoff_s * (2.0**retry)


#: Failure kinds that are retried.
RETRYABLE = frozenset({"transient", "timeout"})


@dataclass
class CallOutcome:
    """What :func:`call_backend` got: a value, or a failure, and the attempts it took.

    :param failures: the kind of each failed attempt, in order: ``transient`` (``TransientBackendError``),
        ``timeout``, ``error`` (any other exception) or ``invalid`` (garbage reply).
    :param backoff_s: total simulated back-off before the retries.
    :param reported_latency_s: the ``latency_s`` the successful reply reported, if any.
    """

    value: Any
    attempts: int
    failures: tuple[str, ...] = ()
    error: str | None = None
    backoff_s: float = 0.0
    reported_latency_s: float | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None


def _describe(exc: BaseException, default: str = "") -> str:
    try:
        message = str(exc) or default
    except Exception:  # an exception whose __str__ itself fails
        message = default or "(no message)"
    text = f"{type(exc).__name__}: {message}"
    return text if len(text) <= 300 else text[:297] + "..."


def call_backend(fn: Callable[[], Any], validate: Callable[[Any], Any], policy: RetryPolicy) -> CallOutcome:
    """Call ``fn()`` under ``policy``; never raises an ``Exception`` (see module docstring)."""
    failures: list[str] = []
    error = None
    backoff = 0.0
    for retry in range(policy.retries + 1):
        t0 = time.perf_counter()
        try:
            raw = fn()
        except TransientBackendError as exc:
            kind, error = "transient", _describe(exc)
        except TimeoutError as exc:
            kind, error = "timeout", _describe(exc, "backend call timed out")
        except Exception as exc:  # a fault of the service or client: recorded, never propagated into the env
            kind, error = "error", _describe(exc)
        else:
            elapsed = time.perf_counter() - t0
            reported = raw.latency_s if isinstance(raw, GenerationResult) else None
            reported = float(reported) if _finite_in(reported, 0.0, math.inf) else None
            if elapsed > policy.timeout_s or (reported is not None and reported > policy.timeout_s):
                took = reported if reported is not None and reported > policy.timeout_s else elapsed
                kind, error = "timeout", f"TimeoutError: backend call took {took:.3g} s > timeout {policy.timeout_s:g} s"
            else:
                try:
                    value = validate(raw)
                except Exception as exc:  # InvalidGenerationError, or a reply too broken to even inspect
                    kind, error = "invalid", _describe(exc)
                else:
                    return CallOutcome(value, retry + 1, tuple(failures), None, backoff, reported)
        failures.append(kind)
        if kind not in RETRYABLE or retry == policy.retries:
            break
        backoff += policy.backoff(retry)
    return CallOutcome(None, len(failures), tuple(failures), error, backoff, None)


@runtime_checkable
class GenerationBackend(Protocol):
    """Interface of a generation backend (simulated or a real LLM client)."""

    def generate(self, request: GenerationRequest, rng: np.random.Generator) -> GenerationResult: ...

    def verify(self, prompt: str, answer: str, hidden_correct: bool, rng: np.random.Generator) -> bool:
        """``True`` when the verifier flags ``answer`` as wrong or badly formatted."""
        ...


class SimulatedBackend:
    """Seeded, calibrated simulation of worker LLMs over the real retrieval results.

    :param world: the synthetic world (documents and facts).
    :param verify_recall: probability that the verifier flags a bad answer.
    :param verify_false_alarm: probability that it flags a good one.
    """

    def __init__(self, world: World, verify_recall: float = 0.85, verify_false_alarm: float = 0.05) -> None:
        self.world = world
        self.verify_recall = verify_recall
        self.verify_false_alarm = verify_false_alarm

    # -- helpers ---------------------------------------------------------------------------------------------
    def _plausible(self, relation: str, rng: np.random.Generator, avoid: str | None) -> str:
        """A wrong but well-formed value for ``relation``."""
        kind = RELATIONS[relation].value_kind
        return self.world._value_for(rng, kind, exclude=avoid)  # noqa: SLF001 - the world owns value sampling

    @staticmethod
    def _confidence(rng: np.random.Generator, correct: bool) -> float:
        mean, sd = (0.78, 0.12) if correct else (0.5, 0.18)
        return float(min(1.0, max(0.0, rng.normal(mean, sd))))

    def _emit(self, text: str, correct: bool, worker: WorkerSpec, rng: np.random.Generator) -> GenerationResult:
        if correct and rng.random() < worker.format_drift:
            text = drift(text, _ALL_DRIFTS[int(rng.integers(len(_ALL_DRIFTS)))])
        return GenerationResult(text, self._confidence(rng, correct))

    def _abstain(self, rng: np.random.Generator) -> GenerationResult:
        return GenerationResult(ABSTAIN_TEXT, float(min(1.0, max(0.0, rng.normal(0.1, 0.08)))))

    # -- interface -------------------------------------------------------------------------------------------
    def generate(self, request: GenerationRequest, rng: np.random.Generator) -> GenerationResult:
        w = request.worker
        if request.kind in ("lookup", "merged"):
            return self._lookup(request, rng)
        if any(x is None for x in request.inputs) or not request.inputs:
            # an upstream answer is missing (dependency not done): mostly abstain, sometimes make something up
            if rng.random() < 0.8:
                return self._abstain(rng)
            return GenerationResult(str(int(rng.integers(100, 5000))), self._confidence(rng, False))
        result = apply_op(request.op or "", [x for x in request.inputs if x is not None])
        skill = w.skills[request.kind]
        if result is not None and rng.random() < skill:
            return self._emit(result, True, w, rng)
        if result is None and rng.random() < w.abstain_rate:
            return self._abstain(rng)
        garbled = (
            f"Refund possible within {int(rng.integers(1, 90))} days."
            if request.op == "refund_reply"
            else str(int(rng.integers(100, 5000)))
        )
        return GenerationResult(garbled, self._confidence(rng, False))

    def _lookup(self, request: GenerationRequest, rng: np.random.Generator) -> GenerationResult:
        w = request.worker
        if request.inputs and request.inputs[0] is None:
            return (
                self._abstain(rng)
                if rng.random() < 0.8
                else GenerationResult(self._plausible(request.relations[0], rng, None), self._confidence(rng, False))
            )
        first = request.relations[0]
        subject = request.subject
        truth = self.world.facts.get((subject, first)) if subject is not None else None
        docs = [self.world.documents[i] for i in request.retrieved]
        gold_hit = truth is not None and any(
            d.subject == subject and d.relation == first and not d.is_distractor for d in docs
        )
        if request.kind == "merged":
            # The second hop must come from the model itself: only strong readers with the first fact manage it.
            second = request.relations[1]
            final = self.world.facts.get((truth, second)) if truth is not None else None
            p = (0.35 * w.skills["lookup"] if gold_hit else 0.5 * w.parametric_knowledge) if final is not None else 0.0
            if final is not None and rng.random() < p:
                return self._emit(final, True, w, rng)
            return GenerationResult(self._plausible(second, rng, final), self._confidence(rng, False))
        if gold_hit:
            if rng.random() < w.skills["lookup"]:
                return self._emit(truth, True, w, rng)
            same = [d for d in docs if d.relation == first and d.value != truth]
            wrong = same[0].value if same else self._plausible(first, rng, truth)
            return GenerationResult(wrong, self._confidence(rng, False))
        # no gold document: parametric memory, a near-duplicate's value, or an abstention
        if truth is not None and rng.random() < w.parametric_knowledge:
            return self._emit(truth, True, w, rng)
        same = [d for d in docs if d.relation == first]
        if same and rng.random() < 0.7:
            return GenerationResult(same[0].value, self._confidence(rng, False) * 0.9 + 0.1)
        if rng.random() < w.abstain_rate:
            return self._abstain(rng)
        return GenerationResult(self._plausible(first, rng, truth), self._confidence(rng, False))

    def verify(self, prompt: str, answer: str, hidden_correct: bool, rng: np.random.Generator) -> bool:
        return bool(rng.random() < (self.verify_false_alarm if hidden_correct else self.verify_recall))


def lookup_prompt(relations: tuple[str, ...], subject_text: str) -> str:
    """The question a lookup (or merged lookup) asks; also the retrieval query."""
    if len(relations) == 1:
        return RELATIONS[relations[0]].question.format(x=subject_text)
    return f"What is {phrase(relations[1], phrase(relations[0], subject_text))}?"


def parse_input(world: World, text: str | None) -> str | None:
    """The entity a downstream worker recovers from an upstream answer text (``None`` if unparseable)."""
    if text is None:
        return None
    return world.entity_index.get(normalize(text))

"""Calling a language model: validation of replies, retries with back-off, timeouts.

:func:`call_backend` is the one place a backend is called, and it never lets a fault escape into the
environment: a :class:`TransientBackendError` or a ``TimeoutError`` (raised, or a call that reports a
``latency_s`` above, or takes longer in wall-clock time than, ``RetryPolicy.timeout_s``) is retried up to
``RetryPolicy.retries`` times with a simulated, doubling back-off; any other exception, or a reply that is not a
valid :class:`~edo_gym.agents.protocol.LLMResponse` (see :func:`validate_response`), fails the call at once. A
failed call is reported in a :class:`CallOutcome`, and the caller charges it. A backend that can hang must honour
its own timeout (as HTTP clients do): a synchronous call cannot be interrupted from outside.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edo_gym.agents.protocol import LLMResponse

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


def validate_response(response: Any) -> LLMResponse:
    """``response`` as a clean :class:`LLMResponse` (plain ``int``/``float`` fields).

    :raises InvalidGenerationError: when it is not an ``LLMResponse``, its ``text`` is not a ``str`` (or is longer
        than ``MAX_RESULT_CHARS``), its ``confidence`` is not ``None`` or a finite number in [0, 1], a token count
        is not ``None`` or an integer in [0, ``MAX_COMPLETION_TOKENS``], or ``latency_s`` is not ``None`` or a
        finite number >= 0.
    """
    if type(response) is LLMResponse:  # fast path: a clean reply without usage or latency (what the simulator sends)
        conf = response.confidence
        if (
            type(response.text) is str
            and len(response.text) <= MAX_RESULT_CHARS
            and (conf is None or (type(conf) is float and 0.0 <= conf <= 1.0))
            and response.prompt_tokens is None
            and response.completion_tokens is None
            and response.latency_s is None
        ):
            return response
    if not isinstance(response, LLMResponse):
        raise InvalidGenerationError(f"backend returned {type(response).__name__}, expected LLMResponse")
    text, conf, lat = response.text, response.confidence, response.latency_s
    if not isinstance(text, str):
        raise InvalidGenerationError(f"LLMResponse.text must be str, got {type(text).__name__}")
    if len(text) > MAX_RESULT_CHARS:
        raise InvalidGenerationError(f"LLMResponse.text has {len(text)} characters, more than {MAX_RESULT_CHARS}")
    if conf is not None and not _finite_in(conf, 0.0, 1.0):
        raise InvalidGenerationError(f"LLMResponse.confidence must be None or a finite number in [0, 1], got {conf!r}")
    for name in ("prompt_tokens", "completion_tokens"):
        n = getattr(response, name)
        if n is not None and (
            not isinstance(n, (int, np.integer)) or isinstance(n, (bool, np.bool_)) or not 0 <= n <= MAX_COMPLETION_TOKENS
        ):
            raise InvalidGenerationError(
                f"LLMResponse.{name} must be None or an integer in [0, {MAX_COMPLETION_TOKENS}], got {n!r}"
            )
    if lat is not None and not _finite_in(lat, 0.0, math.inf):
        raise InvalidGenerationError(f"LLMResponse.latency_s must be None or a finite number >= 0, got {lat!r}")
    clean = (
        (conf is None or type(conf) is float)
        and (lat is None or type(lat) is float)
        and all(type(getattr(response, k)) in (int, type(None)) for k in ("prompt_tokens", "completion_tokens"))
    )
    if clean:
        return response
    return LLMResponse(
        text,
        None if response.prompt_tokens is None else int(response.prompt_tokens),
        None if response.completion_tokens is None else int(response.completion_tokens),
        None if lat is None else float(lat),
        None if conf is None else float(conf),
        bool(response.cached),
    )


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
            reported = raw.latency_s if isinstance(raw, LLMResponse) else None
            reported = float(reported) if reported is not None and _finite_in(reported, 0.0, math.inf) else None
            if elapsed > policy.timeout_s or (reported is not None and reported > policy.timeout_s):
                took = reported if reported is not None and reported > policy.timeout_s else elapsed
                kind, error = "timeout", f"TimeoutError: backend call took {took:.3g} s > timeout {policy.timeout_s:g} s"
            else:
                try:
                    value = validate(raw)
                except Exception as exc:  # InvalidGenerationError, or a reply too broken to even inspect
                    kind, error = "invalid", _describe(exc)
                else:
                    return CallOutcome(value, retry + 1, tuple(failures) if failures else (), None, backoff, reported)
        failures.append(kind)
        if kind not in RETRYABLE or retry == policy.retries:
            break
        backoff += policy.backoff(retry)
    return CallOutcome(None, len(failures), tuple(failures), error, backoff, None)

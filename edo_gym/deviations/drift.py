"""Drift: during an episode a worker changes how it answers.

With probability ``DeviationConfig.drift_rate`` an episode holds one drift: from an onset step on, one worker
either writes its answers in another format (``"format"``: units, order of fields, :func:`reformat`; the fact is
the same, but the workers that read it misread it) or stops answering (``"failure"``: its calls fail, charged, as a
degraded or rate-limited endpoint's do). It acts on the requests, behind the backend interface
(:class:`DriftingBackend`), so it works with the simulator and with a real model alike. Nothing announces it: the orchestrator notices
from the answers, from a verifier's verdict, or by routing around the worker.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from edo_gym.agents.protocol import LLMBackend, LLMRequest, LLMResponse
from edo_gym.config import DeviationConfig

DRIFT_KINDS = ("format", "failure")
_DAYS = re.compile(r"\b(\d+)\s+days?\b", re.IGNORECASE)
_NUMBER = re.compile(r"\b\d+\b")


def reformat(text: str) -> str:
    """``text`` in a drifted output format: windows in hours instead of days, figures in units instead of
    thousands, names written family name first. The fact is the same; a reader of the old format misreads it."""
    if _DAYS.search(text):
        return _DAYS.sub(lambda m: f"{int(m.group(1)) * 24} hours", text)
    if _NUMBER.fullmatch(text.strip()):
        return f"{int(text.strip()) * 1000:,}"
    words = text.strip().rstrip(".").split()
    return f"{words[-1]}, {' '.join(words[:-1])}" if len(words) > 1 else text


class WorkerDownError(RuntimeError):
    """A drifted worker's endpoint no longer answers (a failed call, charged, not retried)."""


@dataclass(frozen=True)
class Drift:
    """One episode's drift (hidden): worker ``worker`` (its name: ``agent``) changes at env step ``onset`` (counted
    from 0) to ``kind``."""

    worker: int
    agent: str
    onset: int
    kind: str


class DriftingBackend:
    """The team's backend with the episode's drift applied: the env sets :attr:`active` at the onset (and clears it
    at reset). The planner's requests and those for the other workers pass unchanged; any :class:`LLMBackend` can be
    wrapped.

    :param inner: the backend every request goes to.
    """

    def __init__(self, inner: LLMBackend) -> None:
        self.inner = inner
        #: The drift in force (``None``: none).
        self.active: Drift | None = None

    def complete(self, request: LLMRequest) -> LLMResponse:
        drift = self.active
        if drift is None or request.agent != drift.agent:
            return self.inner.complete(request)
        if drift.kind == "failure":
            raise WorkerDownError(f"worker {drift.agent} is not answering")
        response = self.inner.complete(request)
        if request.role != "worker":
            return response
        return dataclasses.replace(response, text=reformat(response.text))

    def __getattr__(self, name: str) -> Any:  # cache_identity, calls, ... of the wrapped backend
        # only once constructed: unpickling looks attributes up before ``inner`` is set, and must not recurse
        inner = self.__dict__.get("inner")
        if inner is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(inner, name)


def draw_drift(agents: list[str], step_limit: int, config: DeviationConfig, rng: np.random.Generator) -> Drift | None:
    """An episode's drift, or ``None`` (probability ``1 - drift_rate``). The onset falls in the first third of the
    step limit, so that most episodes meet it before they submit."""
    if rng.random() >= config.drift_rate:
        return None
    worker = int(rng.integers(len(agents)))
    onset = int(rng.integers(1, max(2, step_limit // 3)))
    kind = DRIFT_KINDS[1] if rng.random() < config.drift_failure_share else DRIFT_KINDS[0]
    return Drift(worker=worker, agent=agents[worker], onset=onset, kind=kind)

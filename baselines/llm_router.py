"""``LLMRouter``: the "dynamic LLM orchestration" school with a real (or recorded) language model deciding every step.

Observation-only like the other heuristics: it reads ``info["text"]`` (the env's text view of the state: task,
plan as written, results, budget, legal actions; enable it with ``gym.make(..., info_text=True)``) and the action
mask from the observation, asks its backend for the next action name (``edo_gym.llm.orchestrator``), and parses
it. A reply that names no legal action falls back to the static pipeline's choice, and is counted
(``fallbacks``). Every decision is a real call whose tokens, call and latency are charged on the env's ledger by the
evaluation harness (``decision_cost`` after each ``act``), so learned, static and LLM-dynamic orchestration compare on
one table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from baselines.heuristics import HeuristicPolicy, Obs, ObsView, StaticPipeline
from edo_gym.agents.backend import RetryPolicy, call_backend, validate_response
from edo_gym.agents.protocol import LLMBackend, LLMRequest
from edo_gym.llm.orchestrator import ROUTER_OUTPUT_FORMAT, ROUTER_SYSTEM, action_parser

#: Estimated tokens of a router reply when the server reports none.
REPLY_TOKENS = 12
#: Simulated latency of a router call when the backend reports none, seconds.
ROUTER_LATENCY_S = 0.6


class LLMRouter(HeuristicPolicy):
    """An LLM orchestrator (see module docstring).

    :param backend: any :class:`~edo_gym.agents.protocol.LLMBackend` (an ``OpenAIBackend``, possibly cached).
    :param action_names: the env's action names (``env.unwrapped.action_names``: static, like the action space).
    :param seed: seeds the sampling seeds of the router's requests.
    """

    name = "llm_router"

    def __init__(self, backend: LLMBackend, action_names: Sequence[str], seed: int = 0, retries: int = 1) -> None:
        self.backend = backend
        self.action_names = list(action_names)
        self.rng = np.random.default_rng(seed)
        self.policy = RetryPolicy(retries=retries, backoff_s=0.5, timeout_s=120.0)
        self.fallbacks = 0
        self.decisions = 0
        self.decision_cost = (0, 0, 0.0)
        self._fallback = StaticPipeline()

    def reset(self, obs: Obs, info: dict[str, Any]) -> None:
        self._fallback.reset(obs, info)

    def act(self, obs: Obs, info: dict[str, Any]) -> int:
        if "text" not in info:
            raise ValueError("LLMRouter reads info['text']: make the env with gym.make(..., info_text=True)")
        mask = obs["action_mask"] > 0
        request = LLMRequest(
            role="router", agent="router", system=ROUTER_SYSTEM, task="", instruction=info["text"],
            output_format=ROUTER_OUTPUT_FORMAT, max_tokens=24, seed=int(self.rng.integers(2**31 - 1)),
        )  # fmt: skip
        outcome = call_backend(lambda: self.backend.complete(request), validate_response, self.policy)
        response = outcome.value
        self.decisions += 1
        prompt = len(request.system.split()) + len(request.instruction.split())  # words, as a floor when unreported
        if response is None:
            self.decision_cost = (prompt * outcome.attempts, outcome.attempts, ROUTER_LATENCY_S * outcome.attempts)
            choice = None
        else:
            tokens = (response.prompt_tokens or int(prompt * 1.3)) + (response.completion_tokens or REPLY_TOKENS)
            latency = response.latency_s if response.latency_s is not None else ROUTER_LATENCY_S
            self.decision_cost = (tokens, outcome.attempts, latency)
            choice = action_parser(response.text, self.action_names, list(mask))
        if choice is None:
            self.fallbacks += 1
            return self._fallback.act(obs, info)
        return int(choice)


def legal_names(obs: Obs, action_names: Sequence[str]) -> list[str]:
    """Names of the legal actions of an observation."""
    v = ObsView(obs)
    return [n for k, n in enumerate(action_names) if v.legal(k)]

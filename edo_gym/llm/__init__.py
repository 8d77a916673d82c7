"""Real language models behind the one backend protocol (:mod:`edo_gym.agents.protocol`).

- :class:`~edo_gym.llm.client.OpenAIBackend`: any OpenAI-compatible server (needs ``pip install "edo-gym[llm]"``).
- :class:`~edo_gym.llm.cache.CachedBackend` / :class:`~edo_gym.llm.cache.ResponseCache`: record/replay on disk.
- :class:`~edo_gym.llm.server.LocalLLMServer` and ``edo serve-llm``: SmolLM2-135M-Instruct through llama.cpp.
- :mod:`edo_gym.llm.orchestrator`: the text interface of an LLM orchestrator (``obs_to_text``, ``action_parser``).

Nothing here imports ``openai`` or ``xllamacpp`` until it is used, so the cache and the orchestrator work without
the ``llm`` extra.
"""

from edo_gym.llm.cache import CACHE_MODES, CachedBackend, ResponseCache
from edo_gym.llm.client import OpenAIBackend
from edo_gym.llm.counts import CallCounts
from edo_gym.llm.errors import EmptyAnswerError, LLMBackendError, LLMTimeoutError, LLMTransientError, ReplayMissError
from edo_gym.llm.orchestrator import action_parser, obs_to_text, router_request
from edo_gym.llm.server import SMOLLM2_NAME, LocalLLMServer, bundled_model_path

__all__ = [
    "CACHE_MODES",
    "SMOLLM2_NAME",
    "CachedBackend",
    "CallCounts",
    "EmptyAnswerError",
    "LLMBackendError",
    "LLMTimeoutError",
    "LLMTransientError",
    "LocalLLMServer",
    "OpenAIBackend",
    "ReplayMissError",
    "ResponseCache",
    "action_parser",
    "bundled_model_path",
    "obs_to_text",
    "router_request",
]

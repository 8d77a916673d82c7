"""Errors of the real-LLM path. Every message names the agent, the endpoint (or cache file) and what to check;
none ever contains an API key.

The protocol's contract (:class:`~edo_gym.agents.protocol.LLMBackend`): a transient fault raises
``TransientBackendError`` (or ``TimeoutError``) and the caller may retry it; any other exception fails the call.
"""

from __future__ import annotations

from edo_gym.agents.backend import TransientBackendError


class LLMBackendError(RuntimeError):
    """A call to a language model failed for good (bad request, rejected key, unknown model, empty answer).

    :param message: the full explanation (which agent, which endpoint, what to check).
    :param agent: the agent whose call failed (``LLMRequest.agent``), or ``""``.
    :param role: its role (``LLMRequest.role``), or ``""``.
    :param endpoint: the server's base URL without credentials, or the cache file, or ``""``.
    """

    def __init__(self, message: str, *, agent: str = "", role: str = "", endpoint: str = "") -> None:
        super().__init__(message)
        self.agent = agent
        self.role = role
        self.endpoint = endpoint


class LLMTransientError(TransientBackendError, LLMBackendError):
    """A temporary failure that outlived the backend's own retries (429, 5xx, dropped connection, garbage reply).

    It is a ``TransientBackendError``, so the env's caller may retry it once more or fall back (charged)."""


class LLMTimeoutError(LLMTransientError, TimeoutError):
    """No answer within the backend's timeout (after its retries); also a ``TimeoutError``."""


class EmptyAnswerError(LLMBackendError):
    """The model answered with no text (after the backend's retries). Not transient: with a fixed seed the same
    request gets the same empty answer, so the caller should fail the call (charged) rather than retry."""


class ReplayMissError(LLMBackendError, LookupError):
    """Replay mode met a request that the recording never saw."""


class LLMCacheError(LLMBackendError):
    """The record/replay cache file cannot be used (not an SQLite file, not an EDO-Gym cache, unreadable)."""

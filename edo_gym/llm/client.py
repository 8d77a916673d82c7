"""``OpenAIBackend``: the :class:`~edo_gym.agents.protocol.LLMBackend` for any OpenAI-compatible server (vLLM,
llama.cpp / ``edo serve-llm``, Ollama, hosted APIs), on the official ``openai`` package (``pip install "edo-gym[llm]"``).

The API key. It is read from one environment variable only (``OPENAI_API_KEY``, or the one named by
``api_key_env``), when the client is built; it is never an argument, never logged, printed, pickled or written to a
cache, and every error message is scrubbed of it. When the variable is unset, a placeholder key (``"no-key"``) is
sent, which local servers ignore; a server that wants a real key answers 401/403, and the error says which variable
to set. Without a ``base_url`` (the hosted OpenAI API) an unset variable is an error at construction.

Retries. A 429, a 5xx, a dropped connection, a timeout, a reply that is not a chat completion (garbage) and an
empty answer are retried ``retries`` times with a doubling back-off (``backoff_s``, ``2 * backoff_s``, ... at most
``max_backoff_s``; really slept: this is a real service). What still fails raises :class:`LLMTransientError`
(:class:`LLMTimeoutError` for a timeout; both are ``TransientBackendError``\\ s, so the env's caller may retry
or fall back), or :class:`EmptyAnswerError` for an empty answer; any other HTTP error (400, 401, 403, 404, 422)
raises :class:`LLMBackendError` at once. The ``openai`` client's own retries are off, so every attempt is
counted here.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from edo_gym.agents.protocol import LLMRequest, LLMResponse
from edo_gym.llm.counts import CallCounter, CallCounts
from edo_gym.llm.errors import EmptyAnswerError, LLMBackendError, LLMTimeoutError, LLMTransientError

log = logging.getLogger(__name__)

#: The environment variable the API key is read from unless ``api_key_env`` names another.
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
#: Sent when the key variable is unset (local servers accept any key).
PLACEHOLDER_API_KEY = "no-key"
#: What to install when ``openai`` is missing.
LLM_EXTRA_HINT = 'pip install "edo-gym[llm]"'


def _import_openai() -> Any:
    try:
        import openai
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(f"OpenAIBackend needs the openai package: {LLM_EXTRA_HINT}") from exc
    return openai


def public_endpoint(base_url: str | None) -> str:
    """``base_url`` without user info, query or fragment (safe to show); the OpenAI API's URL when ``None``."""
    if not base_url:
        return "https://api.openai.com/v1"
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


def confidence_from_logprobs(logprobs: list[float]) -> float | None:
    """The geometric mean of the token probabilities, ``exp(mean(logprob))``, in [0, 1]; ``None`` for no tokens.

    One number per answer: 1 when the model was sure of every token, near 0 when it guessed."""
    values = [float(v) for v in logprobs if v is not None and math.isfinite(float(v))]
    if not values:
        return None
    return float(min(1.0, max(0.0, math.exp(sum(values) / len(values)))))


class _Garbage(Exception):
    """The server's 200 reply is not a chat completion."""


class _Empty(Exception):
    """The completion has no text."""


class OpenAIBackend:
    """Answers :class:`LLMRequest`\\ s with the chat completions API of an OpenAI-compatible server.

    :param base_url: the API root, e.g. ``http://127.0.0.1:8080/v1`` (``None``: the hosted OpenAI API).
    :param model: the model every agent uses unless ``models`` says otherwise.
    :param models: a model per agent or per role, e.g. ``{"planner": "big", "worker_small": "tiny"}``; an agent's
        own entry wins over its role's, and both over ``model``.
    :param api_key_env: the environment variable holding the API key (see the module docstring).
    :param timeout_s: seconds one HTTP attempt may take (connect and read).
    :param retries: extra attempts after a transient failure (0: none).
    :param backoff_s: seconds slept before the first retry; doubled before each further one.
    :param max_backoff_s: longest back-off, seconds.
    :param max_concurrent: most requests in flight at once from this backend (threads block beyond it).
    :param logprobs: ask for token logprobs (the answer's confidence); servers without them give ``None``.
    """

    def __init__(
        self,
        base_url: str | None,
        model: str,
        *,
        models: Mapping[str, str] | None = None,
        api_key_env: str = DEFAULT_API_KEY_ENV,
        timeout_s: float = 60.0,
        retries: int = 2,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        max_concurrent: int = 4,
        logprobs: bool = True,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty model name, got {model!r}")
        models = dict(models or {})
        for name, value in models.items():
            if not isinstance(value, str) or not value:
                raise ValueError(f"models[{name!r}] must be a non-empty model name, got {value!r}")
        if not isinstance(api_key_env, str) or not api_key_env:
            raise ValueError(f"api_key_env must name an environment variable, got {api_key_env!r}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
        if not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an integer >= 0, got {retries!r}")
        if not backoff_s >= 0 or not max_backoff_s >= 0:
            raise ValueError(f"backoff_s and max_backoff_s must be >= 0 seconds, got {backoff_s!r}, {max_backoff_s!r}")
        if not isinstance(max_concurrent, int) or max_concurrent < 1:
            raise ValueError(f"max_concurrent must be an integer >= 1, got {max_concurrent!r}")
        self.base_url = base_url
        self.endpoint = public_endpoint(base_url)
        self.model = model
        self.models = models
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.retries = retries
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.max_concurrent = max_concurrent
        self.logprobs = bool(logprobs)
        self._openai = _import_openai()
        self._setup()

    # -- state that never leaves the process: the key, the HTTP client, locks ----------------------------------

    def _setup(self) -> None:
        key = os.environ.get(self.api_key_env) or ""
        if not key and self.base_url is None:
            raise ValueError(
                f"no API key: set the environment variable {self.api_key_env} (the hosted OpenAI API needs one), "
                "or pass base_url= for a local server"
            )
        self._key_is_set = bool(key)
        self._api_key = key or PLACEHOLDER_API_KEY
        self._client: Any = None
        self._client_pid = -1
        self._client_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.max_concurrent)
        self._counter = CallCounter()
        self._attempts = 0

    def __getstate__(self) -> dict:
        # Pickled (e.g. into a SubprocVecEnv worker) without the key, the client or the locks: the receiving
        # process reads the key from its own environment.
        state = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        state["counts_at_pickle"] = self.counts
        return state

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        state.pop("counts_at_pickle", None)
        self.__dict__.update(state)
        self._openai = _import_openai()
        self._setup()

    def __repr__(self) -> str:
        return f"OpenAIBackend(endpoint={self.endpoint!r}, model={self.model!r}, models={self.models!r})"

    def _http(self) -> Any:
        """The ``openai`` client of this process (built lazily, again after a fork)."""
        with self._client_lock:
            if self._client is None or self._client_pid != os.getpid():
                self._client = self._openai.OpenAI(
                    api_key=self._api_key, base_url=self.base_url, timeout=self.timeout_s, max_retries=0
                )
                self._client_pid = os.getpid()
            return self._client

    def _redact(self, text: str) -> str:
        if self._key_is_set and len(self._api_key) >= 4:
            text = text.replace(self._api_key, "***")
        return text

    # -- public API ---------------------------------------------------------------------------------------------

    @property
    def counts(self) -> CallCounts:
        """Calls answered by the server (``real``) and calls that raised (``failed``)."""
        return self._counter.snapshot()

    @property
    def attempts(self) -> int:
        """HTTP requests sent by this process, retries included."""
        return self._attempts

    def model_for(self, request: LLMRequest) -> str:
        """The model that answers ``request``: its agent's entry in ``models``, else its role's, else ``model``."""
        return self.models.get(request.agent) or self.models.get(request.role) or self.model

    def cache_identity(self, request: LLMRequest) -> tuple[str, dict]:
        """``(model, extra)`` for :meth:`LLMRequest.cache_key`: the endpoint model and the sampling parameters that
        are not in the request. The base URL is left out on purpose: a local server gets a new port every run."""
        return self.model_for(request), {"api": "chat.completions", "logprobs": self.logprobs}

    def complete(self, request: LLMRequest) -> LLMResponse:
        """Send ``request`` (with its ``seed``, ``temperature``, ``max_tokens``, and its ``stop`` sequences and JSON schema
        (``response_format``) when it has them) and return the answer.

        ``latency_s`` is the wall-clock time from sending the first attempt to the answer (back-offs included, the
        wait for a free slot under ``max_concurrent`` excluded). Usage is the server's (``None`` where it gives
        none: the caller estimates). ``confidence`` is :func:`confidence_from_logprobs` of the answer's tokens, or
        ``None`` when the server returns no logprobs.

        :raises LLMTransientError: 429 / 5xx / connection / garbage after all retries (``LLMTimeoutError`` for
            timeouts).
        :raises EmptyAnswerError: the model's answer had no text, after all retries.
        :raises LLMBackendError: any other HTTP error (bad request, rejected key, unknown model).
        """
        model = self.model_for(request)
        params: dict[str, Any] = {
            "model": model,
            "messages": request.messages(),
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "seed": request.seed,
        }
        if self.logprobs:
            params["logprobs"] = True
        if request.stop:
            if not all(isinstance(x, str) and x for x in request.stop):
                raise ValueError(f"LLMRequest.stop must hold non-empty strings, got {request.stop!r}")
            params["stop"] = list(request.stop)
        schema = request.schema()
        if schema is not None:
            # OpenAI's structured output; llama.cpp and vLLM turn the schema into a grammar that constrains decoding
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": request.role, "schema": schema, "strict": True},
            }
        openai = self._openai
        fatal: LLMBackendError | None = None
        with self._slots:
            start = time.perf_counter()
            last_kind, last_detail = "", ""
            for attempt in range(self.retries + 1):
                if attempt:
                    delay = min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)
                    log.warning(
                        "%s %r: %s from %s, retry %d/%d in %.2f s",
                        request.role, request.agent, last_kind, self.endpoint, attempt, self.retries, delay,
                    )  # fmt: skip
                    time.sleep(delay)
                with self._client_lock:
                    self._attempts += 1
                try:
                    completion = self._http().chat.completions.create(**params)
                    text, prompt_tokens, completion_tokens, confidence = self._read(completion)
                except openai.APITimeoutError:
                    last_kind, last_detail = "timeout", f"no answer within {self.timeout_s:g} s"
                except openai.APIConnectionError as exc:
                    last_kind, last_detail = "connection error", type(exc.__cause__ or exc).__name__
                except openai.APIStatusError as exc:
                    status = exc.status_code
                    if status == 429 or status >= 500 or status == 408:
                        last_kind, last_detail = f"HTTP {status}", self._server_message(exc)
                        continue
                    fatal = self._fatal(request, model, status, self._server_message(exc))
                    break
                except (openai.APIResponseValidationError, _Garbage) as exc:
                    last_kind, last_detail = "garbage reply", str(exc)[:200]
                except _Empty as exc:
                    last_kind, last_detail = "empty answer", str(exc)
                else:
                    self._counter.add("real")
                    return LLMResponse(
                        text=text,
                        prompt_tokens=prompt_tokens,
                        completion_tokens=completion_tokens,
                        latency_s=time.perf_counter() - start,
                        confidence=confidence,
                    )
        error = fatal or self._exhausted(request, model, last_kind, last_detail)
        self._counter.fail(f"{type(error).__name__}: {error}")
        # Raised outside the except blocks: the openai exception (whose text may echo the key) is not attached.
        raise error

    # -- helpers ------------------------------------------------------------------------------------------------

    @staticmethod
    def _read(completion: Any) -> tuple[str, int | None, int | None, float | None]:
        """Text, usage and confidence of a chat completion; :class:`_Garbage` / :class:`_Empty` when it has none."""
        choices = getattr(completion, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise _Garbage(f"no choices in the reply (got {type(completion).__name__})")
        choice = choices[0]
        message = getattr(choice, "message", None)
        if message is None:
            raise _Garbage("the first choice has no message")
        text = getattr(message, "content", None)
        if text is not None and not isinstance(text, str):
            raise _Garbage(f"message content is {type(text).__name__}, not text")
        if not text or not text.strip():
            raise _Empty(f"finish_reason={getattr(choice, 'finish_reason', None)!r}")
        usage = getattr(completion, "usage", None)

        def _count(name: str) -> int | None:
            value = getattr(usage, name, None)
            return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

        tokens = getattr(getattr(choice, "logprobs", None), "content", None) or []
        confidence = confidence_from_logprobs([getattr(t, "logprob", None) for t in tokens])
        return text, _count("prompt_tokens"), _count("completion_tokens"), confidence

    def _server_message(self, exc: Any) -> str:
        body = getattr(exc, "body", None)
        message = body.get("message") if isinstance(body, dict) else None
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            message = body["error"].get("message")
        return self._redact(str(message or getattr(exc, "message", "") or ""))[:300]

    def _who(self, request: LLMRequest, model: str) -> str:
        return f"{request.role} {request.agent!r} calling model {model!r} at {self.endpoint}"

    def _fatal(self, request: LLMRequest, model: str, status: int, detail: str) -> LLMBackendError:
        if status in (401, 403):
            key_state = "is set" if self._key_is_set else f"is unset, so the placeholder {PLACEHOLDER_API_KEY!r} was sent"
            hint = f"the server rejected the API key: check the environment variable {self.api_key_env} ({key_state})"
        elif status == 404:
            hint = f"not found: check that base_url is the API root (usually ending in /v1) and that {self.endpoint}/models lists {model!r}"
        else:
            hint = (
                "the server rejected the request: check the model name and the parameters it accepts "
                "(seed, temperature, max_tokens, stop, response_format; logprobs: pass logprobs=False if it has none)"
            )
        message = f"{self._who(request, model)}: HTTP {status}: {hint}" + (f" (server said: {detail})" if detail else "")
        return LLMBackendError(self._redact(message), agent=request.agent, role=request.role, endpoint=self.endpoint)

    def _exhausted(self, request: LLMRequest, model: str, kind: str, detail: str) -> LLMBackendError:
        hints = {
            "timeout": f"raise timeout_s ({self.timeout_s:g} s) or check the server's load",
            "connection error": "check that the server is running and reachable there (`edo serve-llm --port PORT` starts a local one)",
            "garbage reply": "check that base_url is an OpenAI-compatible API root (usually ending in /v1)",
            "empty answer": "raise max_tokens or check the prompt and the model",
        }
        hint = hints.get(kind, "the server is overloaded or failing: check its log, or lower max_concurrent")
        attempts = self.retries + 1
        message = (
            f"{self._who(request, model)}: {kind} ({detail}) on all {attempts} attempt{'s' if attempts > 1 else ''}: {hint}"
        )
        cls = {"timeout": LLMTimeoutError, "empty answer": EmptyAnswerError}.get(kind, LLMTransientError)
        return cls(self._redact(message), agent=request.agent, role=request.role, endpoint=self.endpoint)

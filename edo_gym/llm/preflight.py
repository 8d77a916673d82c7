"""Before a run with a real model: which model the server serves, and whether a server answers at all.

A command that records with no server reachable would otherwise spend every call's timeout and retries before it
reports anything; :func:`resolve_model` asks the server's ``GET /v1/models`` once, with a short timeout, and fails
with one line that says what to do. It also names the model requests are sent (and recorded) under when the user
gave none: the server's own, or in replay the one model the recording holds.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

from edo_gym.llm.client import DEFAULT_API_KEY_ENV, public_endpoint
from edo_gym.llm.errors import LLMBackendError

#: Seconds the ``/models`` request may take.
PREFLIGHT_TIMEOUT_S = 5.0


class ServerUnreachableError(LLMBackendError):
    """No OpenAI-compatible server answers at the base URL."""


def served_models(
    base_url: str, *, api_key_env: str = DEFAULT_API_KEY_ENV, timeout_s: float = PREFLIGHT_TIMEOUT_S
) -> list[str]:
    """The model ids ``GET {base_url}/models`` lists (an OpenAI-compatible server's own names for its models).

    The API key (read from ``api_key_env`` when set) is sent as a bearer token and never appears in an error.

    :raises ServerUnreachableError: nothing answers there (connection refused, unknown host, timeout).
    :raises LLMBackendError: something answers, but not with a model list (an HTTP error, or not JSON).
    """
    endpoint = public_endpoint(base_url)
    request = urllib.request.Request(base_url.rstrip("/") + "/models", headers={"Accept": "application/json"})
    key = os.environ.get(api_key_env) or ""
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:  # noqa: S310 - the user's own server
            body = reply.read()
    except urllib.error.HTTPError as exc:
        hint = f"check the environment variable {api_key_env}" if exc.code in (401, 403) else "check that it is the API root"
        raise LLMBackendError(
            f"the server at {endpoint} answered GET /models with HTTP {exc.code}: {hint} (usually ending in /v1), "
            "or pass --model NAME",
            endpoint=endpoint,
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ServerUnreachableError(
            f"no LLM server answers at {endpoint} ({reason}): start one (`edo serve-llm --port 8080` serves the bundled "
            "model at http://127.0.0.1:8080/v1), check --base-url, or replay a recording (--llm-cache-mode replay)",
            endpoint=endpoint,
        ) from None
    try:
        data = json.loads(body)
        ids = [str(m["id"]) for m in data["data"]]
    except (ValueError, KeyError, TypeError):
        raise LLMBackendError(
            f"the server at {endpoint} answered GET /models with something that is not a model list: check that "
            "--base-url is an OpenAI-compatible API root (usually ending in /v1)",
            endpoint=endpoint,
        ) from None
    return ids


def resolve_model(
    base_url: str,
    model: str | None,
    *,
    mode: str,
    held_models: list[str] | None = None,
    api_key_env: str = DEFAULT_API_KEY_ENV,
    timeout_s: float = PREFLIGHT_TIMEOUT_S,
) -> str:
    """The model name requests are sent and recorded under, after checking that a server answers when one is needed.

    :param model: the name the user gave (``--model``), or ``None``.
    :param mode: the cache mode (``off``, ``record``, ``read-through``, ``replay``); every mode but ``replay`` needs a
        server, and checks it here.
    :param held_models: in replay without ``model``, the models the recording holds (one is used; none or several is
        an error that lists them).
    :raises ServerUnreachableError: a server is needed and none answers.
    :raises LLMBackendError: the server lists no model or several and ``model`` is ``None``.
    :raises ValueError: replay without ``model`` and the recording does not hold exactly one model.
    """
    endpoint = public_endpoint(base_url)
    if mode == "replay":
        if model:
            return model
        held = list(held_models or [])
        if len(held) == 1:
            return held[0]
        if not held:
            raise ValueError("the recording holds no answers, so it names no model to replay: record one first")
        raise ValueError(f"the recording holds answers from several models {held}: pass --model NAME to choose one")
    ids = served_models(base_url, api_key_env=api_key_env, timeout_s=timeout_s)
    if model:
        return model
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise LLMBackendError(f"the server at {endpoint} lists no models: pass --model NAME", endpoint=endpoint)
    raise LLMBackendError(
        f"the server at {endpoint} serves several models {ids[:20]}: pass --model NAME to choose one", endpoint=endpoint
    )

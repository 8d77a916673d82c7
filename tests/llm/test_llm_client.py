"""``OpenAIBackend`` over HTTP: a real completion from the local model, and faults of a remote service.

The happy path runs against the real llama.cpp server (SmolLM2, started by a fixture on a free port). Faults a
local model never makes (500, 429, hangs, garbage, empty answers, a rejected key) come from ``FaultServer``, a
tiny HTTP server that plays a failing remote service; it is used for fault injection only.
"""

from __future__ import annotations

import json
import logging
import pickle
import socket
import sqlite3
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("openai")

from edo_gym.agents.backend import TransientBackendError  # noqa: E402
from edo_gym.agents.protocol import LLMBackend, LLMRequest  # noqa: E402
from edo_gym.llm.cache import CachedBackend  # noqa: E402
from edo_gym.llm.client import OpenAIBackend, confidence_from_logprobs, public_endpoint  # noqa: E402
from edo_gym.llm.errors import EmptyAnswerError, LLMBackendError, LLMTimeoutError, LLMTransientError  # noqa: E402
from tests.openai_fake import FaultServer  # noqa: E402

SECRET = "sk-edo-test-7f3c9a1e5b2d4086-do-not-leak"
KEY_ENV = "EDO_TEST_LLM_KEY"

REQUEST = LLMRequest(
    role="worker",
    agent="w0",
    system="You answer questions from the documents, briefly.",
    task="Where does Alice Smith live?",
    instruction="Which city does Alice Smith live in?",
    documents=("Alice Smith lives in Paris.", "Bob Jones lives in Rome."),
    output_format="the city name only",
    max_tokens=12,
    seed=3,
)


@pytest.fixture
def fault_server() -> Iterator:
    servers: list[FaultServer] = []

    def make(*script: str) -> FaultServer:
        servers.append(FaultServer(list(script)))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


@pytest.fixture
def secret_key(monkeypatch) -> str:
    monkeypatch.setenv(KEY_ENV, SECRET)
    return SECRET


def _backend(base_url: str, **kwargs) -> OpenAIBackend:
    kwargs.setdefault("retries", 2)
    kwargs.setdefault("backoff_s", 0.01)
    kwargs.setdefault("timeout_s", 5.0)
    kwargs.setdefault("api_key_env", KEY_ENV)
    return OpenAIBackend(base_url, "fake-model", **kwargs)


# -- the request and the response ---------------------------------------------------------------------------------------
def test_is_an_llm_backend(fault_server):
    assert isinstance(_backend(fault_server("ok").base_url), LLMBackend)


def test_sends_the_messages_seed_temperature_max_tokens_and_asks_for_logprobs(fault_server):
    server = fault_server("ok")
    request = LLMRequest(role="planner", agent="planner", system="s", task="t", instruction="i", temperature=0.7, seed=42)
    _backend(server.base_url).complete(request)
    body = server.requests[0]["body"]
    assert body["messages"] == request.messages()
    assert (body["seed"], body["temperature"], body["max_tokens"], body["logprobs"]) == (42, 0.7, request.max_tokens, True)


def test_sends_the_json_schema_as_response_format_and_the_stop_sequences(fault_server):
    server = fault_server("ok")
    schema = '{"properties":{"steps":{"type":"array"}},"type":"object"}'
    request = LLMRequest(role="planner", agent="planner", system="s", task="t", instruction="i", json_schema=schema)
    _backend(server.base_url).complete(request)
    _backend(server.base_url).complete(REQUEST)
    _backend(server.base_url).complete(
        LLMRequest(role="worker", agent="w0", system="s", task="t", instruction="i", stop=("\n",))
    )
    planner, plain, stopped = (r["body"] for r in server.requests)
    assert planner["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "planner", "schema": json.loads(schema), "strict": True},
    }
    assert "stop" not in planner and "response_format" not in plain and "stop" not in plain
    assert stopped["stop"] == ["\n"] and "response_format" not in stopped


def test_a_model_per_agent_then_per_role_then_the_default(fault_server):
    server = fault_server("ok")
    backend = _backend(server.base_url, models={"planner": "big", "worker": "small", "w_cheap": "tiny"})
    for agent, role in [("planner", "planner"), ("w0", "worker"), ("w_cheap", "worker"), ("v0", "verifier")]:
        backend.complete(LLMRequest(role=role, agent=agent, system="s", task="t", instruction="i"))
    assert [r["body"]["model"] for r in server.requests] == ["big", "small", "tiny", "fake-model"]


def test_reads_usage_and_confidence_and_measures_latency(fault_server):
    response = _backend(fault_server("ok").base_url).complete(REQUEST)
    assert (response.text, response.prompt_tokens, response.completion_tokens) == ("Paris", 12, 1)
    assert response.confidence == pytest.approx(confidence_from_logprobs([-0.1]))
    assert response.latency_s > 0 and not response.cached


def test_usage_and_confidence_are_none_when_the_server_gives_none(fault_server):
    response = _backend(fault_server("bare").base_url).complete(REQUEST)
    assert (response.text, response.prompt_tokens, response.completion_tokens, response.confidence) == (
        "Paris", None, None, None,
    )  # fmt: skip


def test_confidence_is_the_geometric_mean_token_probability():
    assert confidence_from_logprobs([0.0, 0.0]) == 1.0
    assert confidence_from_logprobs([-1.0, -3.0]) == pytest.approx(0.1353, abs=1e-4)
    assert confidence_from_logprobs([]) is None


def test_the_endpoint_shown_has_no_credentials():
    assert public_endpoint("http://user:pw@example.test:8080/v1/?token=x") == "http://example.test:8080/v1"


# -- faults: retried, then a clear error --------------------------------------------------------------------------------
@pytest.mark.parametrize("fault", ["500", "503", "429", "garbage", "no-choices", "empty"])
def test_a_fault_is_retried_and_a_later_answer_returned(fault_server, fault):
    server = fault_server(fault, fault, "ok")
    backend = _backend(server.base_url)
    assert backend.complete(REQUEST).text == "Paris"
    assert backend.attempts == 3
    assert (backend.counts.real, backend.counts.failed) == (1, 0)


@pytest.mark.parametrize(
    "fault, error, says",
    [
        ("500", LLMTransientError, "HTTP 500"),
        ("429", LLMTransientError, "HTTP 429"),
        ("garbage", LLMTransientError, "garbage reply"),
        ("no-choices", LLMTransientError, "garbage reply"),
    ],
)
def test_a_persistent_fault_raises_a_transient_error_naming_agent_and_endpoint(fault_server, fault, error, says):
    server = fault_server(fault)
    backend = _backend(server.base_url)
    with pytest.raises(error) as info:
        backend.complete(REQUEST)
    message = str(info.value)
    assert isinstance(info.value, TransientBackendError)  # the env's caller may retry or fall back
    assert says in message and "worker 'w0'" in message and server.base_url in message and "3 attempts" in message
    assert (info.value.agent, info.value.endpoint) == ("w0", server.base_url)
    assert len(server.requests) == 3 and backend.counts.failed == 1


def test_an_empty_answer_fails_clearly_and_is_not_transient(fault_server):
    with pytest.raises(EmptyAnswerError, match="empty answer.*max_tokens") as info:
        _backend(fault_server("empty").base_url).complete(REQUEST)
    assert not isinstance(info.value, TransientBackendError)


def test_a_hanging_server_times_out(fault_server):
    backend = _backend(fault_server("hang").base_url, timeout_s=0.5, retries=1)
    start = time.perf_counter()
    with pytest.raises(LLMTimeoutError, match=r"timeout \(no answer within 0.5 s\).*raise timeout_s") as info:
        backend.complete(REQUEST)
    assert isinstance(info.value, TimeoutError) and isinstance(info.value, TransientBackendError)
    assert time.perf_counter() - start < 2.5


def test_a_server_that_is_not_running_is_a_connection_error_with_a_hint():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = _backend(f"http://127.0.0.1:{port}/v1", retries=1)
    with pytest.raises(LLMTransientError, match=rf"127.0.0.1:{port}/v1: connection error.*edo serve-llm"):
        backend.complete(REQUEST)


@pytest.mark.parametrize("status, says", [("404", "/models lists 'fake-model'"), ("400", "rejected the request")])
def test_a_client_error_fails_at_once_with_what_to_check(fault_server, status, says):
    server = fault_server(status)
    with pytest.raises(LLMBackendError, match=says) as info:
        _backend(server.base_url).complete(REQUEST)
    assert not isinstance(info.value, TransientBackendError)
    assert len(server.requests) == 1


def test_concurrent_requests_are_bounded(fault_server):
    server = fault_server("slow")
    backend = _backend(server.base_url, max_concurrent=2)
    threads = [threading.Thread(target=backend.complete, args=(REQUEST,)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert server.max_in_flight == 2 and backend.counts.real == 6


# -- the API key ----------------------------------------------------------------------------------------------------
def test_the_key_is_read_from_the_named_variable_and_sent(fault_server, secret_key):
    server = fault_server("ok")
    _backend(server.base_url).complete(REQUEST)
    assert server.requests[0]["auth"] == f"Bearer {secret_key}"


def test_an_unset_key_sends_a_placeholder_and_a_401_says_which_variable(fault_server, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    server = fault_server("401")
    with pytest.raises(LLMBackendError, match=rf"HTTP 401.*{KEY_ENV} \(is unset"):
        _backend(server.base_url).complete(REQUEST)
    assert server.requests[0]["auth"] == "Bearer no-key"


def test_the_hosted_api_without_a_key_is_an_error_at_construction(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(ValueError, match=f"set the environment variable {KEY_ENV}"):
        OpenAIBackend(None, "gpt-x", api_key_env=KEY_ENV)


def test_the_key_never_appears_in_errors_logs_output_pickles_or_repr(fault_server, secret_key, caplog, capfd):
    caplog.set_level(logging.DEBUG)  # every logger, the openai and httpx clients' included
    server = fault_server("500", "echo-key")
    backend = _backend(server.base_url, retries=1)
    with pytest.raises(LLMBackendError) as info:
        backend.complete(REQUEST)
    assert server.requests[-1]["auth"] == f"Bearer {secret_key}"  # it was sent, and echoed back
    assert info.value.__cause__ is None and info.value.__context__ is None  # the openai error is not attached
    rendered = "".join(traceback.format_exception(info.value))
    assert "invalid key ***" in rendered
    assert any(r.name.startswith(("openai", "httpx", "httpcore")) for r in caplog.records)  # the clients' logs were seen
    out, err = capfd.readouterr()
    for where, text in [
        ("exception", rendered),
        ("logs", caplog.text),
        ("stdout", out),
        ("stderr", err),
        ("repr", repr(backend)),
        ("pickle", pickle.dumps(backend).decode("latin-1")),
    ]:
        assert secret_key not in text, f"the API key leaked into the {where}"


def test_a_pickled_backend_reads_the_key_from_its_own_environment(fault_server, secret_key):
    server = fault_server("ok")
    clone = pickle.loads(pickle.dumps(_backend(server.base_url)))
    clone.complete(REQUEST)
    assert server.requests[0]["auth"] == f"Bearer {secret_key}"


# -- the real local model -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def local_llm():
    pytest.importorskip("xllamacpp")
    from edo_gym.llm.server import INSTALL_MODEL_HINT, LocalLLMServer, bundled_model_path

    if bundled_model_path() is None:
        pytest.skip(f"the bundled model is not installed: {INSTALL_MODEL_HINT}")
    server = LocalLLMServer(threads=1)
    with server:
        yield server


def test_a_completion_over_http_from_the_real_model(local_llm):
    backend = OpenAIBackend(local_llm.base_url, local_llm.model_name, timeout_s=60)
    response = backend.complete(REQUEST)
    assert isinstance(response.text, str) and response.text.strip()
    assert response.prompt_tokens > 20  # system, task, instruction and two documents
    assert 1 <= response.completion_tokens <= REQUEST.max_tokens
    assert 0 < response.latency_s < 60
    assert 0 < response.confidence <= 1  # llama.cpp returns logprobs
    assert (backend.counts.real, backend.attempts) == (1, 1)


def test_the_real_model_writes_a_valid_plan_under_the_plan_schema(local_llm):
    """Unconstrained, the bundled 135M model rarely writes a plan that parses; decoding under the schema it must, and
    every step reads only earlier steps."""
    from edo_gym.agents.planner import PLAN_FORMAT, PLAN_INSTRUCTION, PLANNER_SYSTEM, parse_plan, plan_schema
    from edo_gym.agents.worker import plan_request

    backend = OpenAIBackend(local_llm.base_url, local_llm.model_name, timeout_s=120)
    task = "What was the combined revenue of the Elm and Larch stores in January, in thousands?"
    request = plan_request(task, PLAN_INSTRUCTION, PLAN_FORMAT, 0, PLANNER_SYSTEM, plan_schema(6))
    steps = parse_plan(backend.complete(request).text, 6)
    assert all(d < k for k, step in enumerate(steps) for d in step.deps)


def test_the_key_never_reaches_the_cache_file(local_llm, secret_key, tmp_path):
    path = tmp_path / "c.sqlite"
    backend = CachedBackend(OpenAIBackend(local_llm.base_url, local_llm.model_name, api_key_env=KEY_ENV), path, "record")
    backend.complete(REQUEST)
    files = [p for p in Path(tmp_path).iterdir() if p.name.startswith("c.sqlite")]  # the file, its -wal and -shm
    assert files and all(secret_key.encode() not in p.read_bytes() for p in files)
    rows = sqlite3.connect(path).execute("SELECT * FROM llm_responses").fetchall()
    assert len(rows) == 1 and secret_key not in repr(rows)

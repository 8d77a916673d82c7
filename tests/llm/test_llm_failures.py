"""Failures of the real-LLM path are loud: shown (the first error in full, then counts), counted as failed, and a
non-zero exit unless ``--allow-failures``; the model name is the served model's; ``--llm-cache`` is a directory or a
``*.sqlite`` file as its help says; record mode with no server fails fast.

The served model is ``tests.openai_fake.FaultServer`` (an OpenAI-compatible HTTP server in-process): these tests are
about the commands' handling of a backend, not about a model's answers."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

pytest.importorskip("openai")

from edo_gym.agents.protocol import LLMRequest  # noqa: E402
from edo_gym.llm.cache import CACHE_FILE_NAME, CachedBackend, ResponseCache, cache_file  # noqa: E402
from edo_gym.llm.client import OpenAIBackend  # noqa: E402
from edo_gym.llm.counts import CallCounts  # noqa: E402
from edo_gym.llm.errors import LLMCacheError, ReplayMissError  # noqa: E402
from edo_gym.llm.preflight import ServerUnreachableError, resolve_model, served_models  # noqa: E402
from tests.openai_fake import FaultServer  # noqa: E402

DEAD_URL = "http://127.0.0.1:9/v1"  # the discard port: nothing listens there
REQUEST = LLMRequest(role="worker", agent="w0", system="s", task="t", instruction="Where does Alice live?", seed=1)


@pytest.fixture
def served() -> Iterator[FaultServer]:
    server = FaultServer(["ok"], model_ids=("served-model-q4",))
    yield server
    server.close()


# -- counts keep the first error -------------------------------------------------------------------------------------
def test_counts_keep_the_first_error_in_full_and_a_difference_keeps_it_only_when_new():
    long = "ReplayMissError: " + "x" * 900
    assert CallCounts(1, 2, 3, long, "later").first_error == long
    assert (CallCounts(1, 2, 3, long, "later") - CallCounts(1, 0, 0)).first_error == long
    # the first failure happened before: the latest one stands for the period
    assert (CallCounts(1, 2, 5, long, "later") - CallCounts(1, 0, 3, long, long)).first_error == "later"
    assert (CallCounts(1, 2, 3, long, "later") - CallCounts(1, 0, 3, long, "later")).first_error == ""  # none since
    assert CallCounts(1, 2, 3).total == 6


def test_a_failing_server_call_is_counted_with_its_message(served):
    server = FaultServer(["400"])
    try:
        backend = OpenAIBackend(server.base_url, "m", retries=0)
        with pytest.raises(Exception, match="HTTP 400"):
            backend.complete(REQUEST)
    finally:
        server.close()
    counts = backend.counts
    assert counts.failed == 1 and "HTTP 400" in counts.first_error and "LLMBackendError" in counts.first_error


def test_a_replay_miss_is_counted_with_the_full_error_that_names_the_recorded_models(served, tmp_path):
    recorder = CachedBackend(OpenAIBackend(served.base_url, "model-a"), tmp_path, "record")
    recorder.complete(REQUEST)
    recorder.close()
    replayer = CachedBackend(OpenAIBackend(DEAD_URL, "model-b", retries=0), tmp_path, "replay")
    with pytest.raises(ReplayMissError):
        replayer.complete(REQUEST)
    counts = replayer.counts
    assert counts.failed == 1 and counts.real == 0
    assert counts.first_error.startswith("ReplayMissError: replay miss") and "['model-a']" in counts.first_error


# -- the cache path says what it is --------------------------------------------------------------------------------------
def test_a_cache_path_is_a_directory_unless_it_is_named_sqlite(tmp_path):
    assert cache_file(tmp_path / "cache1") == tmp_path / "cache1" / CACHE_FILE_NAME
    assert cache_file(tmp_path / "rec.sqlite") == tmp_path / "rec.sqlite"
    ResponseCache(tmp_path / "cache1").close()
    assert (tmp_path / "cache1").is_dir() and (tmp_path / "cache1" / CACHE_FILE_NAME).is_file()
    (tmp_path / "plain").write_text("")
    with pytest.raises(ValueError, match=r"is a file whose name does not end in \.sqlite"):
        cache_file(tmp_path / "plain")


@pytest.mark.parametrize("mode", ["record", "replay", "read-through"])
def test_a_corrupt_cache_fails_at_once_with_what_to_do(tmp_path, mode):
    path = tmp_path / "broken.sqlite"
    path.write_bytes(b"this is not an SQLite file, it is " + b"garbage " * 200)
    with pytest.raises(LLMCacheError, match=r"broken\.sqlite cannot be used .*record a new one"):
        CachedBackend(OpenAIBackend(DEAD_URL, "m"), path, mode)


def test_an_sqlite_file_of_something_else_is_not_a_cache(tmp_path):
    import sqlite3

    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (x TEXT)")
    with pytest.raises(LLMCacheError, match="no llm_responses table"):
        CachedBackend(OpenAIBackend(DEAD_URL, "m"), path, "replay")


# -- the served model's name, and a server that is not there -------------------------------------------------------------
def test_the_served_model_is_asked_from_the_server(served):
    assert served_models(served.base_url) == ["served-model-q4"]
    assert resolve_model(served.base_url, None, mode="record") == "served-model-q4"
    assert resolve_model(served.base_url, "chosen", mode="record") == "chosen"


def test_several_served_models_need_a_choice():
    server = FaultServer(["ok"], model_ids=("a", "b"))
    try:
        with pytest.raises(Exception, match=r"several models \['a', 'b'\]: pass --model"):
            resolve_model(server.base_url, None, mode="off")
    finally:
        server.close()


def test_replay_without_a_model_takes_the_recordings_one_model():
    assert resolve_model(DEAD_URL, None, mode="replay", held_models=["m1"]) == "m1"
    with pytest.raises(ValueError, match="several models"):
        resolve_model(DEAD_URL, None, mode="replay", held_models=["m1", "m2"])
    with pytest.raises(ValueError, match="holds no answers"):
        resolve_model(DEAD_URL, None, mode="replay", held_models=[])


@pytest.mark.parametrize("mode", ["off", "record", "read-through"])
def test_no_server_is_one_clear_error_within_seconds(mode):
    start = time.perf_counter()
    with pytest.raises(ServerUnreachableError, match=r"no LLM server answers at http://127\.0\.0\.1:9/v1 .*edo serve-llm"):
        resolve_model(DEAD_URL, "m", mode=mode)
    assert time.perf_counter() - start < 6.0


# -- the commands ----------------------------------------------------------------------------------------------------------
def _demo(main, *extra: str) -> int:
    return main(["demo", "--episodes", "1", "--policies", "static_pipeline", *extra])


def test_edo_demo_in_record_mode_with_no_server_fails_fast_with_one_line(tmp_path, capsys):
    from baselines.cli import main

    start = time.perf_counter()
    rc = _demo(main, "--backend", "openai", "--base-url", DEAD_URL, "--llm-cache", str(tmp_path / "c"))
    err = capsys.readouterr().err
    assert rc == 2 and time.perf_counter() - start < 10.0
    assert err.count("\n") == 1 and err.startswith("edo demo: error: no LLM server answers at")


def test_edo_demo_rejects_a_corrupt_cache_and_a_plain_file_as_cache(tmp_path, capsys):
    from baselines.cli import main

    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"garbage" * 100)
    rc = _demo(main, "--backend", "openai", "--base-url", DEAD_URL, "--llm-cache", str(bad), "--llm-cache-mode", "replay")
    assert rc == 2 and "cannot be used" in capsys.readouterr().err
    (tmp_path / "cache1").write_text("")
    rc = _demo(main, "--backend", "openai", "--base-url", DEAD_URL, "--llm-cache", str(tmp_path / "cache1"))
    assert rc == 2 and "is a file whose name does not end in .sqlite" in capsys.readouterr().err


def test_edo_demo_records_under_the_served_name_and_a_replay_miss_exits_1_unless_allowed(served, tmp_path, capsys):
    from baselines.cli import main

    cache = str(tmp_path / "cache1")
    assert _demo(main, "--backend", "openai", "--base-url", served.base_url, "--llm-cache", cache) == 0
    out = capsys.readouterr().out
    assert "model 'served-model-q4' (the model the server serves" in out and ", 0 failed" in out
    assert (tmp_path / "cache1" / CACHE_FILE_NAME).is_file()
    assert ResponseCache(cache, readonly=True).models() == ["served-model-q4"]
    served.close()
    # replay with no server and no --model: the recording's one model, every call from the cache
    replay = ["--backend", "openai", "--base-url", DEAD_URL, "--llm-cache", cache, "--llm-cache-mode", "replay"]
    assert _demo(main, *replay) == 0
    out = capsys.readouterr().out
    assert "0 real," in out and ", 0 failed" in out and "(!)" not in out
    # replay under another name: every call misses; the first error in full, the counts, exit 1, the row marked
    rc = _demo(main, *replay, "--model", "another-model")
    captured = capsys.readouterr()
    assert rc == 1
    assert "first failed language-model call:\n  ReplayMissError: replay miss" in captured.err
    assert "['served-model-q4'], none from 'another-model'" in captured.err
    assert "pass --allow-failures" in captured.err
    assert "| static_pipeline (!) |" in captured.out and "failed calls |" in captured.out
    # the same with --allow-failures: exit 0, still shown and marked
    rc = _demo(main, *replay, "--model", "another-model", "--allow-failures")
    captured = capsys.readouterr()
    assert rc == 0 and "ReplayMissError" in captured.err and "| static_pipeline (!) |" in captured.out


def test_sim_to_real_with_no_server_fails_fast_and_a_replay_miss_exits_1(served, tmp_path, capsys):
    from benchmarks import sim_to_real

    common = ["--backends", "real", "--policies", "static_pipeline", "--episodes", "1", "--out-dir", str(tmp_path)]
    assert sim_to_real.main([*common, "--base-url", DEAD_URL]) == 2
    assert "no LLM server answers at" in capsys.readouterr().err
    assert sim_to_real.main([*common, "--base-url", served.base_url]) == 0  # recorded under the served name
    capsys.readouterr()
    rc = sim_to_real.main(
        [*common, "--base-url", DEAD_URL, "--llm-cache-mode", "replay", "--model", "another-model", "--force"]
    )
    err = capsys.readouterr().err
    assert rc == 1 and "ReplayMissError: replay miss" in err and "row is not saved" in err
    rc = sim_to_real.main(
        [*common, "--base-url", DEAD_URL, "--llm-cache-mode", "replay", "--model", "another-model", "--force",
         "--allow-failures"]
    )  # fmt: skip
    assert rc == 0
    md = (tmp_path / "sim_to_real.md").read_text()
    assert "| static_pipeline (!) | real |" in md and "ReplayMissError" in md


def test_llm_throughput_counts_failures_of_live_and_replayed_calls():
    from benchmarks.llm_throughput import failures

    payload = {
        "live": [{"failed_calls": 0, "first_error": ""}, {"failed_calls": 2, "first_error": "LLMTransientError: x"}],
        "replay": {"backend_calls": {"failed": 1}, "record_calls": {"failed": 0}, "first_error": "ReplayMissError: y"},
    }
    assert failures(payload) == (3, "LLMTransientError: x")
    payload["live"][1]["failed_calls"] = 0
    assert failures(payload) == (1, "ReplayMissError: y")


def test_edo_evaluate_exits_1_on_failed_calls_unless_allowed(served, tmp_path, capsys):
    import gymnasium as gym

    from baselines.cli import main
    from baselines.grpo import GRPO

    model = tmp_path / "grpo_tiny.zip"
    GRPO("MultiInputPolicy", gym.make("EDO-v0"), seed=0, policy_kwargs={"net_arch": [8]}).save(model)
    common = ["evaluate", str(model), "--algo", "grpo", "--episodes", "1", "--no-heuristics"]
    assert main([*common, "--backend", "openai", "--base-url", DEAD_URL]) == 2
    assert "no LLM server answers at" in capsys.readouterr().err
    cache = str(tmp_path / "cache")
    assert main([*common, "--backend", "openai", "--base-url", served.base_url, "--llm-cache", cache]) == 0
    capsys.readouterr()
    replay = [*common, "--backend", "openai", "--base-url", DEAD_URL, "--llm-cache", cache, "--llm-cache-mode", "replay"]
    assert main(replay) == 0 and ", 0 failed" in capsys.readouterr().out
    assert main([*replay, "--model", "another-model"]) == 1
    captured = capsys.readouterr()
    assert "edo evaluate: first failed language-model call:\n  ReplayMissError" in captured.err
    assert "| grpo (!) |" in captured.out
    assert main([*replay, "--model", "another-model", "--allow-failures"]) == 0

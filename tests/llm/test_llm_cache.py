"""Record/replay cache: the modes, recorded failures, the key, and several processes recording into one file.

The wrapped backend here is a small deterministic ``LLMBackend`` (no server): what is under test is the cache. The
same behaviours over HTTP with the real local model are in ``test_llm_client.py``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import pickle
from dataclasses import replace

import pytest

from edo_gym.agents.backend import TransientBackendError
from edo_gym.agents.protocol import LLMBackend, LLMRequest, LLMResponse
from edo_gym.llm.cache import CACHE_FILE_NAME, CachedBackend, ResponseCache
from edo_gym.llm.errors import EmptyAnswerError, LLMBackendError, LLMTransientError, ReplayMissError


class CountingBackend:
    """Answers with a text that names the process and the call number, so a second real call is visible."""

    def __init__(self, model: str = "m1", fail: list[BaseException] | None = None) -> None:
        self.model = model
        self.calls = 0
        self.fail = list(fail or [])

    def cache_identity(self, request: LLMRequest) -> tuple[str, dict]:
        return self.model, {"top_p": 1.0}

    def complete(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        if self.fail:
            raise self.fail.pop(0)
        text = f"{request.instruction} -> answer {self.calls} from pid {os.getpid()}"
        return LLMResponse(text, prompt_tokens=11, completion_tokens=5, latency_s=0.25 + self.calls, confidence=0.5)


def _request(k: int = 0, seed: int = 0) -> LLMRequest:
    return LLMRequest(role="worker", agent="w0", system="sys", task="task", instruction=f"question {k}", seed=seed)


def test_backend_protocol_is_implemented():
    assert isinstance(CachedBackend(CountingBackend(), None, "off"), LLMBackend)


def test_unknown_mode_is_rejected_with_the_allowed_ones(tmp_path):
    with pytest.raises(ValueError, match=r"one of \['off', 'record', 'replay', 'read-through'\]"):
        CachedBackend(CountingBackend(), tmp_path, "write")


def test_a_directory_holds_the_default_file(tmp_path):
    cached = CachedBackend(CountingBackend(), tmp_path, "record")
    cached.complete(_request())
    assert (tmp_path / CACHE_FILE_NAME).is_file()


def test_record_answers_a_repeated_request_from_the_cache_with_the_recorded_latency(tmp_path):
    inner = CountingBackend()
    cached = CachedBackend(inner, tmp_path / "c.sqlite", "record")
    first = cached.complete(_request())
    again = cached.complete(_request())
    assert inner.calls == 1
    assert not first.cached and again.cached
    assert (again.text, again.prompt_tokens, again.completion_tokens, again.latency_s, again.confidence) == (
        first.text, first.prompt_tokens, first.completion_tokens, first.latency_s, first.confidence,
    )  # fmt: skip
    assert (cached.counts.real, cached.counts.cached, cached.counts.failed) == (1, 1, 0)


def test_the_seed_model_and_sampling_parameters_are_part_of_the_key(tmp_path):
    path = tmp_path / "c.sqlite"
    inner = CountingBackend("m1")
    cached = CachedBackend(inner, path, "record")
    cached.complete(_request(seed=0))
    cached.complete(_request(seed=1))
    assert inner.calls == 2
    other_model = CachedBackend(CountingBackend("m2"), path, "record")
    other_model.complete(_request(seed=0))
    assert other_model.counts.real == 1
    key_m1, _ = cached.key(_request())
    assert key_m1 == _request().cache_key("m1", extra={"top_p": 1.0})


def test_replay_gives_the_recorded_answers_without_calling_the_backend(tmp_path):
    path = tmp_path / "c.sqlite"
    recorder = CachedBackend(CountingBackend(), path, "record")
    recorded = [recorder.complete(_request(k)) for k in range(3)]
    inner = CountingBackend()
    replayer = CachedBackend(inner, path, "replay")
    replayed = [replayer.complete(_request(k)) for k in range(3)]
    assert inner.calls == 0
    assert [replace(r, cached=True) for r in recorded] == replayed
    assert replayer.counts.cached == 3


def test_a_replay_miss_names_the_request_and_the_key(tmp_path):
    path = tmp_path / "c.sqlite"
    CachedBackend(CountingBackend(), path, "record").complete(_request(0))
    replayer = CachedBackend(CountingBackend(), path, "replay")
    request = _request(99)
    with pytest.raises(ReplayMissError) as info:
        replayer.complete(request)
    message = str(info.value)
    key, _ = replayer.key(request)
    for part in ("worker", "'w0'", "question 99", key, str(path), "record"):
        assert part in message
    assert not isinstance(info.value, TransientBackendError)  # a miss is not retried
    assert replayer.counts.failed == 1


def test_a_replay_miss_under_another_model_name_says_which_models_the_cache_holds(tmp_path):
    path = tmp_path / "c.sqlite"
    CachedBackend(CountingBackend("m1"), path, "record").complete(_request(0))
    with pytest.raises(ReplayMissError, match=r"holds answers from models \['m1'\], none from 'm2'"):
        CachedBackend(CountingBackend("m2"), path, "replay").complete(_request(0))


def test_replay_without_a_recording_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no LLM cache to replay"):
        CachedBackend(CountingBackend(), tmp_path / "none.sqlite", "replay")


def test_read_through_uses_hits_asks_for_misses_and_writes_nothing(tmp_path):
    path = tmp_path / "c.sqlite"
    recorder = CachedBackend(CountingBackend(), path, "record")
    recorder.complete(_request(0))
    recorder.close()  # the file as the recording left it (an open writer may still checkpoint it at close)
    before = path.read_bytes()
    inner = CountingBackend()
    reader = CachedBackend(inner, path, "read-through")
    assert reader.complete(_request(0)).cached
    assert not reader.complete(_request(1)).cached
    assert not reader.complete(_request(1)).cached  # still a miss: nothing was stored
    assert inner.calls == 2
    assert len(ResponseCache(path)) == 1
    assert path.read_bytes() == before


def test_off_always_asks_the_backend(tmp_path):
    inner = CountingBackend()
    cached = CachedBackend(inner, None, "off")
    cached.complete(_request())
    cached.complete(_request())
    assert inner.calls == 2 and cached.counts.real == 2


def test_an_empty_answer_is_recorded_and_replayed_as_a_failure(tmp_path):
    path = tmp_path / "c.sqlite"
    inner = CountingBackend(fail=[EmptyAnswerError("worker 'w0': empty answer")])
    recorder = CachedBackend(inner, path, "record")
    for _ in range(2):  # the second is answered from the cache: the same failure
        with pytest.raises(EmptyAnswerError):
            recorder.complete(_request())
    assert inner.calls == 1
    with pytest.raises(EmptyAnswerError, match="recorded failure"):
        CachedBackend(CountingBackend(), path, "replay").complete(_request())


def test_a_transient_failure_replays_as_transient_and_a_later_answer_replaces_it(tmp_path):
    path = tmp_path / "c.sqlite"
    inner = CountingBackend(fail=[LLMTransientError("HTTP 503 on all 3 attempts")])
    recorder = CachedBackend(inner, path, "record")
    with pytest.raises(LLMTransientError):
        recorder.complete(_request())
    with pytest.raises(TransientBackendError, match="HTTP 503"):
        CachedBackend(CountingBackend(), path, "replay").complete(_request())
    answer = recorder.complete(_request())  # record asks again: the service may be back
    assert inner.calls == 2 and not answer.cached
    assert CachedBackend(CountingBackend(), path, "replay").complete(_request()).text == answer.text


def test_configuration_errors_are_not_recorded(tmp_path):
    path = tmp_path / "c.sqlite"
    recorder = CachedBackend(CountingBackend(fail=[LLMBackendError("HTTP 401: check OPENAI_API_KEY")]), path, "record")
    with pytest.raises(LLMBackendError):
        recorder.complete(_request())
    assert len(ResponseCache(path)) == 0
    assert recorder.counts.failed == 1


def test_the_first_answer_stored_wins_and_is_returned_to_the_loser(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    request = _request()
    first = cache.put("k", "m1", request, LLMResponse("first", latency_s=1.0))
    second = cache.put("k", "m1", request, LLMResponse("second", latency_s=2.0))
    assert first.text == second.text == "first"
    assert cache.get("k").latency_s == 1.0


def test_after_close_the_file_alone_holds_the_recording(tmp_path):
    recorder = CachedBackend(CountingBackend(), tmp_path / "rec" / "c.sqlite", "record")
    answer = recorder.complete(_request())
    recorder.close()
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "c.sqlite").write_bytes((tmp_path / "rec" / "c.sqlite").read_bytes())  # e.g. committed for CI
    replayer = CachedBackend(CountingBackend(), tmp_path / "copy" / "c.sqlite", "replay")
    assert replayer.complete(_request()).text == answer.text


def test_cache_and_backend_pickle_without_their_connection(tmp_path):
    cached = CachedBackend(CountingBackend(), tmp_path / "c.sqlite", "record")
    first = cached.complete(_request())
    clone = pickle.loads(pickle.dumps(cached))
    assert clone.complete(_request()).text == first.text


# -- several processes ------------------------------------------------------------------------------------------------
SHARED, OWN = 30, 10


def _record_in_child(path: str, worker: int, barrier, queue) -> None:
    try:
        cached = CachedBackend(CountingBackend(), path, "record")
        barrier.wait(timeout=60)
        answers = {}
        for k in range(SHARED):  # every process asks these, in a different order
            k = (k + 7 * worker) % SHARED
            answers[_request(k).instruction] = cached.complete(_request(k)).text
        for k in range(OWN):
            request = _request(1000 + worker * OWN + k)
            answers[request.instruction] = cached.complete(request).text
        queue.put((worker, answers, None))
    except BaseException as exc:  # report, so the parent fails with the reason instead of a timeout
        queue.put((worker, {}, repr(exc)))


def test_several_processes_recording_into_one_cache_lose_nothing_and_agree(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    n = 4
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_record_in_child, args=(path, w, barrier, queue)) for w in range(n)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert [err for _, _, err in results if err] == []
    cache = ResponseCache(path, readonly=True)
    assert len(cache) == SHARED + n * OWN
    replayer = CachedBackend(CountingBackend(), path, "replay")
    for _, answers, _ in results:
        for instruction, text in answers.items():
            k = int(instruction.split()[-1])
            assert replayer.complete(_request(k)).text == text  # every process got the stored answer


def test_the_key_is_the_sha256_of_the_canonical_json_of_every_field():
    """Recorded caches are addressed by this formula: a change of it orphans every recording."""
    import dataclasses
    import hashlib

    def key(request) -> str:
        fields = dataclasses.asdict(request)
        for name in ("json_schema", "stop"):  # optional: in the key only when set (recordings made before them keep theirs)
            if not fields[name]:
                del fields[name]
        payload = {"model": "m1", "request": fields, "extra": {"top_p": 1.0}}
        blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    request = dataclasses.replace(_request(7), inputs=("Paris", "2 km"), documents=("Doc one.", "Doc two."), answer="x")
    assert request.cache_key("m1", extra={"top_p": 1.0}) == key(request)
    constrained = dataclasses.replace(request, json_schema='{"type":"object"}', stop=("\n",))
    assert constrained.cache_key("m1", extra={"top_p": 1.0}) == key(constrained)
    # each of them is part of the address
    keys = {
        request.cache_key("m1"),
        dataclasses.replace(request, stop=("\n",)).cache_key("m1"),
        dataclasses.replace(request, json_schema='{"type":"object"}').cache_key("m1"),
        constrained.cache_key("m1"),
    }
    assert len(keys) == 4

"""Lazy embedding of canonical queries and task texts, and the run-time disk cache, are exact.

- a lazily built batch gives the vectors of the one-go build bit for bit, and task features projected a batch at a
  time equal the all-at-once projection (on the default world, several batches, cold cache with the corpus copied);
- only the batches that are used get built (make + reset embeds one task batch, no canonical query);
- the run-time cache returns exactly what the model computes (vectors alone, token counts), rejects damaged rows,
  survives concurrent writers and a writer killed mid-transaction, and refuses a database of another model;
- trajectories are the same with the run-time cache off, cold, and warm (read back by a fresh service); piece-wise
  token counts stored by one process are read by the next, which then runs the tokenizer for none of them;
- a text SQLite cannot store (a lone surrogate) is never written and reads as a miss.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import shutil
import sqlite3
import zlib

import gymnasium as gym
import numpy as np
import pytest

import edo_gym  # noqa: F401  (registers the ids)
from edo_gym.config import RetrievalConfig
from edo_gym.retrieval.cache import CacheWarning
from edo_gym.retrieval.caches import LazyVectors
from edo_gym.retrieval.embedder import space_decomposable
from edo_gym.retrieval.runtime_cache import RuntimeCache
from edo_gym.retrieval.service import RetrievalService
from tests.exactness import assert_same, model_threads, trajectory


@pytest.fixture(scope="module")
def warm_env():
    """The default env with every list complete and its task features built in one go (the reference).

    On a cold suite cache (this module run first, or alone, in a fresh clone) the first env is made before the lists
    are complete, and fills its task features lazily, only for the tasks it draws: the reference is a second env, made
    after ``complete_all`` on the same (process-wide) service."""
    first = gym.make("EDO-v0")
    first.unwrapped.service.complete_all()  # the one-go build, if this cache directory did not have it yet
    env = gym.make("EDO-v0")
    base = env.unwrapped
    assert base._task_vectors.complete and base._task_ready.all()
    yield base
    env.close()
    first.close()


def _cold_dir_with_corpus(tmp_path, service) -> str:
    """A cache directory holding only the corpus embeddings (copied), so the queries and tasks start cold."""
    for path in service.cache.directory.glob("corpus-*.npz"):
        shutil.copy(path, tmp_path / path.name)
    return str(tmp_path)


def test_lazy_batches_are_bit_identical_to_the_one_go_build(tmp_path, warm_env):
    cache_dir = _cold_dir_with_corpus(tmp_path, warm_env.service)
    env = gym.make("EDO-v0", retrieval={"cache_dir": cache_dir, "runtime_cache": False}).unwrapped
    tasks, queries = env._task_vectors, env.service.encoders[0].lazy_canonical
    assert not tasks.complete and not queries.complete and tasks.batches_built == 0
    env.reset(seed=0)
    assert tasks.batches_built == 1 and queries.batches_built == 0  # make + reset: one task batch, no query
    # tasks from several batches, and the last (short) batch: features and vectors equal the one-go build's. The
    # batches hold every task (ordered by text length) and a reset draws from the env's split only: each batch is
    # entered by its first (the last batch by its last) task of that split
    in_split = set(env.pool.ids.tolist())
    rows_of = [tasks._batches[0], tasks._batches[3], tasks._batches[7], tasks._batches[-1][::-1]]
    chosen = [int(next(r for r in rows if r in in_split)) for rows in rows_of]
    for tid in chosen:
        env.reset(options={"task_id": int(np.flatnonzero(env.pool.ids == tid)[0])})
        assert env.episode.task.task_id == tid
        assert np.array_equal(env._task_features[tid], warm_env._task_features[tid]), tid
        assert np.array_equal(tasks.row(tid), warm_env._task_vectors.row(tid)), tid
        rows = tasks.batch_rows(tid)
        assert np.array_equal(env._task_features[rows], warm_env._task_features[rows])
    assert not tasks.complete and tasks.batches_built <= 5
    # canonical queries: two batches, through the encoder
    encoder = env.service.encoders[0]
    for b in (1, len(queries._batches) - 1):
        for row in queries._batches[b][:5]:
            text = queries.texts[row]
            assert np.array_equal(encoder.encode(text), warm_env.service.encoders[0].encode(text)), text
    assert queries.batches_built == 2 and encoder.model_calls == 0
    # completing the lists writes them as the one-go build did, file for file
    env.service.complete_all()
    for path in sorted((tmp_path).glob("*.npz")):
        reference = warm_env.service.cache.directory / path.name
        if reference.exists():
            with np.load(path) as a, np.load(reference) as b:
                assert np.array_equal(a["vectors"], b["vectors"]), path.name
    assert {p.name.split("-")[0] for p in tmp_path.glob("*.npz")} >= {"corpus", "queries", "tasks"}


def test_lazy_batches_are_shared_between_processes_through_the_runtime_cache(tmp_path, warm_env, monkeypatch):
    cache_dir = _cold_dir_with_corpus(tmp_path, warm_env.service)
    env = gym.make("EDO-v0", retrieval={"cache_dir": cache_dir}).unwrapped
    env.reset(seed=0)
    built = env._task_vectors.batches_built
    assert built == 1
    env.close()  # commits the run-time cache's buffer (a vector env's worker may exit without atexit hooks)
    monkeypatch.setattr(RetrievalService, "_registry", {})  # a fresh service, as in a new process
    again = gym.make("EDO-v0", retrieval={"cache_dir": cache_dir}).unwrapped
    again.reset(seed=0)
    assert again._task_vectors.batches_built == 0  # read from the run-time cache
    assert np.array_equal(again._task_obs, env._task_obs)
    assert np.array_equal(again._task_obs, warm_env._task_features[env.episode.task.task_id])


def test_eager_mode_builds_everything_at_start(tmp_path, small_world_kwargs):
    env = gym.make("EDO-v0", **small_world_kwargs, retrieval={"cache_dir": str(tmp_path), "lazy_embeddings": False})
    base = env.unwrapped
    assert base._task_vectors.complete and base.service.encoders[0].lazy_canonical.complete
    assert sorted(p.name.split("-")[0] for p in tmp_path.glob("*.npz")) == ["corpus", "queries", "tasks"]


@pytest.mark.parametrize("field", ["lazy_embeddings", "runtime_cache"])
def test_options_reject_non_bools(field):
    with pytest.raises(TypeError, match=field):
        RetrievalConfig(**{field: 1})


# -- the run-time cache ------------------------------------------------------------------------------------------
def test_runtime_cache_returns_what_the_model_computes(tmp_path, warm_env):
    service = warm_env.service
    embedder = service.embedders[0]
    cache = RuntimeCache(tmp_path, service.model_id, embedder.dim)
    texts = ["Who is the mentor of Nobody Special?", "Which carrier handles shipment (missing)?", "x", "déjà vu 12,5"]
    for t in texts:
        cache.put_vector(t, embedder.encode([t])[0])
        cache.put_tokens(t, embedder.count_tokens([t])[0])
    cache.flush()
    fresh = pickle.loads(pickle.dumps(cache))  # a new connection; reads from disk only
    assert fresh is not cache and fresh.path == cache.path and not fresh._pending_tokens
    for t in texts:
        with model_threads(embedder):  # the reference under the embedder's own thread count, as the others
            alone = embedder.model.encode([t], normalize_embeddings=True)[0]
        got = fresh.get_vector(t)
        assert got is not None and np.array_equal(got, alone), t
        assert fresh.get_tokens(t) == len(embedder.tokenizer(t, add_special_tokens=False)["input_ids"])
    assert fresh.get_vector("never stored") is None and fresh.get_tokens("never stored") is None
    assert fresh.sizes() == {"vectors": 4, "tokens": 4, "batches": 0, "searches": 0}


def test_runtime_cache_rejects_damaged_rows(tmp_path):
    cache = RuntimeCache(tmp_path, "model-a", 4)
    cache.put_vector("a", np.array([1, 2, 3, 4], dtype=np.float32))
    cache.put_vector("b", np.array([5, 6, 7, 8], dtype=np.float32))
    cache.put_vector("c", np.array([1, 1, 1, 1], dtype=np.float32))
    cache.flush()
    with sqlite3.connect(cache.path) as db:
        wrong = np.array([9, 9, 9, 9], dtype=np.float32).tobytes()
        db.execute("UPDATE vectors SET vec = ? WHERE text = 'a'", (wrong,))  # the CRC no longer matches
        db.execute("UPDATE vectors SET vec = ? WHERE text = 'b'", (wrong[:8],))  # truncated
        nan = np.array([np.nan, 0, 0, 0], dtype=np.float32).tobytes()
        db.execute("UPDATE vectors SET vec = ?, crc = ? WHERE text = 'c'", (nan, zlib.crc32(nan)))
    fresh = RuntimeCache(tmp_path, "model-a", 4)
    assert fresh.get_vector("a") is None and fresh.get_vector("b") is None and fresh.get_vector("c") is None
    assert fresh.rejected == 3
    with pytest.raises(ValueError, match="shape"):
        fresh.put_vector("d", np.zeros(5, dtype=np.float32))
    with pytest.raises(ValueError, match="dim"):
        RuntimeCache(tmp_path, "model-a", 0)


def test_runtime_cache_of_another_model_or_unreadable_is_not_used(tmp_path):
    first = RuntimeCache(tmp_path, "model-a", 4)
    first.put_tokens("t", 3)
    first.flush()
    other = RuntimeCache(tmp_path, "model-a", 8)  # same file name, other vector size
    with pytest.warns(CacheWarning, match="written for"):
        assert other.get_tokens("t") is None
    assert other.disabled
    bad = tmp_path / "bad"
    bad.mkdir()
    garbage = RuntimeCache(bad, "model-b", 4)
    garbage.path.write_bytes(b"this is not a database" * 100)
    with pytest.warns(CacheWarning, match="not used"):
        assert garbage.get_vector("t") is None
    blocker = tmp_path / "file"
    blocker.write_text("x")
    unwritable = RuntimeCache(blocker / "sub", "model-c", 4)
    with pytest.warns(CacheWarning, match="not used"):
        unwritable.put_tokens("t", 1)
        unwritable.flush()
    assert unwritable.disabled and unwritable.get_tokens("t") is None


def _writer(directory: str, k: int, crash: bool) -> None:
    cache = RuntimeCache(directory, "model-a", 4)
    for i in range(600):
        cache.put_tokens(f"text {i}", i)
        cache.put_vector(f"text {i}", np.full(4, i, dtype=np.float32))
    cache.flush()
    if crash:  # killed in the middle of a transaction: it must leave no trace
        conn = cache._connection()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO tokens VALUES ('half-written', 1)")
        os._exit(1)


def test_runtime_cache_concurrent_writers_and_a_crash(tmp_path):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), k, k == 3)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 1]
    cache = RuntimeCache(tmp_path, "model-a", 4)
    assert cache.sizes() == {"vectors": 600, "tokens": 600, "batches": 0, "searches": 0}
    assert all(cache.get_tokens(f"text {i}") == i for i in range(600))
    assert all(np.array_equal(cache.get_vector(f"text {i}"), np.full(4, i, dtype=np.float32)) for i in range(600))
    assert cache.get_tokens("half-written") is None
    with sqlite3.connect(cache.path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_trajectories_equal_with_the_runtime_cache_off_cold_and_warm(tmp_path, small_world_kwargs, monkeypatch):
    import edo_gym.retrieval.service as service_mod

    steps = 800
    runs = {}
    stats = {}
    # whole texts counted (the piece-wise count of the default tokenizer off), so token counts go through the cache;
    # "pieces": the default piece-wise count (pieces read from and stored in the cache in bulk, not by get_tokens)
    for name, runtime in (("off", False), ("cold", True), ("warm", True), ("pieces", True)):
        monkeypatch.setattr(RetrievalService, "_registry", {})  # a fresh service each time, as in a new process
        monkeypatch.setattr(
            service_mod, "space_decomposable", (lambda counter: False) if name != "pieces" else space_decomposable
        )
        env = gym.make("EDO-v0", **small_world_kwargs, retrieval={"cache_dir": str(tmp_path), "runtime_cache": runtime})
        try:
            runs[name] = trajectory(env, steps, seed=11)
            service = env.unwrapped.service
            service.flush()
            stats[name] = (sum(e.model_calls for e in service.encoders), service.runtime)
        finally:
            env.close()
    for name in ("cold", "warm", "pieces"):
        assert_same(runs["off"], runs[name], f"runtime cache {name}")
    assert stats["pieces"][1].token_hits == 0
    calls_cold, runtime_cold = stats["cold"]
    calls_warm, runtime_warm = stats["warm"]
    assert calls_cold > 0 and calls_warm == 0  # the warm process ran the model for no query
    assert runtime_warm.vector_hits == calls_cold and runtime_warm.token_hits > 0 and runtime_warm.rejected == 0
    # every stored vector is the model's own for that text alone, every count the tokenizer's
    embedder = gym.make("EDO-v0", **small_world_kwargs).unwrapped.service.embedders[0]
    with sqlite3.connect(runtime_warm.path) as db:
        rows = db.execute("SELECT text, vec FROM vectors").fetchall()
        tokens = db.execute("SELECT text, n FROM tokens").fetchall()
    assert len(rows) == calls_cold
    for text, blob in rows:
        assert np.array_equal(np.frombuffer(blob, dtype=np.float32), embedder.encode([text])[0]), text
    sample = tokens[:: max(1, len(tokens) // 200)]
    assert [n for _, n in sample] == embedder.count_tokens([t for t, _ in sample])


def test_an_env_with_incomplete_lists_pickles(tmp_path, warm_env):
    cache_dir = _cold_dir_with_corpus(tmp_path, warm_env.service)
    env = gym.make("EDO-v0", retrieval={"cache_dir": cache_dir, "runtime_cache": False})
    env.reset(seed=4)
    assert not env.unwrapped._task_vectors.complete
    clone = pickle.loads(pickle.dumps(env))
    assert clone.unwrapped._task_vectors is env.unwrapped._task_vectors  # this process's own list, from its service
    assert_same(trajectory(env, 200, seed=5), trajectory(clone, 200, seed=5), "pickled env")
    with pytest.raises(TypeError, match="outside a RetrievalService"):
        pickle.dumps(LazyVectors("t", ["a"], np.zeros((1, 4), dtype=np.float32), None, None, "m", None))


def test_runtime_cache_stops_writing_at_its_size_limit(tmp_path, monkeypatch):
    first = RuntimeCache(tmp_path, "model-a", 4)
    first.put_tokens("kept", 1)
    first.flush()
    monkeypatch.setenv("EDO_GYM_RUNTIME_CACHE_MAX_MB", "0")
    capped = RuntimeCache(tmp_path, "model-a", 4)
    capped.put_tokens("dropped", 2)
    capped.put_vector("dropped", np.ones(4, dtype=np.float32))
    capped.flush()
    assert capped.full and capped.get_tokens("kept") == 1
    assert capped.get_tokens("dropped") is None and capped.get_vector("dropped") is None
    for bad in ("-1", "lots", "nan", "inf"):
        monkeypatch.setenv("EDO_GYM_RUNTIME_CACHE_MAX_MB", bad)
        with pytest.raises(ValueError, match="EDO_GYM_RUNTIME_CACHE_MAX_MB"):
            RuntimeCache(tmp_path, "model-a", 4)


def test_piece_counts_are_shared_through_the_runtime_cache(tmp_path, small_world_kwargs, monkeypatch):
    runs, services = {}, {}
    for name in ("first", "second"):  # each a fresh service on one cache directory, as two processes one after the other
        monkeypatch.setattr(RetrievalService, "_registry", {})
        env = gym.make("EDO-v0", **small_world_kwargs, retrieval={"cache_dir": str(tmp_path)})
        try:
            runs[name] = trajectory(env, 800, seed=11)
            services[name] = env.unwrapped.service
            services[name].flush()
        finally:
            env.close()
    assert_same(runs["first"], runs["second"], "piece counts read from the run-time cache")
    first, second = services["first"], services["second"]
    assert first.piece_tokens is not None and first.pieces_counted > 100
    assert second.pieces_counted == 0  # every piece of the same run was read from the cache, none counted again
    stored = second.runtime.space_free_tokens()
    pieces = sorted(stored)
    assert len(pieces) >= first.pieces_counted and all(" " not in p for p in pieces)
    assert [stored[p] for p in pieces] == second.embedders[0].count_tokens(pieces)  # each the tokenizer's own count
    # ahead of use: the pieces of the texts the service knows (corpus, queries, task texts), once
    known = second.store_piece_counts()
    assert known > 0 and second.store_piece_counts() == 0
    task_text = next(lazy for lazy in second._lazy.values() if lazy.kind == "tasks").texts[0]
    assert all(p in second.runtime.space_free_tokens() for p in task_text.split(" "))
    # a damaged row is left out (and counted), the others are read
    with sqlite3.connect(second.runtime.path) as db:
        db.execute("UPDATE tokens SET n = -1 WHERE text = ?", (pieces[0],))
    fresh = RuntimeCache(second.runtime.directory, second.model_id, second.embedders[0].dim)
    reread = fresh.space_free_tokens()
    assert pieces[0] not in reread and fresh.rejected == 1 and len(reread) == len(stored) + known - 1


def test_runtime_cache_skips_texts_sqlite_cannot_store(tmp_path):
    cache = RuntimeCache(tmp_path, "model-a", 4)
    bad, also_bad = "a\ud800b", "x\udfff"  # lone surrogates (decoded JSON may hold them): no UTF-8 form
    one = np.ones(4, dtype=np.float32)
    cache.put_vector(bad, one)
    cache.put_vectors([also_bad, "fine"], np.stack([one, one]))
    cache.put_tokens(bad, 3)
    cache.put_tokens_many({also_bad: 1, "ok": 2})
    cache.flush()  # no UnicodeEncodeError, here or at exit
    assert cache.get_vector(bad) is None and cache.get_tokens(bad) is None  # misses: computed each time
    assert np.array_equal(cache.get_vector("fine"), one) and cache.get_tokens("ok") == 2
    assert cache.missing([bad, "fine", "new"]) == [bad, "new"]
    assert cache.space_free_tokens() == {"ok": 2}
    assert cache.sizes() == {"vectors": 1, "tokens": 1, "batches": 0, "searches": 0}

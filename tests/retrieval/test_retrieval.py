"""The mini-RAG with its real parts: the all-MiniLM-L6-v2 embedder, chromadb, and the on-disk embedding cache.

- retrieval is real and imperfect: recall@k of every worker's retriever on its own shard is well above chance
  and below 1 (near-duplicate distractors fool dense retrieval);
- a warm process never re-embeds: the cache files exist and load without a build, and a fresh process builds
  the env without a single call to the embedding model's ``encode``;
- the memoisation caches are bounded LRU caches;
- a damaged cache file is detected (``CacheWarning``), rebuilt, and never loaded.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import edo_gym  # noqa: F401  (registers the ids)
from edo_gym.config import WorldConfig
from edo_gym.envs.edo_env import EDOEnv
from edo_gym.retrieval import CacheWarning, EmbeddingCache, LRUCache, default_cache_dir
from edo_gym.retrieval.cache import texts_hash
from edo_gym.world.generator import RELATIONS, World

#: Recall@k that any worker's retriever must beat on canonical queries of its own shard.
RECALL_FLOOR = 0.3


@pytest.fixture(scope="module")
def env() -> EDOEnv:
    e = gym.make("EDO-v0")
    yield e.unwrapped
    e.close()


def _must_not_build(texts: list[str]) -> np.ndarray:
    raise AssertionError(f"the cache was rebuilt ({len(texts)} texts) although a valid file exists")


# ================================================================================================ recall
def test_recall_at_k_per_worker_is_real_and_imperfect(env):
    world = env.world
    gold = {(d.subject, d.relation): i for i, d in enumerate(world.documents) if not d.is_distractor}
    recalls: dict[str, float] = {}
    hits_total = n_total = 0
    for spec, retriever in zip(env.config.workers, env.service.retrievers, strict=True):
        hits = n = 0
        for subject, relation in world.facts:
            if RELATIONS[relation].domain not in retriever.domains:
                continue
            query = RELATIONS[relation].question.format(x=subject)
            found = retriever.search(query, spec.top_k)
            assert len(found) == spec.top_k
            assert all(world.documents[i].domain in retriever.domains for i in found)  # only its own shard
            hits += gold[(subject, relation)] in found
            n += 1
        assert n > 0, f"{spec.name} has no facts in its shard {retriever.domains}"
        recalls[spec.name] = hits / n
        hits_total += hits
        n_total += n
    assert all(r > RECALL_FLOOR for r in recalls.values()), recalls
    assert min(recalls.values()) < 1.0, recalls  # imperfect: some worker misses gold documents
    assert RECALL_FLOOR < hits_total / n_total < 1.0, recalls


# ================================================================================================ warm cache
def test_cache_files_exist_and_load_without_rebuilding(env):
    cache = EmbeddingCache()
    assert cache.directory == default_cache_dir()
    model_id = env.service.model_id
    texts = {
        "corpus": [d.text for d in env.world.documents],
        "queries": env.world.canonical_queries(),
        "tasks": [t.text for t in env.pool.tasks],
    }
    for kind, kind_texts in texts.items():
        path = cache.path_for(kind, model_id, texts_hash(kind_texts))
        assert path.is_file(), f"no {kind} cache file at {path}"
        with warnings.catch_warnings():
            warnings.simplefilter("error", CacheWarning)
            vectors = cache.load_or_build(kind, model_id, kind_texts, _must_not_build)
        assert vectors.shape == (len(kind_texts), env.service.embedders[0].dim)
    np.testing.assert_array_equal(
        cache.load_or_build("corpus", model_id, texts["corpus"], _must_not_build), env.service.doc_vectors
    )


_ENCODE_PROBE = """
import json, sys
import gymnasium as gym

calls = []

def probe(frame, event, arg):
    # every Python-level call of an ``encode*`` defined by edo_gym or sentence-transformers (nothing is patched)
    if event == "call" and frame.f_code.co_name.startswith("encode"):
        filename = frame.f_code.co_filename
        if "edo_gym" in filename or "sentence_transformers" in filename:
            calls.append(filename)

def calls_during(make):
    calls.clear()
    sys.setprofile(probe)
    try:
        make()
    finally:
        sys.setprofile(None)
    return len(calls)

warm = calls_during(lambda: gym.make("edo_gym:EDO-v0"))
cold = calls_during(lambda: gym.make("edo_gym:EDO-v0", retrieval_cache_dir={cold_dir!r}, **{small!r}))
print("RESULT " + json.dumps({{"warm": warm, "cold": cold}}))
"""


def test_warm_process_builds_the_env_without_embedding(env, run_python, tmp_path, small_world_kwargs):
    """A fresh process with the cache present never calls the model's ``encode``; the probe's positive control
    (a cold cache in ``tmp_path``) shows that it would see the calls."""
    cache = EmbeddingCache()
    texts = ([d.text for d in env.world.documents], env.world.canonical_queries(), [t.text for t in env.pool.tasks])
    paths = [
        cache.path_for(kind, env.service.model_id, texts_hash(t))
        for kind, t in zip(("corpus", "queries", "tasks"), texts, strict=True)
    ]
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in paths}  # raises if a file is missing
    proc = run_python(_ENCODE_PROBE.format(cold_dir=str(tmp_path), small=small_world_kwargs), timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert result["cold"] > 0, "the probe saw no encode call even for a cold cache: it proves nothing"
    assert result["warm"] == 0, f"a warm process called encode {result['warm']} times"
    after = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in paths}
    assert after == before  # no cache file was rewritten


# ================================================================================================ memo caches
def test_lru_cache_evicts_the_least_recently_used_entry():
    cache = LRUCache(3)
    for key in "abc":
        cache.put(key, key.upper())
    assert cache.get("a") == "A"  # "a" becomes the most recently used
    cache.put("d", "D")
    assert len(cache) == 3
    assert cache.get("b") is None
    assert [cache.get(k) for k in "acd"] == ["A", "C", "D"]
    for i in range(100):
        cache.put(i, i)
    assert len(cache) == 3


def test_lru_cache_rejects_a_non_positive_size():
    with pytest.raises(ValueError, match="maxsize"):
        LRUCache(0)


def test_memo_caches_respect_their_size_bounds():
    # without the run-time disk cache, which would give the evicted query its vector back without the model
    env = gym.make("EDO-v0", retrieval={"query_cache_size": 4, "result_cache_size": 3, "runtime_cache": False})
    try:
        service = env.unwrapped.service
        retriever = service.retrievers[0]
        encoder = retriever.encoder
        for i in range(12):
            retriever.search(f"free-text question number {i} about a late parcel", 3)
            service.count_tokens(f"some text to count, number {i}")
            assert len(retriever.memo) <= 3 and len(encoder.memo) <= 4 and len(service.token_memo) <= 4
        assert len(retriever.memo) == 3 and len(encoder.memo) == 4 and len(service.token_memo) == 4
        searches, model_calls = retriever.searches, encoder.model_calls
        retriever.search("free-text question number 11 about a late parcel", 3)  # recent: a memo hit
        assert (retriever.searches, encoder.model_calls) == (searches, model_calls)
        retriever.search("free-text question number 0 about a late parcel", 3)  # evicted: searched again
        assert (retriever.searches, encoder.model_calls) == (searches + 1, model_calls + 1)
        rng = np.random.default_rng(0)
        for seed in range(5):
            obs, _ = env.reset(seed=seed)
            for _ in range(20):
                obs, _, terminated, truncated, _ = env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
                if terminated or truncated:
                    break
            sizes = service.cache_sizes()
            assert sizes["search_results"] <= 3 * len({id(r) for r in service.retrievers})
            assert sizes["query_embeddings"] <= 4 and sizes["token_counts"] <= 4
    finally:
        env.close()


# ================================================================================================ damaged cache
def _tamper_vectors(path: Path) -> None:
    """A well-formed file with its original header but different vectors (checksum no longer matches)."""
    with np.load(path) as data:
        header, vectors = data["header"].copy(), data["vectors"].copy()
    vectors[0] = -vectors[0]
    with open(path, "wb") as fh:
        np.savez(fh, vectors=vectors, header=header)


DAMAGES = {
    "garbage": lambda p: p.write_bytes(b"this is not an npz file\n" * 200),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "empty": lambda p: p.write_bytes(b""),
    "tampered_vectors": _tamper_vectors,
}


@pytest.fixture(scope="module")
def small_corpus(env, tmp_path_factory) -> tuple[list[str], np.ndarray, bytes]:
    """Texts of a tiny world's corpus, their fresh embeddings, and the bytes of a valid cache file for them."""
    world = World(WorldConfig(n_people=8, n_companies=4, n_cities=4, n_orders=4, n_carriers=2, n_stores=2, n_months=1))
    texts = [d.text for d in world.documents]
    embedder, model_id = env.service.embedders[0], env.service.model_id
    cache = EmbeddingCache(tmp_path_factory.mktemp("valid_cache"))
    fresh = cache.load_or_build("corpus", model_id, texts, embedder.encode)
    return texts, fresh, cache.path_for("corpus", model_id, texts_hash(texts)).read_bytes()


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_damaged_cache_file_is_detected_rebuilt_and_never_loaded(env, tmp_path, small_corpus, damage):
    texts, fresh, valid_file = small_corpus
    embedder, model_id = env.service.embedders[0], env.service.model_id
    path = EmbeddingCache(tmp_path).path_for("corpus", model_id, texts_hash(texts))
    path.write_bytes(valid_file)
    DAMAGES[damage](path)
    builds: list[int] = []

    def build(batch: list[str]) -> np.ndarray:
        builds.append(len(batch))
        return embedder.encode(batch)

    with pytest.warns(CacheWarning, match="ignoring embedding cache"):
        vectors = EmbeddingCache(tmp_path).load_or_build("corpus", model_id, texts, build)
    assert builds == [len(texts)]
    np.testing.assert_allclose(vectors, fresh, atol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        reloaded = EmbeddingCache(tmp_path).load_or_build("corpus", model_id, texts, _must_not_build)
    np.testing.assert_array_equal(reloaded, vectors)


def test_valid_cache_file_fixture_loads_as_is(env, tmp_path, small_corpus):
    """Control for the damage tests: the undamaged file loads without a warning or a build."""
    texts, fresh, valid_file = small_corpus
    path = EmbeddingCache(tmp_path).path_for("corpus", env.service.model_id, texts_hash(texts))
    path.write_bytes(valid_file)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        vectors = EmbeddingCache(tmp_path).load_or_build("corpus", env.service.model_id, texts, _must_not_build)
    np.testing.assert_array_equal(vectors, fresh)


def test_env_built_on_a_truncated_corpus_cache_rebuilds_it(env, tmp_path, small_world_kwargs):
    world = World(WorldConfig(**small_world_kwargs["world"]))
    docs = [d.text for d in world.documents]
    embedder, model_id = env.service.embedders[0], env.service.model_id
    cache = EmbeddingCache(tmp_path)
    cache.load_or_build("corpus", model_id, docs, embedder.encode)
    path = cache.path_for("corpus", model_id, texts_hash(docs))
    DAMAGES["truncated"](path)
    with pytest.warns(CacheWarning, match="ignoring embedding cache"):
        small = gym.make("EDO-v0", retrieval_cache_dir=str(tmp_path), **small_world_kwargs)
    try:
        np.testing.assert_allclose(small.unwrapped.service.doc_vectors, embedder.encode(docs), atol=1e-6)
        with warnings.catch_warnings():
            warnings.simplefilter("error", CacheWarning)
            reloaded = EmbeddingCache(tmp_path).load_or_build("corpus", model_id, docs, _must_not_build)
        np.testing.assert_array_equal(reloaded, small.unwrapped.service.doc_vectors)
    finally:
        small.close()


def test_cache_files_are_readable_by_others_as_the_umask_allows(tmp_path):
    from edo_gym.retrieval.cache import EmbeddingCache

    old = os.umask(0o022)
    try:
        cache = EmbeddingCache(tmp_path)
        cache.load_or_build("unit", "model-x", ["a", "b"], lambda texts: np.ones((len(texts), 3), dtype=np.float32))
    finally:
        os.umask(old)
    (path,) = tmp_path.glob("unit-*.npz")
    assert path.stat().st_mode & 0o777 == 0o644


# ================================================================================================ exact speed options
def test_presearched_results_equal_one_search_at_a_time(env):
    """``RetrievalConfig.presearch`` (on by default) batch-searches the canonical queries at a retriever's first
    search with a given k: every presearched result equals what a search of that query alone returns."""
    queries = env.world.canonical_queries()
    ks = sorted({spec.top_k for spec in env.config.workers})
    for retriever in {id(r): r for r in env.service.retrievers}.values():
        if retriever.size == 0:
            continue
        disk, retriever.disk = retriever.disk, None  # every result below from the index, none from the disk cache
        for k in ks:
            retriever.memo.clear()
            assert retriever.presearched is not None
            retriever.presearched.discard(k)
            before = retriever.presearches
            retriever.search(queries[0], k)  # the first search with k presearches every canonical query
            assert retriever.presearches == before + len(queries)
            batched = {q: retriever.memo.get((q, k)) for q in queries}
            assert all(v is not None for v in batched.values())
            retriever.memo.clear()
            retriever.presearched.add(k)  # no presearch: each query below is one index query
            searches = retriever.searches
            single = {q: retriever.search(q, k) for q in queries}
            assert retriever.searches == searches + len(queries)
            assert single == batched, [q for q in queries if single[q] != batched[q]][:5]
        retriever.disk = disk

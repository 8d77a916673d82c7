"""Speed options that claim to be exact do not change what the env computes.

- the bulk embedder (``Embedder.encode_many``: sentence-transformers' batches rebuilt, small chunks, threads) gives
  sentence-transformers' own ``encode`` vectors bit for bit (under the embedder's torch thread count), with one Python
  thread or several, and with ``singles`` the vector each text gets when embedded alone (what a query met at step time
  gets) on every CPU, including those where a one-row pass differs from a batched one;
- the Rust token counter gives the Python tokenizer's counts;
- same seeds and actions give the same observations, rewards and infos with presearch on or off, with the indexes
  built at the first reset or at the first search, with a cold embedding cache (built here, in threads) or a warm
  one, and with the memo caches warm or empty;
- ``RetrievalConfig.index_at_reset`` builds every worker's index and presearches its ``top_k`` at the first reset.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import edo_gym  # noqa: F401  (registers the ids)
from edo_gym.envs.edo_env import EDOEnv
from edo_gym.retrieval import default_cache_dir
from tests.exactness import assert_same, model_threads, trajectory


@pytest.fixture
def small_env(small_world_kwargs) -> EDOEnv:
    env = gym.make("EDO-v0", **small_world_kwargs)
    yield env.unwrapped
    env.close()


def _texts(env: EDOEnv) -> dict[str, list[str]]:
    return {
        "corpus": [d.text for d in env.world.documents],
        "queries": env.world.canonical_queries(),
        "tasks": [t.text for t in env.pool.tasks],
    }


@pytest.mark.parametrize("threads", [1, 2])
def test_bulk_encode_is_bit_identical_to_sentence_transformers(small_env, threads):
    embedder = small_env.service.embedders[0]
    texts = _texts(small_env)
    texts["with duplicates"] = texts["tasks"][:20] * 3 + texts["corpus"][:7]
    built = embedder.encode_many(list(texts.values()), threads=threads)
    for (kind, kind_texts), vectors in zip(texts.items(), built, strict=True):
        with model_threads(embedder):
            reference = embedder.model.encode(kind_texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
        assert vectors.dtype == np.float32 and vectors.shape == reference.shape
        assert np.array_equal(vectors, reference), f"{kind}: max diff {np.abs(vectors - reference).max()}"
    assert np.array_equal(embedder.encode(texts["corpus"]), built[0])
    # with a small batch size the reference batches (and padded lengths) differ: still bit-identical
    small = embedder.encode(texts["tasks"], batch_size=5)
    with model_threads(embedder):
        assert np.array_equal(small, embedder.model.encode(texts["tasks"], batch_size=5, normalize_embeddings=True))


@pytest.mark.parametrize("probe", ["measured", "one by one"])
def test_singles_are_the_vectors_of_texts_embedded_alone(small_env, probe, monkeypatch):
    """With ``singles`` each text gets its vector embedded alone: batched where this CPU's probe finds that exact,
    one by one otherwise (forced here, so that both paths run on every machine)."""
    embedder = small_env.service.embedders[0]
    if probe == "one by one":
        monkeypatch.setattr(embedder, "_rows_independent", False)
    texts = small_env.world.canonical_queries()[:40] + [
        "Who is the mentor of (missing)?",
        "Which carrier handles shipment I don't know?",
    ]
    (batched,) = embedder.encode_many([texts], singles=True, threads=2)
    with model_threads(embedder):
        alone = np.stack([embedder.model.encode([t], normalize_embeddings=True)[0] for t in texts])
    assert np.array_equal(batched, alone)
    assert all(np.array_equal(embedder.encode([t])[0], alone[i]) for i, t in enumerate(texts[:10]))


def test_embedder_runs_its_own_torch_threads_and_leaves_the_process_setting(small_env):
    """An embedder's forward passes run under its ``torch_threads`` (1 by default), set around each pass: loading or
    running it leaves the process's own count as it was (before, loading set it to 1, so ``edo train --torch-threads
    2`` trained with one thread), and its vectors do not depend on that count."""
    import torch

    from edo_gym.retrieval.embedder import Embedder

    text = small_env.world.canonical_queries()[0]
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        embedder = Embedder("default")
        assert embedder.torch_threads == 1 and torch.get_num_threads() == 2
        seen: list[int] = []
        embedder.model.register_forward_pre_hook(lambda module, args: seen.append(torch.get_num_threads()))
        vector = embedder.encode_one(text)
        assert seen == [1] and torch.get_num_threads() == 2
        embedder.torch_threads = None  # the process's count
        embedder.encode_one(text)
        assert seen == [1, 2] and torch.get_num_threads() == 2
        torch.set_num_threads(1)
        assert np.array_equal(vector, embedder.encode_one(text))  # the vector of a process at one thread
        assert seen == [1, 2, 1]
    finally:
        torch.set_num_threads(previous)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="torch_threads must be an int >= 1 or None"):
            Embedder("default", torch_threads=bad)  # type: ignore[arg-type]


def test_token_counts_match_the_python_tokenizer(small_env):
    embedder = small_env.service.embedders[0]
    rng = np.random.default_rng(0)
    alphabet = list("abc XYZ 123 ,.!?\u00e9\u00fc\u4e2d\u6587\n\t  ")
    texts = [*_texts(small_env)["corpus"], "", " ", "  padded  ", "word " * 700]
    texts += ["".join(rng.choice(alphabet, size=int(rng.integers(0, 600)))) for _ in range(50)]
    embedder.encode(texts[:10])  # sentence-transformers leaves truncation on in the shared tokenizer backend
    reference = [len(ids) for ids in embedder.tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]]
    assert embedder.count_tokens(texts) == reference
    assert [embedder.count_tokens([t])[0] for t in texts] == reference


def test_exact_speed_options_leave_trajectories_unchanged(tmp_path, small_world_kwargs, monkeypatch):
    """Same seeds and actions, same rewards and observations: presearch on/off, indexes built at the first reset or
    at the first search, cold cache built in two threads or warm cache, memo caches warm (a second pass) or empty,
    search results kept on disk or not (tests/retrieval/test_search_cache.py reads them back in another service)."""
    steps = 600
    monkeypatch.setenv("EDO_GYM_EMBED_THREADS", "2")
    runs: dict[str, list[Any]] = {}
    variants = {
        "default": {},
        "no presearch": {"retrieval": {"presearch": False}},
        "indexes at the first search": {"retrieval": {"index_at_reset": False}},
        "cold cache": {"retrieval": {"cache_dir": str(tmp_path / "cold")}},
        "cold cache, no presearch": {"retrieval": {"cache_dir": str(tmp_path / "cold2"), "presearch": False}},
        "no search cache": {"retrieval": {"search_cache": False}},
    }
    for name, kwargs in variants.items():
        env = gym.make("EDO-v0", **small_world_kwargs, **kwargs)
        try:
            runs[name] = trajectory(env, steps, seed=3)
            if name == "default":
                runs["warm memo caches"] = trajectory(env, steps, seed=3)  # every search now a memo hit
                assert env.unwrapped.service.retrievers[0].presearched, "presearch did not run"
        finally:
            env.close()
    for name, run in runs.items():
        assert_same(runs["default"], run, name)
    # the cold caches built here hold the vectors of the warm cache, file for file
    cold_files = sorted((tmp_path / "cold").glob("*.npz"))
    assert [p.name.split("-")[0] for p in cold_files] == ["corpus", "queries", "tasks"]
    for path in cold_files:
        with np.load(path) as cold, np.load(default_cache_dir() / path.name) as warm:
            assert np.array_equal(cold["vectors"], warm["vectors"]), path.name


@pytest.mark.parametrize("at_reset", [True, False])
def test_indexes_are_built_and_presearched_at_the_first_reset(small_world_kwargs, at_reset):
    """With ``index_at_reset`` (the default) the first ``reset()`` builds each worker's chromadb collection and
    presearches its ``top_k``, so no step pays for them; with ``False`` nothing is built before the first search."""
    # a result_cache_size of its own: a service (and its collections) of its own, not one an earlier test searched
    retrieval = {"index_at_reset": at_reset, "result_cache_size": 40_001 + at_reset}
    env = gym.make("EDO-v0", **small_world_kwargs, retrieval=retrieval)
    try:
        base = env.unwrapped
        retrievers = [w.retriever for w in base.workers]
        assert all(r.collection is None for r in retrievers)  # make() builds no index
        base.reset(seed=0)
        if at_reset:
            for w, r in zip(base.workers, retrievers, strict=True):
                assert r.collection is not None and w.spec.top_k in r.presearched, w.spec.name
                assert r.presearches + r.presearch_disk_hits > 0  # searched, or read from the run-time disk cache
        else:
            assert all(r.collection is None and not r.presearched for r in retrievers)
        searches = [r.searches for r in retrievers]
        base.reset(seed=1)  # later resets build nothing more
        assert [r.searches for r in retrievers] == searches
    finally:
        env.close()

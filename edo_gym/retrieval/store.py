"""Per-worker mini-RAG: chromadb collections over the world's document shards, with bounded memoisation.

:class:`RetrievalService` owns, per process, the embedder, the chromadb client and one collection per
distinct worker shard (``mode="shared"``, the default), or one embedder instance and one collection per
worker (``mode="per_worker"``, to measure what sharing saves). Corpus, canonical-query and task embeddings
come from the on-disk :class:`~edo_gym.retrieval.cache.EmbeddingCache`, so a warm process never re-embeds the
corpus; query embeddings and search results are memoised in bounded LRU caches, so every *first* retrieval is
a real embedding search and repeats are dictionary look-ups. With ``RetrievalConfig.presearch`` (the default), a
retriever searches all canonical queries for a given ``k`` at once, in batched chromadb queries, and memoises the
results (the same results as one query at a time; a fresh process then skips ~3,000 single searches). That happens
at an env's first ``reset()`` for each worker's ``top_k`` (``RetrievalConfig.index_at_reset``, the default, which
also builds the collections then; :meth:`ShardRetriever.prepare`), else at the retriever's first search with ``k``.

Search results on disk (``RetrievalConfig.search_cache``, on with the run-time cache): a result missing from the
memo is looked up in the run-time SQLite cache (:mod:`edo_gym.retrieval.runtime_cache`) under a digest of the query
vector and a fingerprint of the shard (its document indices and vectors, and the re-ranking margin) before the index
is queried; a result the index gives is stored there. A search is a pure function of those (every collection is
searched over its whole graph and the candidates are re-ranked exactly, below), so this is exact, like the memo, and
each stored result was found by a real index query in some process. :meth:`RetrievalService.search_reachable_queries`
(``edo prepare``) runs those queries ahead of use, in batches.

Fork safety: chromadb's native runtime does not survive ``fork()``; in a child forked from a process that had
started chromadb, every chromadb call blocks forever. In-memory collections are therefore built at the first
reset (or, with ``index_at_reset=False``, the first search), not at env construction: a parent that only builds an
env (as ``gym.make_vec(..., vectorization_mode="async")`` does on Linux with the default ``fork`` context, to read
the spaces) never starts chromadb, and its children use chromadb normally. A child forked from a process that *had*
reset or searched searches its shards with
:class:`ExactCollection` instead (exact cosine top-k in numpy over the same vectors; it agrees with chromadb's
HNSW index on >99.9% of queries) and warns once (:class:`ForkedChromaWarning`). The ``spawn`` and
``forkserver`` start methods always keep chromadb.

Identifiers (``RetrievalConfig.identifier_match``, off by default): sentence embeddings do not tell codes such as
``TRK-KAFEN-514`` apart, so a query naming one finds other shipments' documents. With the option on, a shard keeps a
keyword index of the identifiers its documents contain (:class:`IdentifierRetriever`), and a query naming an
identifier gets the shard's documents that contain it first, then the embedding search's results (a hybrid retriever's
keyword side).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import threading
import time
import uuid
import warnings
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edo_gym.config import RetrievalConfig
from edo_gym.retrieval.cache import EmbeddingCache, texts_hash
from edo_gym.retrieval.embedder import PROGRESS_DELAY_S, Embedder, space_decomposable
from edo_gym.retrieval.runtime_cache import RuntimeCache
from edo_gym.retrieval.static import StaticEmbedder
from edo_gym.world import queries as world_queries
from edo_gym.world.generator import World
from edo_gym.world.tasks import Task

#: Bound of the piece -> token count memo (cleared when exceeded).
PIECE_MEMO_MAX = 1_000_000

#: An identifier: upper-case letters, then hyphen-separated upper-case letters or digits (``ORD-RISFEN-37``,
#: ``TRK-KAFEN-514``); matched as a whole token (see ``RetrievalConfig.identifier_match``).
IDENTIFIER = re.compile(r"(?<![A-Za-z0-9-])[A-Z]{2,}(?:-[A-Z0-9]+)+(?![A-Za-z0-9-])")


def identifier_index(texts: Mapping[int, str]) -> dict[str, tuple[int, ...]]:
    """Identifier -> the indices (ascending) of the texts that contain it, over ``{index: text}``."""
    index: dict[str, list[int]] = {}
    for i in sorted(texts):
        for token in dict.fromkeys(IDENTIFIER.findall(texts[i])):
            index.setdefault(token, []).append(i)
    return {token: tuple(ids) for token, ids in index.items()}


def query_digest(vector: np.ndarray) -> bytes:
    """A 16-byte digest of a query vector's float32 values: what keys its search results on disk."""
    return hashlib.blake2b(np.ascontiguousarray(vector, dtype="<f4").tobytes(), digest_size=16).digest()


class LRUCache:
    """A bounded mapping that evicts the least recently used entry; counts hits and misses."""

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError(f"LRUCache maxsize must be >= 1, got {maxsize}")
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Any | None:
        value = self._data.get(key)
        if value is None:
            self.misses += 1
            return None
        self._data.move_to_end(key)
        self.hits += 1
        return value

    def put(self, key: Hashable, value: Any) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        if len(self._data) > self.maxsize:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        self._data.clear()


class LazyVectors:
    """Embeddings of a fixed list of texts (canonical queries, task texts), built a batch at a time on first use.

    The batches are sentence-transformers' own for the whole list: its order (``np.argsort`` of minus the character
    length) cut every ``batch_size`` texts. A text's vector depends only on the padded length of its batch (see
    :meth:`~edo_gym.retrieval.embedder.Embedder.encode_many`), and a batch embedded as a list of its own is padded
    to the same length, so each vector is the one-go build's bit for bit (tested). Batches built before the list is
    complete go to the run-time cache (other processes read them); the complete list goes to the disk cache file
    the one-go build writes.
    """

    def __init__(
        self,
        kind: str,
        texts: list[str],
        vectors: np.ndarray | None,
        embedder: Embedder,
        cache: EmbeddingCache,
        model_id: str,
        runtime: RuntimeCache | None,
        batch_size: int = 64,
    ) -> None:
        self.kind = kind
        self.texts = list(texts)
        self.embedder = embedder
        self.cache = cache
        self.model_id = model_id
        self.runtime = runtime
        self.list_key = f"{kind}:{texts_hash(self.texts)}:{batch_size}"
        #: Batches embedded in this process (not read from a cache).
        self.batches_built = 0
        self._full: np.ndarray | None = None
        if vectors is not None:
            self._full = np.ascontiguousarray(vectors, dtype=np.float32)
            return
        order = np.argsort([-len(t) for t in self.texts])  # sentence-transformers' order (the same call)
        self._batches = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
        self._batch_of = np.zeros(len(self.texts), dtype=np.int64)
        for b, rows in enumerate(self._batches):
            self._batch_of[rows] = b
        self._vectors = np.zeros((len(self.texts), embedder.dim), dtype=np.float32)
        self._have = np.zeros(len(self._batches), dtype=bool)

    #: ``(service, kind)`` when a ``RetrievalService`` holds this list (lets it pickle).
    origin: tuple[RetrievalService, str] | None = None

    def __reduce__(self) -> Any:
        # the embedder and the run-time cache's connection are per process: a pickled list is the target process's
        # own list for the same texts, from its service
        if self.origin is None:
            raise TypeError("a LazyVectors built outside a RetrievalService cannot be pickled")
        return (_lazy_of, (*self.origin, self.texts))

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def complete(self) -> bool:
        return self._full is not None

    def row(self, i: int) -> np.ndarray:
        """The vector of text ``i`` (its batch is built first if needed)."""
        if self._full is not None:
            return self._full[i]
        b = int(self._batch_of[i])
        if not self._have[b]:
            self._fill([b])
        return self._vectors[i]

    def batch_rows(self, i: int) -> np.ndarray:
        """Rows of the batch of text ``i``, built if needed (all rows once the list is complete)."""
        if self._full is not None:
            return np.arange(len(self.texts))
        b = int(self._batch_of[i])
        if not self._have[b]:
            self._fill([b])
        return self._batches[b]

    def full(self, progress: str | None = None) -> np.ndarray:
        """All vectors, shape ``(n, dim)``; the missing batches are built in one threaded pass."""
        if self._full is None:
            self._fill([b for b in range(len(self._batches)) if not self._have[b]], progress)
        assert self._full is not None
        return self._full

    def missing_batches(self) -> list[int]:
        """Batches not built yet, after reading those the run-time cache holds."""
        if self._full is not None:
            return []
        missing = []
        for b in np.flatnonzero(~self._have).tolist():
            rows = self._batches[b]
            got = self.runtime.get_batch(self.list_key, b, len(rows)) if self.runtime is not None else None
            if got is None:
                missing.append(b)
            else:
                self._vectors[rows] = got
                self._have[b] = True
        return missing

    def batch_texts(self, b: int) -> list[str]:
        return [self.texts[r] for r in self._batches[b]]

    def set_batch(self, b: int, vectors: np.ndarray, persist: bool = True) -> None:
        """Store batch ``b``'s freshly built vectors (in the run-time cache with ``persist``, and the whole list in
        the disk cache once complete)."""
        self._vectors[self._batches[b]] = vectors
        self._have[b] = True
        self.batches_built += 1
        if persist and self.runtime is not None and not self._have.all():
            self.runtime.put_batch(self.list_key, b, vectors)
        self._check_complete()

    def _check_complete(self) -> None:
        if self._full is None and self._have.all():
            self._full = self._vectors
            self.cache.store(self.kind, self.model_id, self.texts, self._full)

    def _fill(self, batches: list[int], progress: str | None = None) -> None:
        missing = [b for b in self.missing_batches() if b in set(batches)]
        if missing:
            built = self.embedder.encode_many([self.batch_texts(b) for b in missing], progress=progress)
            for b, vectors in zip(missing, built, strict=True):
                self.set_batch(b, vectors)
        self._check_complete()


class QueryEncoder:
    """Query text -> unit vector: canonical queries first (built lazily, see :class:`LazyVectors`), then a bounded
    memo, then the run-time disk cache, then the model."""

    def __init__(
        self,
        embedder: Embedder,
        canonical: dict[str, int],
        canonical_vectors: LazyVectors,
        cache_size: int,
        runtime: RuntimeCache | None = None,
    ) -> None:
        self.embedder = embedder
        self.canonical = canonical
        self.lazy_canonical = canonical_vectors
        self.memo = LRUCache(cache_size)
        self.runtime = runtime
        #: Query texts embedded by the model (found in no cache), and the seconds those forward passes took.
        self.model_calls = 0
        self.model_s = 0.0

    @property
    def canonical_vectors(self) -> np.ndarray:
        """Vectors of every canonical query (built now if some are missing)."""
        return self.lazy_canonical.full()

    def encode(self, text: str) -> np.ndarray:
        row = self.canonical.get(text)
        if row is not None:
            return self.lazy_canonical.row(row)
        vec = self.memo.get(text)
        if vec is None:
            runtime = self.runtime
            vec = runtime.get_vector(text) if runtime is not None else None
            if vec is None:
                t0 = time.perf_counter()
                vec = self.embedder.encode_one(text)
                self.model_s += time.perf_counter() - t0
                self.model_calls += 1
                if runtime is not None:
                    runtime.put_vector(text, vec)
            self.memo.put(text, vec)
        return vec


class ShardRetriever:
    """Top-k search over one chromadb collection (a worker's knowledge shard), memoised per (query, k)."""

    def __init__(
        self,
        collection: Any,
        encoder: QueryEncoder,
        domains: tuple[str, ...],
        cache_size: int,
        factory: Callable[[], Any] | None = None,
        size: int | None = None,
    ) -> None:
        """:param factory: builds the collection at the first search (``collection`` is then ``None`` and ``size``
        gives the number of documents it will hold)."""
        self.collection = collection
        self.factory = factory
        self.encoder = encoder
        self.domains = domains
        if collection is not None:
            self.size = collection.count()
        elif factory is not None:
            if size is None:
                raise ValueError("a lazily built ShardRetriever needs its size")
            self.size = size
        else:
            self.size = 0
        self.memo = LRUCache(cache_size)
        #: Index queries: made by :meth:`search` (timed in ``search_s``) and by :meth:`search_many` (not timed).
        self.searches = 0
        self.search_s = 0.0
        #: Canonical queries searched ahead of use in batches (see ``RetrievalConfig.presearch``); ``None``: off.
        self.presearched: set[int] | None = None
        #: ``k`` values whose presearch waited for the complete list of canonical vectors (a cold cache): done by
        #: :meth:`RetrievalService.run_pending_presearches` once the list is built (see :meth:`_presearch`).
        self.presearch_pending: set[int] = set()
        self.presearches = 0
        #: Corpus vectors for exact re-ranking of the index's candidates (``None``: take the index's order).
        self.vectors: np.ndarray | None = None
        #: ``(service, worker index)`` when a ``RetrievalService`` built this retriever (lets it pickle).
        self.origin: tuple[RetrievalService, int] | None = None
        #: Run-time disk cache that keeps search results across processes (``None``: off); needs ``vectors`` and
        #: ``indices`` (see :meth:`search`).
        self.disk: RuntimeCache | None = None
        #: Corpus indices of this shard's documents (set by the service; checks results read from ``disk``).
        self.indices: frozenset[int] = frozenset()
        self._fingerprint: str | None = None
        #: Results read from ``disk`` instead of searched (``searches`` counts the index queries).
        self.disk_hits = 0
        #: Canonical queries' results read from ``disk`` by presearch (``presearches`` counts those searched).
        self.presearch_disk_hits = 0

    def __reduce__(self) -> Any:
        # A chromadb collection cannot be pickled: a pickled retriever is looked up again in its service.
        if self.origin is None:
            raise TypeError("a ShardRetriever built outside a RetrievalService cannot be pickled")
        return (_retriever_of, self.origin)

    def search(self, query: str, k: int) -> tuple[int, ...]:
        """Corpus indices of the ``k`` nearest documents of this shard (fewer if the shard is smaller)."""
        if self.size == 0:
            return ()
        key = (query, k)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        if self.presearched is not None and k not in self.presearched:
            self._presearch(k)
            hit = self.memo.get(key)
            if hit is not None:
                return hit
        vector = self.encoder.encode(query)
        disk = self.disk
        if disk is not None:
            digest = query_digest(vector)
            ids = disk.get_search(self.fingerprint, k, digest)
            if ids is not None and self._valid(ids, k):
                self.disk_hits += 1
                self.memo.put(key, ids)
                return ids
        collection = self._collection()
        t0 = time.perf_counter()
        result = collection.query(query_embeddings=vector[None, :], n_results=min(k + RERANK_MARGIN, self.size), include=[])
        ids = self._top_k(result["ids"][0], vector, k)
        self.search_s += time.perf_counter() - t0
        self.searches += 1
        self.memo.put(key, ids)
        if disk is not None:
            disk.put_search(self.fingerprint, k, digest, ids)
        return ids

    @property
    def fingerprint(self) -> str:
        """A digest of what a search result depends on besides the query vector and ``k``: the shard's documents
        (corpus indices and vectors) and the re-ranking margin. Keys this shard's results in the disk cache."""
        if self._fingerprint is None:
            if self.vectors is None or not self.indices:
                raise RuntimeError("a ShardRetriever needs its vectors and indices to key results on disk")
            idx = np.asarray(sorted(self.indices), dtype="<i8")
            h = hashlib.sha256(f"edo-search-v1 margin={RERANK_MARGIN} dim={self.vectors.shape[1]}".encode())
            h.update(idx.tobytes())
            h.update(np.ascontiguousarray(self.vectors[idx], dtype="<f4").tobytes())
            self._fingerprint = h.hexdigest()[:32]
        return self._fingerprint

    def _valid(self, ids: tuple[int, ...], k: int) -> bool:
        """A result read from disk: ``min(k, size)`` distinct documents of this shard."""
        return len(ids) == min(k, self.size) and len(set(ids)) == len(ids) and all(i in self.indices for i in ids)

    def search_many(self, queries: Sequence[str], k: int, progress: str | None = None) -> int:
        """Search ``queries`` for ``k`` in batched index queries (as presearch does) and store the results in the disk
        cache, skipping those it holds already: exactly what :meth:`search` would find and store one at a time.

        :returns: the number of queries searched.
        """
        if self.disk is None or self.size == 0 or not queries:
            return 0
        queries = list(dict.fromkeys(queries))
        vectors = np.stack([self.encoder.encode(q) for q in queries]).astype(np.float32, copy=False)
        searched = self._search_batched(vectors, k, progress)[1]
        self.searches += len(searched)
        return len(searched)

    def _search_batched(
        self, vectors: np.ndarray, k: int, progress: str | None = None
    ) -> tuple[dict[int, tuple[int, ...]], dict[int, tuple[int, ...]]]:
        """Top-``k`` results of each row of ``vectors``: read from the disk cache in bulk where it holds a valid one,
        else found by batched index queries (one per :data:`PRESEARCH_BATCH` rows, each row's candidates re-ranked
        exactly, as :meth:`search` does) and stored there. ``({row: ids} read, {row: ids} searched)``; the caller
        counts them."""
        disk = self.disk
        rows = list(range(len(vectors)))
        read: dict[int, tuple[int, ...]] = {}
        digests: list[bytes] = []
        if disk is not None:
            digests = [query_digest(v) for v in vectors]
            stored = disk.get_searches(self.fingerprint, k, digests)
            for j, digest in enumerate(digests):
                ids = stored.get(digest)
                if ids is not None and self._valid(ids, k):
                    read[j] = ids
            rows = [j for j in rows if j not in read]
        searched: dict[int, tuple[int, ...]] = {}
        if not rows:
            return read, searched
        from tqdm.auto import tqdm

        collection = self._collection()
        n = min(k + RERANK_MARGIN, self.size)
        bar = tqdm(
            total=len(rows), desc=progress, unit="query", delay=PROGRESS_DELAY_S, mininterval=0.5, disable=progress is None
        )
        with bar:
            for start in range(0, len(rows), PRESEARCH_BATCH):
                part = rows[start : start + PRESEARCH_BATCH]
                result = collection.query(query_embeddings=vectors[part], n_results=n, include=[])
                for j, ids in zip(part, result["ids"], strict=True):
                    searched[j] = self._top_k(ids, vectors[j], k)
                bar.update(len(part))
        if disk is not None:
            disk.put_searches(self.fingerprint, k, [(digests[j], ids) for j, ids in searched.items()])
        return read, searched

    def prepare(self, k: int) -> None:
        """Build the index now (if it is built lazily) and, with presearch on, presearch the canonical queries for
        ``k``: what the first :meth:`search` with ``k`` would do, done ahead of it. Results are unchanged."""
        if self.size == 0:
            return
        self._collection()
        if self.presearched is not None and k not in self.presearched:
            self._presearch(k)

    def _collection(self) -> Any:
        if self.collection is None:
            assert self.factory is not None
            self.collection = self.factory()
        return self.collection

    def _top_k(self, ids: Sequence[str], vector: np.ndarray, k: int) -> tuple[int, ...]:
        candidates = np.asarray([int(i) for i in ids], dtype=np.int64)
        if self.vectors is not None and len(candidates):
            # exact cosine re-ranking of the candidates, ties broken by corpus index: the same top k in every process,
            # whichever index (HNSW graph or exact numpy search) produced the candidates
            scores = self.vectors[candidates] @ np.asarray(vector, dtype=np.float32)
            order = np.lexsort((candidates, -np.round(scores, 6)))
            candidates = candidates[order]
        return tuple(int(i) for i in candidates[:k])

    def _presearch(self, k: int) -> None:
        """Search every canonical query for ``k`` in batches (one index query per :data:`PRESEARCH_BATCH` vectors),
        memoising the results: exactly what :meth:`search` would return for each of them one at a time. With the disk
        cache, results an earlier process stored are read from it in bulk and only the others are searched (and
        stored)."""
        assert self.presearched is not None
        if not self.encoder.lazy_canonical.complete:  # not all canonical vectors built yet: search one at a time
            self.presearch_pending.add(k)
            return
        self.presearch_pending.discard(k)
        self.presearched.add(k)
        texts = list(self.encoder.canonical)
        vectors = self.encoder.canonical_vectors
        if not texts or len(texts) > self.memo.maxsize // 2:  # the memo could not keep them
            return
        # results an earlier process stored are read from the disk cache in bulk; the others are searched (and stored)
        read, searched = self._search_batched(vectors, k)
        for j, text in enumerate(texts):
            self.memo.put((text, k), read[j] if j in read else searched[j])
        self.presearch_disk_hits += len(read)
        self.presearches += len(searched)


class IdentifierRetriever(ShardRetriever):
    """A :class:`ShardRetriever` with a keyword index of the identifiers its shard's documents contain
    (``RetrievalConfig.identifier_match``): a query that names one gets the documents that contain it first, nearest
    first, then the embedding search's results."""

    def __init__(self, *args: Any, identifiers: dict[str, tuple[int, ...]], **kwargs: Any) -> None:
        """:param identifiers: identifier -> this shard's documents that contain it (:func:`identifier_index`)."""
        super().__init__(*args, **kwargs)
        self.identifiers = identifiers

    def search(self, query: str, k: int) -> tuple[int, ...]:
        ids = super().search(query, k)
        named = {i for token in IDENTIFIER.findall(query) for i in self.identifiers.get(token, ())}
        if not named:
            return ids
        first = np.asarray(sorted(named), dtype=np.int64)
        if self.vectors is not None:  # nearest first, ties by corpus index (as the embedding search ranks)
            scores = self.vectors[first] @ np.asarray(self.encoder.encode(query), dtype=np.float32)
            first = first[np.lexsort((first, -np.round(scores, 6)))]
        ranked = tuple(int(i) for i in first)
        return (ranked + tuple(i for i in ids if i not in named))[:k]


#: Process id in which this module started chromadb (inherited, unchanged, by forked children).
_CHROMA_PID: int | None = None


class ForkedChromaWarning(RuntimeWarning):
    """This process was forked after chromadb started in its parent: shards are searched exactly in numpy."""


def chroma_usable() -> bool:
    """``False`` in a process forked after chromadb started in its parent (chromadb calls would block forever)."""
    return _CHROMA_PID is None or os.getpid() == _CHROMA_PID


class ExactCollection:
    """Exact cosine top-k over unit vectors, with the two chromadb collection methods ``ShardRetriever`` uses."""

    def __init__(self, vectors: np.ndarray, indices: Sequence[int]) -> None:
        self.ids = np.asarray(indices, dtype=np.int64)
        self.matrix = np.ascontiguousarray(vectors[self.ids], dtype=np.float32)

    def count(self) -> int:
        return len(self.ids)

    def query(self, query_embeddings: np.ndarray, n_results: int, include: Any = None) -> dict[str, list[list[str]]]:
        out = []
        for query in np.asarray(query_embeddings, dtype=np.float32).reshape(-1, self.matrix.shape[1]):
            scores = self.matrix @ query
            k = min(n_results, len(scores))
            top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
            top = top[np.argsort(-scores[top], kind="stable")]
            out.append([str(int(i)) for i in self.ids[top]])
        return {"ids": out}


def _restore_service(
    world: World, config: RetrievalConfig, shards: Sequence[tuple[str, ...]], task_lists: Sequence[Sequence[Task]]
) -> RetrievalService:
    """Unpickle a :class:`RetrievalService`: this process's own service for ``world``, ``config`` and ``shards``
    (:meth:`RetrievalService.get`), with the pickled service's task pools registered (:meth:`~RetrievalService.add_tasks`)."""
    service = RetrievalService.get(world, config, shards)
    for tasks in task_lists:
        service.add_tasks(tasks)
    return service


def _chroma_client(chroma_dir: str | None) -> Any:
    global _CHROMA_PID
    import chromadb

    settings = chromadb.Settings(anonymized_telemetry=False, allow_reset=False)
    if chroma_dir is None:
        client = chromadb.EphemeralClient(settings=settings)
    else:
        client = chromadb.PersistentClient(path=chroma_dir, settings=settings)
    _CHROMA_PID = os.getpid()
    return client


def _build_lock(chroma_dir: str | None) -> Any:
    """An inter-process lock around collection builds in a persistent directory (a no-op in memory)."""
    if chroma_dir is None:
        return contextlib.nullcontext()
    from filelock import FileLock

    os.makedirs(chroma_dir, exist_ok=True)
    return FileLock(os.path.join(chroma_dir, ".edo-build.lock"), timeout=600)


# Two HNSW builds of the same vectors need not give the same graph (even single-threaded, in chromadb 1.5), and a
# search with a small ``ef_search`` then returns different neighbours in different processes. Shards here hold at
# most a few thousand documents, so each collection is searched with ``ef_search`` >= its size: the search visits
# the whole graph, and its candidates are re-ranked exactly (see ``ShardRetriever.search``). Measured: 0 of 816
# queries differ from exact numpy search over 4 builds of the largest default shard (1,212 documents), at 1-2 ms.
_HNSW = {"hnsw": {"space": "cosine", "ef_construction": 200, "ef_search": 200, "max_neighbors": 32, "num_threads": 1}}


def _hnsw_config(size: int) -> dict[str, dict[str, Any]]:
    return {"hnsw": {**_HNSW["hnsw"], "ef_search": max(200, size)}}


#: Extra candidates fetched from the index and re-ranked exactly, so the top k do not depend on the index graph.
RERANK_MARGIN = 8
#: Query vectors per batched index query when presearching canonical queries.
PRESEARCH_BATCH = 256


def build_collection(client: Any, name: str, vectors: np.ndarray, indices: Sequence[int], persistent: bool) -> Any:
    """Get or (re)build collection ``name`` holding ``vectors[indices]`` with ids ``str(index)``.

    A collection is marked complete in its metadata only after every vector was added, so a build killed
    half-way (in a persistent directory) is detected at the next start and redone.
    """
    expected = len(indices)
    if persistent:
        try:
            existing = client.get_collection(name)
            meta = existing.metadata or {}
            if meta.get("edo_complete") and meta.get("edo_count") == expected and existing.count() == expected:
                return existing
            warnings.warn(f"chromadb collection {name} is incomplete (interrupted build?); rebuilding it", stacklevel=2)
            client.delete_collection(name)
        except Exception as exc:  # chromadb raises NotFoundError / ValueError depending on version
            if "does not exist" not in str(exc) and "not found" not in str(exc).lower():
                raise
    collection = client.create_collection(
        name,
        embedding_function=None,
        configuration=_hnsw_config(expected),
        metadata={"edo_complete": False, "edo_count": expected},
    )
    batch = max(1, min(5000, client.get_max_batch_size()))
    idx = list(indices)
    for start in range(0, len(idx), batch):
        part = idx[start : start + batch]
        collection.add(ids=[str(i) for i in part], embeddings=vectors[part])
    collection.modify(metadata={"edo_complete": True, "edo_count": expected})
    return collection


class RetrievalService:
    """Embedder, caches and chromadb collections for one world, shared by every env of a process (shared mode)."""

    _registry: dict[tuple, RetrievalService] = {}
    _lock = threading.Lock()

    def __init__(
        self,
        world: World,
        config: RetrievalConfig,
        shards: Sequence[tuple[str, ...]],
        extra_texts: Mapping[str, list[str]] | None = None,
    ) -> None:
        """:param extra_texts: more fixed lists of texts to embed now (``{kind: texts}``, e.g. the task pool), in one
        go with the corpus and canonical queries when the disk cache lacks them; :meth:`embed_texts` returns them."""
        self.world = world
        self.config = config
        self.shards = [tuple(s) for s in shards]
        self.pid = os.getpid()
        self.cache = EmbeddingCache(config.cache_dir)
        n_embedders = len(shards) if config.mode == "per_worker" else 1
        self.embedders = [make_embedder(config, self.cache.directory) for _ in range(n_embedders)]
        embedder = self.embedders[0]
        self.model_id = embedder.model_id
        docs = [d.text for d in world.documents]
        queries = world.canonical_queries()
        extra = dict(extra_texts or {})
        if {"corpus", "queries"} & set(extra):
            raise ValueError(f"extra_texts kinds must not be 'corpus' or 'queries', got {sorted(extra)}")
        self.runtime = RuntimeCache(self.cache.directory, self.model_id, embedder.dim) if config.runtime_cache else None
        #: The run-time cache where query vectors and lazily built batches are kept: ``runtime`` for the transformer,
        #: ``None`` for the static encoder, whose vector is a table look-up, cheaper to compute than to read (search
        #: results and token counts are kept in ``runtime`` for both encoders).
        self.vector_runtime = self.runtime if config.encoder == "transformer" else None
        # a static encoder embeds every list in milliseconds: build them all now (lazy batches would only delay
        # presearch, which waits for the complete list of canonical queries)
        self.lazy = config.lazy_embeddings and config.encoder == "transformer"
        if self.lazy:
            # the corpus now (every shard index needs it); queries and task texts a batch at a time when first used
            vectors = self.cache.load_or_build_many(self.model_id, {"corpus": docs}, self._build_embeddings)
            vectors.update(
                {kind: self.cache.load(kind, self.model_id, texts) for kind, texts in {"queries": queries, **extra}.items()}
            )
        else:
            requests = {"corpus": docs, "queries": queries, **extra}
            vectors = self.cache.load_or_build_many(self.model_id, requests, self._build_embeddings)
        self.doc_vectors = vectors["corpus"]
        self.doc_tokens = np.asarray(embedder.count_tokens(docs), dtype=np.int32)
        self._lazy: dict[str, LazyVectors] = {}
        lazy_queries = self._lazy_vectors("queries", queries, vectors["queries"])
        for kind, texts in extra.items():
            self._lazy_vectors(kind, texts, vectors[kind])
        canonical = {q: i for i, q in enumerate(queries)}
        self.encoders = [
            QueryEncoder(e, canonical, lazy_queries, config.query_cache_size, self.vector_runtime) for e in self.embedders
        ]
        #: ``"chromadb"``, or ``"exact"`` in a process forked after chromadb started (see module docstring).
        self.search_backend = "chromadb" if chroma_usable() else "exact"
        if self.search_backend == "exact":
            warnings.warn(
                f"this process (pid {os.getpid()}) was forked after chromadb started in process {_CHROMA_PID}; "
                "chromadb cannot run here (its calls would hang), so shards are searched exactly in numpy instead. "
                "Use the 'spawn' or 'forkserver' start method to keep chromadb.",
                ForkedChromaWarning,
                stacklevel=3,
            )
        # a persistent directory is built (or checked) now; in-memory collections at the first reset or search
        persistent = config.chroma_dir is not None
        self.client = _chroma_client(config.chroma_dir) if self.search_backend == "chromadb" and persistent else None
        model_key = hashlib.sha256(self.model_id.encode()).hexdigest()[:8]
        by_domain = world.documents_by_domain()
        self.retrievers: list[ShardRetriever] = []
        built: dict[tuple[str, ...], ShardRetriever] = {}
        lock = _build_lock(config.chroma_dir) if self.client is not None else contextlib.nullcontext()
        with lock:  # processes sharing a chroma_dir build (or check) one at a time
            self._build_retrievers(world, config, shards, model_key, by_domain, built)
        self._client_lock = threading.Lock()
        #: Task pools of the envs built on this service, by ``id`` (each held here): their analytics tasks' compute
        #: queries are among the reachable queries (see :meth:`add_tasks`).
        self._task_lists: dict[int, Sequence[Task]] = {}
        #: The contents of those pools, so that an equal pool in another list (an unpickled copy) is not added again.
        self._task_contents: set[tuple[Task, ...]] = set()
        self.token_memo = LRUCache(config.query_cache_size)
        #: piece -> token count when whole texts may be counted by pieces (see :meth:`count_tokens`), else ``None``
        self.piece_tokens: dict[str, int] | None = {} if space_decomposable(embedder.token_counter()) else None
        #: whether ``piece_tokens`` holds the counts stored in the run-time cache (read at the first piece not held)
        self._pieces_loaded = False
        #: pieces counted by the tokenizer in this process (held neither in ``piece_tokens`` nor in the run-time cache)
        self.pieces_counted = 0

    def _build_retrievers(
        self,
        world: World,
        config: RetrievalConfig,
        shards: Sequence[tuple[str, ...]],
        model_key: str,
        by_domain: dict[str, list[int]],
        built: dict[tuple[str, ...], ShardRetriever],
    ) -> None:
        for w, shard in enumerate(shards):
            key = tuple(sorted(shard))
            if config.mode == "shared" and key in built:
                self.retrievers.append(built[key])
                continue
            indices = sorted(i for dom in key for i in by_domain[dom])
            shard_key = hashlib.sha256(",".join(key).encode()).hexdigest()[:8]
            name = f"edo-{world.corpus_hash}-{model_key}-{shard_key}"
            if config.mode == "per_worker":
                name += f"-w{w}-{uuid.uuid4().hex[:8]}" if config.chroma_dir is None else f"-w{w}"
            elif config.chroma_dir is None:
                name += f"-{uuid.uuid4().hex[:8]}"  # in-memory clients of one process share a backend
            encoder = self.encoders[w if config.mode == "per_worker" else 0]
            make: Callable[..., ShardRetriever] = ShardRetriever
            if config.identifier_match:
                texts = {i: world.documents[i].text for i in indices}
                make = functools.partial(IdentifierRetriever, identifiers=identifier_index(texts))
            if not indices:
                retriever = make(None, encoder, key, config.result_cache_size)
            elif config.chroma_dir is None:
                # In memory, chromadb starts at the first reset or search: a process that only builds envs (e.g. the
                # parent of gymnasium's fork-based AsyncVectorEnv) never starts it, so the children it forks can use it.
                factory = functools.partial(self._make_collection, name, indices)
                retriever = make(None, encoder, key, config.result_cache_size, factory=factory, size=len(indices))
            else:
                collection = (
                    build_collection(self.client, name, self.doc_vectors, indices, persistent=True)
                    if self.client is not None
                    else ExactCollection(self.doc_vectors, indices)
                )
                retriever = make(collection, encoder, key, config.result_cache_size)
            retriever.origin = (self, w)
            retriever.vectors = self.doc_vectors
            retriever.indices = frozenset(indices)
            if config.search_cache and config.ablation == "none" and indices:
                retriever.disk = self.runtime
            if config.presearch and config.ablation == "none":
                retriever.presearched = set()
            built[key] = retriever
            self.retrievers.append(retriever)

    def _make_collection(self, name: str, indices: Sequence[int]) -> Any:
        """Build an in-memory shard collection: chromadb, or exact numpy search where chromadb cannot run."""
        if not chroma_usable():
            if self.search_backend != "exact":
                self.search_backend = "exact"
                warnings.warn(
                    f"this process (pid {os.getpid()}) was forked after chromadb started in process {_CHROMA_PID}; "
                    "chromadb cannot run here (its calls would hang), so shards are searched exactly in numpy instead. "
                    "Use the 'spawn' or 'forkserver' start method to keep chromadb.",
                    ForkedChromaWarning,
                    stacklevel=4,
                )
            return ExactCollection(self.doc_vectors, indices)
        with self._client_lock:
            if self.client is None:
                self.client = _chroma_client(None)
            return build_collection(self.client, name, self.doc_vectors, indices, persistent=False)

    def __reduce__(self) -> Any:
        # Embedder, chromadb client and caches are per process: a pickled service is the target process's own
        # service for the same world, config and shards (built there if needed), as ``get`` gives it, with the task
        # pools registered here registered there too (an env pickled with its service shares its pool's list)
        return (_restore_service, (self.world, self.config, self.shards, list(self._task_lists.values())))

    @classmethod
    def get(
        cls,
        world: World,
        config: RetrievalConfig,
        shards: Sequence[tuple[str, ...]],
        extra_texts: Mapping[str, list[str]] | None = None,
    ) -> RetrievalService:
        """The process-wide service for this world and config (a new one per call in ``per_worker`` mode).

        :param extra_texts: see :class:`RetrievalService` (used when a new service is built).
        """
        if config.mode == "per_worker":
            return cls(world, config, shards, extra_texts)
        key = (world.corpus_hash, config.model, config.cache_dir, config.chroma_dir, config.query_cache_size,
               config.result_cache_size, config.presearch, config.lazy_embeddings, config.runtime_cache, config.encoder,
               config.search_cache, config.identifier_match,
               tuple(tuple(sorted(s)) for s in shards))  # fmt: skip
        with cls._lock:
            service = cls._registry.get(key)
            if service is None or service.pid != os.getpid():  # never reuse a service inherited through fork
                service = cls(world, config, shards, extra_texts)
                cls._registry[key] = service
            return service

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under the embedder's tokenizer (memoised).

        With a tokenizer that :func:`~edo_gym.retrieval.embedder.space_decomposable` accepts (the default model's),
        a new text is counted as the sum of its space-separated pieces' counts, each piece counted once by the
        tokenizer and memoised: exact (tested against counting whole texts), and the pieces (names, relation and
        template words) repeat across texts. Each piece counted is kept in the run-time disk cache too, and a process
        reads every piece stored there at its first piece not held (a later process runs the tokenizer only for pieces
        no process met). Otherwise whole texts are counted, and kept in the run-time disk cache.
        """
        n = self.token_memo.get(text)
        if n is None:
            if self.piece_tokens is not None:
                n = self._count_by_pieces(text)
            else:
                runtime = self.runtime
                n = runtime.get_tokens(text) if runtime is not None else None
                if n is None:
                    n = self.embedders[0].count_tokens([text])[0]
                    if runtime is not None:
                        runtime.put_tokens(text, n)
            self.token_memo.put(text, n)
        return n

    def _count_by_pieces(self, text: str) -> int:
        memo = self.piece_tokens
        assert memo is not None
        pieces = text.split(" ")
        try:  # every piece counted before (the common case): one comprehension, no per-piece test
            return sum([memo[piece] for piece in pieces])
        except KeyError:
            pass
        total = 0
        missing: list[str] = []
        for piece in pieces:
            c = memo.get(piece)
            if c is None:
                missing.append(piece)
            else:
                total += c
        if missing:
            if not self._pieces_loaded:  # the first piece not held: read what earlier processes counted, then again
                self._load_pieces()
                return self._count_by_pieces(text)
            counted = self._count_new_pieces(list(dict.fromkeys(missing)))
            total += sum(counted[p] for p in missing)
        return total

    def _count_new_pieces(self, pieces: list[str]) -> dict[str, int]:
        """Run the tokenizer on ``pieces`` (distinct, none held), memoise the counts and store them in the run-time
        cache (buffered)."""
        memo = self.piece_tokens
        assert memo is not None
        if len(memo) > PIECE_MEMO_MAX:
            memo.clear()
        counted = dict(zip(pieces, self.embedders[0].count_tokens(pieces), strict=True))
        memo.update(counted)
        self.pieces_counted += len(counted)
        if self.runtime is not None:
            self.runtime.put_tokens_many(counted)
        return counted

    def _load_pieces(self) -> None:
        """Add the piece counts the run-time cache holds to ``piece_tokens`` (once per process)."""
        self._pieces_loaded = True
        if self.runtime is not None and self.piece_tokens is not None:
            stored = self.runtime.space_free_tokens()
            if len(self.piece_tokens) + len(stored) <= PIECE_MEMO_MAX:
                self.piece_tokens.update(stored)

    def store_piece_counts(self, texts: Sequence[str] | None = None) -> int:
        """Count now the pieces (space-separated words) of ``texts`` that neither this process nor the run-time cache
        holds, and store them there: a later process reads them instead of running the tokenizer (see
        :meth:`count_tokens`; exact). ``texts`` defaults to what this service knows a run will count: the corpus, the
        canonical and reachable queries and the fixed text lists (the task pool). A no-op (0) without a run-time cache,
        or with a tokenizer whose counts are not sums of pieces.

        :returns: the number of pieces counted.
        """
        if self.runtime is None or self.piece_tokens is None or not self.runtime.writable():
            return 0
        if texts is None:
            lists = [[d.text for d in self.world.documents], self.world.canonical_queries(), self.reachable_query_texts()]
            texts = [text for texts in lists + [lazy.texts for lazy in self._lazy.values()] for text in texts]
        if not self._pieces_loaded:
            self._load_pieces()
        memo = self.piece_tokens
        unique = [piece for piece in dict.fromkeys(piece for text in texts for piece in text.split(" ")) if piece not in memo]
        if not unique:
            return 0
        self._count_new_pieces(unique)
        self.runtime.flush()
        return len(unique)

    def _build_embeddings(self, requests: dict[str, list[str]]) -> dict[str, np.ndarray]:
        """Embed the lists the disk cache lacks, all at once, with a progress bar when it takes a while."""
        n = sum(len(texts) for texts in requests.values())
        desc = f"EDO-Gym first run: embedding {n:,} texts ({', '.join(requests)}), cached for later runs"
        built = self.embedders[0].encode_many(list(requests.values()), progress=desc)
        return dict(zip(requests, built, strict=True))

    def _lazy_vectors(self, kind: str, texts: list[str], vectors: np.ndarray | None) -> LazyVectors:
        lazy = LazyVectors(kind, texts, vectors, self.embedders[0], self.cache, self.model_id, self.vector_runtime)
        lazy.origin = (self, kind)
        self._lazy[_texts_key(kind, texts)] = lazy
        return lazy

    def lazy_texts(self, kind: str, texts: list[str]) -> LazyVectors:
        """Embeddings of a fixed list of texts (e.g. the task pool), built a batch at a time when first used."""
        lazy = self._lazy.get(_texts_key(kind, texts))
        if lazy is None:
            if self.lazy:
                vectors = self.cache.load(kind, self.model_id, texts)
            else:
                vectors = self.cache.load_or_build_many(self.model_id, {kind: texts}, self._build_embeddings)[kind]
            lazy = self._lazy_vectors(kind, texts, vectors)
        return lazy

    def embed_texts(self, kind: str, texts: list[str]) -> np.ndarray:
        """Embeddings of a fixed list of texts (e.g. the task pool), through the disk cache, all built now."""
        lazy = self.lazy_texts(kind, texts)
        if lazy.complete:
            return lazy.full()
        return lazy.full(progress=f"EDO-Gym: embedding {len(texts):,} texts ({kind}), cached for later runs")

    def complete_all(self, reachable_queries: bool = False, top_k: Sequence[int] | None = None) -> None:
        """Build every list still incomplete (canonical queries, task texts) now, in one pass with a progress bar,
        and write them to the disk cache: what a later process then loads at start-up. Then run the presearches that
        waited for the canonical list (:meth:`run_pending_presearches`).

        :param reachable_queries: then also :meth:`embed_reachable_queries`, given ``top_k``
            :meth:`search_reachable_queries`, and :meth:`store_piece_counts` (``edo prepare`` does all of it).
        :param top_k: each worker's ``k``, for :meth:`search_reachable_queries`.
        """
        self._complete_lists()
        self.run_pending_presearches()
        if reachable_queries:
            self.embed_reachable_queries()
            if top_k is not None:
                self.search_reachable_queries(top_k)
            self.store_piece_counts()

    def run_pending_presearches(self) -> int:
        """Presearch now the canonical queries for every ``k`` whose presearch waited for the complete list of
        canonical vectors (an env's first reset on a cold cache, as in ``edo prepare``), if that list is complete:
        results read from the run-time disk cache or searched and stored there, so that a later process's first reset
        reads them all in bulk instead of querying the index (about 0.7 s for EDO-v0's four shards on 2 cores).
        Exact: what the first reset's presearch would have done. :meth:`complete_all` calls it.

        :returns: the number of (canonical query, shard) searches run (those read from disk not counted).
        """
        searched = 0
        for retriever in {id(r): r for r in self.retrievers}.values():
            for k in sorted(retriever.presearch_pending):
                before = retriever.presearches
                retriever.prepare(k)
                searched += retriever.presearches - before
        return searched

    def add_tasks(self, tasks: Sequence[Task]) -> None:
        """Register a task pool of this world (``TaskPool.tasks``; each env does at construction): the reachable
        queries (:meth:`reachable_query_texts`) then include its analytics tasks' compute queries.

        A pool equal to one registered already is not added again: each unpickled env (``pickle``, ``copy.deepcopy``)
        brings its own copy of the pools its service held, and the service pickles every pool it holds, so copies
        registered again would double the pools at each round trip in one process (and the time and size of the next
        pickle with them)."""
        if id(tasks) in self._task_lists:
            return
        content = tuple(tasks)  # frozen dataclasses: hashed in about 1 ms for 1,500 tasks
        if content in self._task_contents:
            return
        self._task_contents.add(content)
        self._task_lists[id(tasks)] = tasks

    def reachable_query_texts(self) -> list[str]:
        """:func:`edo_gym.world.queries.reachable_queries` of this world and the task pools registered with
        :meth:`add_tasks`: what :meth:`embed_reachable_queries` and :meth:`search_reachable_queries` work on."""
        tasks = [task for tasks in self._task_lists.values() for task in tasks]
        return world_queries.reachable_queries(self.world, tasks)

    def embed_reachable_queries(self, progress: bool = True) -> int:
        """Embed now, in batches, the non-canonical queries this world's episodes can produce
        (:meth:`reachable_query_texts`) that the run-time disk cache lacks, and store them there.

        Exact: each vector is the one the model gives the text embedded alone (equal-length batches need no padding;
        tested bit for bit), i.e. what :meth:`QueryEncoder.encode` would compute at step time; a later process reads
        it instead of running the model (about 11 ms a query on 2 CPU cores, versus about 2 ms a text here). Search
        is unchanged: every query is still searched in its worker's shard. A no-op without a run-time cache, once that
        cache is full, and with the static encoder (which embeds a query in microseconds and keeps no vectors there).

        :param progress: show a progress bar (on stderr, after a few seconds).
        :returns: the number of texts embedded.
        """
        runtime = self.vector_runtime
        if runtime is None or not runtime.writable():
            return 0
        texts = runtime.missing(self.reachable_query_texts())
        if not texts:
            return 0
        desc = f"EDO-Gym: embedding {len(texts):,} reachable queries ahead of use, cached for later runs"
        vectors = self.embedders[0].encode_many([texts], singles=True, progress=desc if progress else None)[0]
        runtime.put_vectors(texts, vectors)
        return len(texts)

    def search_reachable_queries(self, top_k: Sequence[int], progress: bool = True) -> int:
        """Search now, in batched index queries, every reachable query (see :meth:`embed_reachable_queries`, whose
        vectors this reads) in each worker's shard for that worker's ``k``, and store the results in the run-time disk
        cache (``RetrievalConfig.search_cache``), skipping those it holds already.

        Exact: each result is what :meth:`ShardRetriever.search` finds for the query at step time (a batched index
        query returns each query's own candidates, re-ranked exactly; tested); a later process reads it instead of
        querying the index (1-2 ms a query). A no-op without a run-time cache or with ``search_cache`` off.

        :param top_k: each worker's ``k`` (``WorkerSpec.top_k``), in the order of the shards this service was built for.
        :param progress: show a progress bar (on stderr, after a few seconds).
        :returns: the number of (query, shard, k) searches run.
        """
        if len(top_k) != len(self.retrievers):
            raise ValueError(f"top_k needs one k per worker ({len(self.retrievers)}), got {len(top_k)}")
        runtime = self.runtime
        if runtime is None or not self.config.search_cache or not runtime.writable():
            return 0
        jobs: dict[tuple[int, int], tuple[ShardRetriever, int]] = {}
        for retriever, k in zip(self.retrievers, top_k, strict=True):
            if retriever.disk is not None and retriever.size:
                jobs.setdefault((id(retriever), int(k)), (retriever, int(k)))
        if not jobs:
            return 0
        texts = self.reachable_query_texts()
        done = 0
        for n, (retriever, k) in enumerate(jobs.values(), 1):
            desc = f"EDO-Gym: searching reachable queries ahead of use, shard {n}/{len(jobs)} (k={k})"
            done += retriever.search_many(texts, k, progress=desc if progress else None)
        return done

    def _complete_lists(self) -> None:
        missing = [lazy for lazy in self._lazy.values() if not lazy.complete]
        if not missing:
            return
        n = sum(len(lazy) for lazy in missing)
        desc = f"EDO-Gym: embedding {n:,} texts ({', '.join(lazy.kind for lazy in missing)}), cached for later runs"
        # one threaded pass over every missing batch of every list
        jobs = [(lazy, b) for lazy in missing for b in lazy.missing_batches()]
        built = self.embedders[0].encode_many([lazy.batch_texts(b) for lazy, b in jobs], progress=desc)
        for (lazy, b), vectors in zip(jobs, built, strict=True):
            lazy.set_batch(b, vectors, persist=False)
        for lazy in missing:
            lazy._check_complete()

    def cache_sizes(self) -> dict[str, int]:
        """Entries held by the memoisation caches (for the long-run memory benchmark)."""
        return {
            "query_embeddings": sum(len(e.memo) for e in self.encoders),
            "search_results": sum(len(r.memo) for r in {id(r): r for r in self.retrievers}.values()),
            "token_counts": len(self.token_memo),
        }

    def flush(self) -> None:
        """Commit what the run-time disk cache holds in memory (also done at exit)."""
        if self.runtime is not None:
            self.runtime.flush()


def make_embedder(config: RetrievalConfig, cache_root: Path) -> Embedder | StaticEmbedder:
    """The embedder ``config.encoder`` names: the sentence-transformers model, or a static model distilled from it."""
    if config.encoder == "static":
        return StaticEmbedder(config.model, cache_root)
    return Embedder(config.model)


def _texts_key(kind: str, texts: list[str]) -> str:
    return f"{kind}:{hashlib.sha256(chr(0).join(texts).encode()).hexdigest()}"


def _lazy_of(service: RetrievalService, kind: str, texts: list[str]) -> LazyVectors:
    return service.lazy_texts(kind, texts)


def _retriever_of(service: RetrievalService, worker: int) -> ShardRetriever:
    return service.retrievers[worker]

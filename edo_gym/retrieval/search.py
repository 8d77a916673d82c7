"""Top-k search over a worker's knowledge shard: :class:`ShardRetriever`, and :class:`IdentifierRetriever` for codes.

A retriever searches its shard's index (a chromadb collection or an :class:`~edo_gym.retrieval.backends.ExactCollection`)
for ``k`` plus :data:`RERANK_MARGIN` candidates and re-ranks them exactly by cosine similarity, ties broken by corpus
index, so a result does not depend on the index graph: the same top k in every process. Results are memoised per
``(query, k)`` in a bounded :class:`~edo_gym.retrieval.caches.LRUCache`, so every *first* search is a real index query
and repeats are dictionary look-ups. With presearch (``RetrievalConfig.presearch``), a retriever searches all canonical
queries for a given ``k`` at once, in batched index queries, and memoises the results (the same results as one query at
a time; a fresh process then skips ~3,000 single searches): at an env's first ``reset()`` for each worker's ``top_k``
(``RetrievalConfig.index_at_reset``; :meth:`ShardRetriever.prepare`), else at the retriever's first search with ``k``.

Search results on disk (``RetrievalConfig.search_cache``, on with the run-time cache): a result missing from the
memo is looked up in the run-time SQLite cache (:mod:`edo_gym.retrieval.runtime_cache`) under a digest of the query
vector and a fingerprint of the shard (its document indices and vectors, and the re-ranking margin) before the index
is queried; a result the index gives is stored there. A search is a pure function of those, so this is exact, like
the memo, and each stored result was found by a real index query in some process.

Identifiers (``RetrievalConfig.identifier_match``, off by default): sentence embeddings do not tell codes such as
``TRK-KAFEN-514`` apart, so a query naming one finds other shipments' documents. With the option on, a shard keeps a
keyword index of the identifiers its documents contain (:class:`IdentifierRetriever`), and a query naming an
identifier gets the shard's documents that contain it first, then the embedding search's results (a hybrid retriever's
keyword side).
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from edo_gym.retrieval.caches import LRUCache, QueryEncoder
from edo_gym.retrieval.embedder import PROGRESS_DELAY_S
from edo_gym.retrieval.runtime_cache import RuntimeCache

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


#: Extra candidates fetched from the index and re-ranked exactly, so the top k do not depend on the index graph.
RERANK_MARGIN = 8
#: Query vectors per batched index query when presearching canonical queries.
PRESEARCH_BATCH = 256


class RetrieverOwner(Protocol):
    """What holds a process's retrievers (the retrieval service): an unpickled retriever is looked up in it."""

    retrievers: Sequence[ShardRetriever]


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
        *,
        vectors: np.ndarray | None = None,
        indices: Iterable[int] = (),
        disk: RuntimeCache | None = None,
        presearch: bool = False,
        origin: tuple[RetrieverOwner, int] | None = None,
    ) -> None:
        """:param collection: the shard's index (``query`` and ``count`` as chromadb's collections have them), or
            ``None`` when ``factory`` builds it, or for an empty shard.
        :param encoder: turns a query text into its vector.
        :param domains: the shard's domains.
        :param cache_size: bound of the ``(query, k)`` -> result memo (entries).
        :param factory: builds the collection at the first search (``collection`` is then ``None`` and ``size``
            gives the number of documents it will hold).
        :param vectors: corpus vectors (rows by corpus index) for the exact re-ranking of the index's candidates;
            ``None`` takes the index's order.
        :param indices: corpus indices of the shard's documents (results read from ``disk`` are checked against them).
        :param disk: run-time disk cache that keeps search results across processes (``None``: off); needs
            ``vectors`` and ``indices``, which key the results (see :attr:`fingerprint`).
        :param presearch: search every canonical query for a ``k`` in batches at the first need of that ``k``
            (``RetrievalConfig.presearch``).
        :param origin: ``(owner, worker index)`` when an owner (the retrieval service) holds this retriever at that
            index: a pickled retriever is that owner's retriever in the target process (``None``: cannot be pickled).
        """
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
        #: Corpus vectors for exact re-ranking of the index's candidates (``None``: take the index's order).
        self.vectors = vectors
        #: Corpus indices of this shard's documents (checks results read from ``disk``).
        self.indices: frozenset[int] = frozenset(indices)
        if disk is not None and (vectors is None or not self.indices):
            raise ValueError("a ShardRetriever keeps results on disk only with its vectors and indices (they key them)")
        #: Run-time disk cache that keeps search results across processes (``None``: off).
        self.disk = disk
        #: Canonical queries searched ahead of use in batches (see ``RetrievalConfig.presearch``); ``None``: off.
        self.presearched: set[int] | None = set() if presearch else None
        self.origin = origin
        self.memo = LRUCache(cache_size)
        #: Index queries: made by :meth:`search` (timed in ``search_s``) and by :meth:`search_many` (not timed).
        self.searches = 0
        self.search_s = 0.0
        #: ``k`` values whose presearch waited for the complete list of canonical vectors (a cold cache): done by
        #: :meth:`~edo_gym.retrieval.service.RetrievalService.run_pending_presearches` once the list is built (see
        #: :meth:`_presearch`).
        self.presearch_pending: set[int] = set()
        self.presearches = 0
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


def _retriever_of(owner: RetrieverOwner, worker: int) -> ShardRetriever:
    return owner.retrievers[worker]

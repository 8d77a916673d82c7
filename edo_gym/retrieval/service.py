"""Per-process mini-RAG service: the embedder, the embedding caches, the shard retrievers, token counting.

:class:`RetrievalService` owns, per process, the embedder, the chromadb client and one retriever
(:mod:`edo_gym.retrieval.search`) per distinct worker shard (``mode="shared"``, the default), or one embedder instance
and one retriever per worker (``mode="per_worker"``, to measure what sharing saves). Corpus, canonical-query and task
embeddings come from the on-disk :class:`~edo_gym.retrieval.cache.EmbeddingCache`, so a warm process never re-embeds
the corpus; query embeddings, search results and token counts are memoised in bounded caches
(:mod:`edo_gym.retrieval.caches`) and, across processes, in the run-time disk cache
(:mod:`edo_gym.retrieval.runtime_cache`). :meth:`RetrievalService.get` gives every env of a process the same service
for the same world, :class:`~edo_gym.config.RetrievalConfig` and shards.

Shard indexes (:mod:`edo_gym.retrieval.backends`): a persistent ``chroma_dir`` is built (or checked) at construction;
in-memory collections at the first reset or search, so that a process that only builds envs never starts chromadb
(fork safety). :meth:`RetrievalService.complete_all`, :meth:`~RetrievalService.embed_reachable_queries` and
:meth:`~RetrievalService.search_reachable_queries` (``edo prepare``) do ahead of use what steps would do on first need.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import threading
import uuid
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edo_gym.config import RetrievalConfig
from edo_gym.retrieval.backends import ExactCollection, build_collection, build_lock, chroma_client, chroma_usable, warn_forked
from edo_gym.retrieval.cache import EmbeddingCache
from edo_gym.retrieval.caches import LazyVectors, LRUCache, QueryEncoder
from edo_gym.retrieval.embedder import Embedder, space_decomposable
from edo_gym.retrieval.runtime_cache import RuntimeCache
from edo_gym.retrieval.search import IdentifierRetriever, ShardRetriever, identifier_index
from edo_gym.retrieval.static import StaticEmbedder
from edo_gym.world import queries as world_queries
from edo_gym.world.generator import World
from edo_gym.world.tasks import Task

#: Bound of the piece -> token count memo (cleared when exceeded).
PIECE_MEMO_MAX = 1_000_000


class RetrievalService:
    """Embedder, caches and chromadb collections for one world, shared by every env of a process (shared mode)."""

    _registry: dict[Hashable, RetrievalService] = {}
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
        #: ``"chromadb"``, or ``"exact"`` in a process forked after chromadb started (see
        #: :mod:`~edo_gym.retrieval.backends`).
        self.search_backend = "chromadb" if chroma_usable() else "exact"
        if self.search_backend == "exact":
            warn_forked(stacklevel=3)
        # a persistent directory is built (or checked) now; in-memory collections at the first reset or search
        persistent = config.chroma_dir is not None
        self.client = chroma_client(config.chroma_dir) if self.search_backend == "chromadb" and persistent else None
        self._client_lock = threading.Lock()
        lock = build_lock(config.chroma_dir) if self.client is not None else contextlib.nullcontext()
        with lock:  # processes sharing a chroma_dir build (or check) one at a time
            #: One retriever per worker, in the order of ``shards`` (workers with the same shard share one in shared mode).
            self.retrievers: list[ShardRetriever] = self._build_retrievers()
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

    def _build_retrievers(self) -> list[ShardRetriever]:
        """One complete retriever per shard of ``self.shards`` (shared between equal shards in shared mode)."""
        world, config = self.world, self.config
        model_key = hashlib.sha256(self.model_id.encode()).hexdigest()[:8]
        by_domain = world.documents_by_domain()
        # presearch and the disk cache of results are exact speed-ups of the search the ablation replaces: off with it
        searched = config.ablation == "none"
        retrievers: list[ShardRetriever] = []
        built: dict[tuple[str, ...], ShardRetriever] = {}
        for w, shard in enumerate(self.shards):
            key = tuple(sorted(shard))
            if config.mode == "shared" and key in built:
                retrievers.append(built[key])
                continue
            indices = sorted(i for dom in key for i in by_domain[dom])
            shard_key = hashlib.sha256(",".join(key).encode()).hexdigest()[:8]
            name = f"edo-{world.corpus_hash}-{model_key}-{shard_key}"
            if config.mode == "per_worker":
                name += f"-w{w}-{uuid.uuid4().hex[:8]}" if config.chroma_dir is None else f"-w{w}"
            elif config.chroma_dir is None:
                name += f"-{uuid.uuid4().hex[:8]}"  # in-memory clients of one process share a backend
            collection: Any = None
            factory = None
            if not indices:
                pass  # an empty shard: every search returns nothing
            elif config.chroma_dir is None:
                # In memory, chromadb starts at the first reset or search: a process that only builds envs (e.g. the
                # parent of gymnasium's fork-based AsyncVectorEnv) never starts it, so the children it forks can use it.
                factory = functools.partial(self._make_collection, name, indices)
            elif self.client is not None:
                collection = build_collection(self.client, name, self.doc_vectors, indices, persistent=True)
            else:
                collection = ExactCollection(self.doc_vectors, indices)
            args = (collection, self.encoders[w if config.mode == "per_worker" else 0], key, config.result_cache_size)
            options: dict[str, Any] = {
                "factory": factory,
                "size": len(indices) if factory is not None else None,
                "vectors": self.doc_vectors,
                "indices": indices,
                "disk": self.runtime if config.search_cache and searched and indices else None,
                "presearch": config.presearch and searched,
                "origin": (self, w),
            }
            if config.identifier_match:
                texts = {i: world.documents[i].text for i in indices}
                retriever: ShardRetriever = IdentifierRetriever(*args, identifiers=identifier_index(texts), **options)
            else:
                retriever = ShardRetriever(*args, **options)
            built[key] = retriever
            retrievers.append(retriever)
        return retrievers

    def _make_collection(self, name: str, indices: Sequence[int]) -> Any:
        """Build an in-memory shard collection: chromadb, or exact numpy search where chromadb cannot run."""
        if not chroma_usable():
            if self.search_backend != "exact":
                self.search_backend = "exact"
                warn_forked(stacklevel=4)
            return ExactCollection(self.doc_vectors, indices)
        with self._client_lock:
            if self.client is None:
                self.client = chroma_client(None)
            return build_collection(self.client, name, self.doc_vectors, indices, persistent=False)

    def __reduce__(self) -> Any:
        # Embedder, chromadb client and caches are per process: a pickled service is the target process's own
        # service for the same world, config and shards (built there if needed), as ``get`` gives it, with the task
        # pools registered here registered there too (an env pickled with its service shares its pool's list)
        return (_restore_service, (self.world, self.config, self.shards, list(self._task_lists.values())))

    @staticmethod
    def registry_key(world: World, config: RetrievalConfig, shards: Sequence[tuple[str, ...]]) -> Hashable:
        """What :meth:`get` shares a service by: the world's corpus, the whole config (every field, so that no setting
        can be left out) and the shards (each a set of domains)."""
        return (world.corpus_hash, config, tuple(tuple(sorted(s)) for s in shards))

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
        key = cls.registry_key(world, config, shards)
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
        lazy = LazyVectors(
            kind, texts, vectors, self.embedders[0], self.cache, self.model_id, self.vector_runtime, origin=(self, kind)
        )
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


def _restore_service(
    world: World, config: RetrievalConfig, shards: Sequence[tuple[str, ...]], task_lists: Sequence[Sequence[Task]]
) -> RetrievalService:
    """Unpickle a :class:`RetrievalService`: this process's own service for ``world``, ``config`` and ``shards``
    (:meth:`RetrievalService.get`), with the pickled service's task pools registered (:meth:`~RetrievalService.add_tasks`)."""
    service = RetrievalService.get(world, config, shards)
    for tasks in task_lists:
        service.add_tasks(tasks)
    return service

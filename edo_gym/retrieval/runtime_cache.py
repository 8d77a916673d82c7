"""Exact on-disk cache of what retrieval computes at run time: query vectors, token counts, lazily built batches,
search results.

Every env process meets query strings and texts no earlier step used (queries built from upstream answers, replies
whose tokens are counted). Their vector or count is a pure function of the model and the text, so a
:class:`RuntimeCache` keeps them on disk, in one SQLite database per model and format
(``runtime-v<format>-<model key>.sqlite3`` in the embedding cache directory): the next process finds them there
instead of running the model again. Each entry is the value the model computed in some process for exactly this
text (no approximation, no other text's value): a query is still embedded by the configured model the first time
any process meets it. Search results (``RetrievalConfig.search_cache``) are kept the same way, keyed by the shard's
fingerprint, ``k`` and a digest of the query vector (see :mod:`edo_gym.retrieval.search`): each was found by a real
index query the first time any process searched that vector in that shard.

Safety: SQLite's write-ahead log with ``INSERT OR IGNORE`` transactions, so several processes may read and write at
once, and a process killed mid-write leaves the database as it was before that transaction. Each vector is stored
with its CRC-32 and checked when read: a row that does not match (or has the wrong size, or non-finite values) is
ignored and recomputed. The database records the model id and vector size it was written for; a database written
for something else, or one SQLite cannot open, is not used (a :class:`~edo_gym.retrieval.cache.CacheWarning`,
then values are computed as without the cache). Writes are buffered and committed every
:data:`FLUSH_EVERY` entries or :data:`FLUSH_INTERVAL_S` seconds, and at exit. A forked child opens its own
connection (SQLite connections must not cross ``fork``).

Size: the database grows with the distinct texts met (measured: 2,317 vectors and 62,213 token counts, 43 MB, after
about 1.4 million steps of training and benchmark runs). Once its files reach ``$EDO_GYM_RUNTIME_CACHE_MAX_MB``
megabytes (default :data:`DEFAULT_MAX_MB`) nothing more is written; what it holds is still read.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import sqlite3
import threading
import time
import warnings
import weakref
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from edo_gym._sqlite import retry_locked, set_wal
from edo_gym.retrieval.cache import CacheWarning

#: Part of the file name: a database of an earlier format is left unread (format 1's vectors embedded ahead were
#: computed in batches, which on some CPUs differs in the last bits from a text embedded alone).
FORMAT_VERSION = 2
#: Buffered entries that trigger a commit.
FLUSH_EVERY = 256
#: Seconds after which buffered entries are committed at the next write.
FLUSH_INTERVAL_S = 2.0
#: Buffered entries kept at most while the database is busy (older ones are dropped: it is a cache).
MAX_PENDING = 100_000
MAX_MB_ENV_VAR = "EDO_GYM_RUNTIME_CACHE_MAX_MB"
#: Size (MB, database and its write-ahead log) past which nothing more is written.
DEFAULT_MAX_MB = 1024.0
#: Seconds a connection waits for another process's lock (when opening, and for each statement) before giving up.
_BUSY_TIMEOUT_S = 10.0


def _storable(text: str) -> bool:
    """Whether SQLite can store ``text`` (as UTF-8): not one with a lone surrogate, which decoded JSON may hold. Such
    a text is never written, and reading it is a miss: its value is computed each time, as without the cache."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def max_bytes() -> int:
    """``$EDO_GYM_RUNTIME_CACHE_MAX_MB`` (else :data:`DEFAULT_MAX_MB`) in bytes.

    :raises ValueError: when the variable is not a non-negative number.
    """
    value = os.environ.get(MAX_MB_ENV_VAR, "").strip()
    if not value:
        return int(DEFAULT_MAX_MB * 2**20)
    try:
        mb = float(value)
    except ValueError:
        mb = -1.0
    if not mb >= 0 or mb == float("inf"):
        raise ValueError(f"{MAX_MB_ENV_VAR} must be a non-negative number of megabytes, got {value!r}")
    return int(mb * 2**20)


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS vectors (text TEXT PRIMARY KEY, vec BLOB NOT NULL, crc INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS tokens (text TEXT PRIMARY KEY, n INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS batches (list TEXT NOT NULL, batch INTEGER NOT NULL, vecs BLOB NOT NULL, "
    "crc INTEGER NOT NULL, PRIMARY KEY (list, batch))",
    "CREATE TABLE IF NOT EXISTS searches (shard TEXT NOT NULL, k INTEGER NOT NULL, query BLOB NOT NULL, "
    "ids BLOB NOT NULL, crc INTEGER NOT NULL, PRIMARY KEY (shard, k, query))",
)


def _decode_ids(blob: bytes) -> tuple[int, ...]:
    """Corpus indices stored as little-endian int32 (a search result row)."""
    return tuple(np.frombuffer(blob, dtype="<i4").tolist())


# connections inherited through fork are kept referenced, never used or closed, in the child
_INHERITED: list[sqlite3.Connection] = []


class RuntimeCache:
    """See module docstring. ``None`` from a getter means "not cached": compute it and ``put`` it."""

    def __init__(self, directory: str | Path, model_id: str, dim: int) -> None:
        if not isinstance(dim, int) or dim < 1:
            raise ValueError(f"RuntimeCache dim must be a positive int, got {dim!r}")
        self.directory = Path(directory).expanduser()
        self.model_id = model_id
        self.dim = dim
        self.path = self.directory / f"runtime-v{FORMAT_VERSION}-{hashlib.sha256(model_id.encode()).hexdigest()[:12]}.sqlite3"
        self.max_bytes = max_bytes()
        #: The size limit was reached: entries are read, no longer written.
        self.full = False
        self._conn: sqlite3.Connection | None = None
        self._pid: int | None = None
        self._lock = threading.RLock()
        self.disabled = False
        self._pending_vectors: dict[str, bytes] = {}
        self._pending_tokens: dict[str, int] = {}
        self._pending_searches: dict[tuple[str, int, bytes], bytes] = {}
        self._last_flush = time.monotonic()
        #: Rows read and ignored because they failed their check (size, CRC, finite values).
        self.rejected = 0
        self.vector_hits = 0
        self.token_hits = 0
        self.search_hits = 0
        ref = weakref.ref(self)
        atexit.register(lambda: (lambda c: c is not None and c.flush())(ref()))

    def __reduce__(self) -> tuple:
        # a connection cannot cross processes: a pickled cache opens its own (what it buffered is committed first)
        self.flush()
        return (RuntimeCache, (self.directory, self.model_id, self.dim))

    # -- connection ---------------------------------------------------------------------------------------------
    def _disable(self, why: str) -> None:
        self.disabled = True
        self._clear_pending()
        warnings.warn(f"run-time embedding cache {self.path} not used ({why}); values are computed as needed", CacheWarning, 4)

    def _connection(self) -> sqlite3.Connection | None:
        if self.disabled:
            return None
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        if self._conn is not None:  # inherited through fork: never touch it here
            _INHERITED.append(self._conn)
            self._conn = None
            self._clear_pending()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.path), timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
            try:
                set_wal(conn, _BUSY_TIMEOUT_S)  # retried: the envs of a vector env may open a new file at once
                conn.execute("PRAGMA synchronous=NORMAL")
                meta = retry_locked(lambda: self._create_schema(conn), _BUSY_TIMEOUT_S)
            except BaseException:
                conn.close()
                raise
        except (sqlite3.Error, OSError) as exc:
            self._disable(f"{type(exc).__name__}: {exc}")
            return None
        if meta and meta != self._meta():
            conn.close()
            self._disable(f"written for {meta}, expected {self._meta()}")
            return None
        self._conn, self._pid = conn, os.getpid()
        return conn

    def _create_schema(self, conn: sqlite3.Connection) -> dict[str, str]:
        """Create the tables (in one transaction, so that it can be retried) and return the ``meta`` rows, writing
        this cache's when the file has none."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA:
                conn.execute(statement)
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            if not meta:
                conn.executemany("INSERT INTO meta VALUES (?, ?)", list(self._meta().items()))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return meta

    def _meta(self) -> dict[str, str]:
        return {"format": str(FORMAT_VERSION), "model_id": self.model_id, "dim": str(self.dim)}

    def _select(self, sql: str, args: tuple) -> tuple | None:
        with self._lock:
            conn = self._connection()
            if conn is None:
                return None
            try:
                return conn.execute(sql, args).fetchone()
            except (sqlite3.Error, UnicodeEncodeError):  # busy beyond the timeout, damaged, or a text never stored: a miss
                return None

    # -- vectors and token counts -------------------------------------------------------------------------------
    def get_vector(self, text: str) -> np.ndarray | None:
        """The stored vector of ``text`` embedded alone, or ``None``."""
        blob = self._pending_vectors.get(text)
        if blob is None:
            row = self._select("SELECT vec, crc FROM vectors WHERE text = ?", (text,))
            if row is None:
                return None
            blob, crc = row
            if not self._valid(blob, crc, 1):
                return None
        self.vector_hits += 1
        return np.frombuffer(blob, dtype=np.float32).copy()

    def put_vector(self, text: str, vector: np.ndarray) -> None:
        vector = np.ascontiguousarray(vector, dtype=np.float32)
        if vector.shape != (self.dim,):
            raise ValueError(f"vector of shape {vector.shape} for a cache of dimension {self.dim}")
        if self.disabled or self.full or not _storable(text):
            return
        self._pending_vectors[text] = vector.tobytes()
        self._maybe_flush()

    def missing(self, texts: Sequence[str]) -> list[str]:
        """Those of ``texts`` (in order, each once) with no stored vector; all of them when the cache is not usable.
        A stored row is not checked here: a damaged one is still rejected (and recomputed) when read."""
        unique = list(dict.fromkeys(texts))
        rows = self._select_in("SELECT text FROM vectors WHERE", (), "text", unique)
        if rows is None:  # unusable, busy beyond the timeout, or damaged: nothing known
            return unique
        have = {row[0] for row in rows} | {t for t in unique if t in self._pending_vectors}
        return [t for t in unique if t not in have]

    def writable(self) -> bool:
        """Whether entries put now would be written (the database opens and is below its size limit)."""
        with self._lock:
            return self._connection() is not None and not self._reached_limit()

    def put_vectors(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """:meth:`put_vector` for each text and row of ``vectors`` (each the text's vector embedded alone), committed
        now."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.shape != (len(texts), self.dim):
            raise ValueError(f"{len(texts)} texts need vectors of shape ({len(texts)}, {self.dim}), got {vectors.shape}")
        if self.disabled or self.full:
            return
        for text, vector in zip(texts, vectors, strict=True):
            if _storable(text):
                self._pending_vectors[text] = vector.tobytes()
        self.flush()

    def get_tokens(self, text: str) -> int | None:
        n = self._pending_tokens.get(text)
        if n is None:
            row = self._select("SELECT n FROM tokens WHERE text = ?", (text,))
            if row is None:
                return None
            n = row[0]
            if type(n) is not int or n < 0:
                self.rejected += 1
                return None
        self.token_hits += 1
        return n

    def put_tokens(self, text: str, n: int) -> None:
        if self.disabled or self.full or not _storable(text):
            return
        self._pending_tokens[text] = int(n)
        self._maybe_flush()

    def put_tokens_many(self, counts: dict[str, int]) -> None:
        """:meth:`put_tokens` for each ``text: n`` of ``counts`` (buffered, like it)."""
        if self.disabled or self.full or not counts:
            return
        self._pending_tokens.update((text, int(n)) for text, n in counts.items() if _storable(text))
        self._maybe_flush()

    def space_free_tokens(self) -> dict[str, int]:
        """Every stored token count whose text has no space (the pieces that
        :meth:`~edo_gym.retrieval.service.RetrievalService.count_tokens` sums), buffered ones included; ``{}`` when the
        cache is not usable or the read fails. A row that fails its check (not a non-negative int) is left out and
        counted in ``rejected``."""
        with self._lock:
            conn = self._connection()
            if conn is None:
                return {}
            try:
                rows = conn.execute("SELECT text, n FROM tokens WHERE instr(text, ' ') = 0").fetchall()
            except sqlite3.Error:
                return {}
            pending = [(text, n) for text, n in self._pending_tokens.items() if " " not in text]
        out: dict[str, int] = {}
        for text, n in rows:
            if type(text) is str and type(n) is int and n >= 0:
                out[text] = n
            else:
                self.rejected += 1
        out.update(pending)
        return out

    # -- search results (see store.ShardRetriever) ---------------------------------------------------------------
    def get_search(self, shard: str, k: int, query: bytes) -> tuple[int, ...] | None:
        """The stored result (corpus indices, best first) of searching shard ``shard`` (a fingerprint of its contents)
        for the top ``k`` with the query vector whose digest is ``query``, or ``None``. The caller checks the ids
        belong to the shard."""
        blob = self._pending_searches.get((shard, k, query))
        if blob is None:
            row = self._select("SELECT ids, crc FROM searches WHERE shard = ? AND k = ? AND query = ?", (shard, k, query))
            if row is None:
                return None
            ids = self._ids(*row)
        else:
            ids = _decode_ids(blob)
        if ids is not None:
            self.search_hits += 1
        return ids

    def get_searches(self, shard: str, k: int, queries: Sequence[bytes]) -> dict[bytes, tuple[int, ...]]:
        """:meth:`get_search` for many query digests at once (bulk reads): ``{digest: ids}`` of those stored."""
        unique = list(dict.fromkeys(queries))
        rows = self._select_in(
            "SELECT query, ids, crc FROM searches WHERE shard = ? AND k = ? AND", (shard, k), "query", unique
        )
        out: dict[bytes, tuple[int, ...]] = {}
        for query, blob, crc in rows or ():
            ids = self._ids(blob, crc)
            if ids is not None:
                out[query] = ids
        for query in unique:
            blob = self._pending_searches.get((shard, k, query))
            if blob is not None:
                out[query] = _decode_ids(blob)
        self.search_hits += len(out)
        return out

    def put_search(self, shard: str, k: int, query: bytes, ids: Sequence[int]) -> None:
        """Buffer a search result (committed with the next flush)."""
        if self.disabled or self.full:
            return
        self._pending_searches[(shard, k, query)] = np.asarray(ids, dtype="<i4").tobytes()
        self._maybe_flush()

    def missing_searches(self, shard: str, k: int, queries: Sequence[bytes]) -> list[bytes]:
        """Those of the query digests ``queries`` (in order, each once) with no stored result for ``(shard, k)``;
        all of them when the cache is not usable."""
        unique = list(dict.fromkeys(queries))
        rows = self._select_in("SELECT query FROM searches WHERE shard = ? AND k = ? AND", (shard, k), "query", unique)
        if rows is None:
            return unique
        have = {row[0] for row in rows} | {q for q in unique if (shard, k, q) in self._pending_searches}
        return [q for q in unique if q not in have]

    def put_searches(self, shard: str, k: int, results: Sequence[tuple[bytes, Sequence[int]]]) -> None:
        """:meth:`put_search` for each ``(query digest, ids)``, committed now."""
        if self.disabled or self.full:
            return
        for query, ids in results:
            self._pending_searches[(shard, k, query)] = np.asarray(ids, dtype="<i4").tobytes()
        self.flush()

    # -- batches of a fixed list (see store.LazyVectors) ---------------------------------------------------------
    def get_batch(self, list_key: str, batch: int, rows: int) -> np.ndarray | None:
        row = self._select("SELECT vecs, crc FROM batches WHERE list = ? AND batch = ?", (list_key, batch))
        if row is None or not self._valid(row[0], row[1], rows):
            return None
        return np.frombuffer(row[0], dtype=np.float32).reshape(rows, self.dim).copy()

    def put_batch(self, list_key: str, batch: int, vectors: np.ndarray) -> None:
        """Stored at once (a batch costs a forward pass of up to 64 texts; worth a commit)."""
        blob = np.ascontiguousarray(vectors, dtype=np.float32).tobytes()
        with self._lock:
            conn = self._connection()
            if conn is None or self._reached_limit():
                return
            with contextlib.suppress(sqlite3.Error):
                conn.execute("INSERT OR IGNORE INTO batches VALUES (?, ?, ?, ?)", (list_key, batch, blob, zlib.crc32(blob)))

    # -- internals ----------------------------------------------------------------------------------------------
    def _select_in(self, head: str, args: tuple, column: str, keys: Sequence[object]) -> list[tuple] | None:
        """Rows of ``{head} {column} IN (keys...)`` (``head`` ends with ``WHERE`` or ``AND``; ``args`` fill its ``?``),
        in chunks of 500 keys; ``None`` when the cache is not usable or a read fails (busy beyond the timeout, or
        damaged)."""
        with self._lock:
            conn = self._connection()
            if conn is None:
                return None
            rows: list[tuple] = []
            keys = [key for key in keys if not isinstance(key, str) or _storable(key)]  # the others are never stored
            try:
                for start in range(0, len(keys), 500):
                    part = list(keys[start : start + 500])
                    sql = f"{head} {column} IN ({', '.join('?' * len(part))})"
                    rows.extend(conn.execute(sql, [*args, *part]).fetchall())
            except sqlite3.Error:
                return None
        return rows

    def _ids(self, blob: object, crc: object) -> tuple[int, ...] | None:
        """A stored search result's corpus indices, or ``None`` (counted in ``rejected``) if the row fails its check."""
        if not isinstance(blob, bytes) or len(blob) % 4 or crc != zlib.crc32(blob):
            self.rejected += 1
            return None
        return _decode_ids(blob)

    def _valid(self, blob: object, crc: object, rows: int) -> bool:
        ok = (
            isinstance(blob, bytes)
            and len(blob) == 4 * self.dim * rows
            and crc == zlib.crc32(blob)
            and bool(np.isfinite(np.frombuffer(blob, dtype=np.float32)).all())
        )
        if not ok:
            self.rejected += 1
        return ok

    def _reached_limit(self) -> bool:
        if not self.full:
            size = 0
            for path in (self.path, self.path.with_name(self.path.name + "-wal")):
                with contextlib.suppress(OSError):
                    size += path.stat().st_size
            self.full = size >= self.max_bytes
        return self.full

    def _clear_pending(self) -> None:
        self._pending_vectors.clear()
        self._pending_tokens.clear()
        self._pending_searches.clear()

    def _n_pending(self) -> int:
        return len(self._pending_vectors) + len(self._pending_tokens) + len(self._pending_searches)

    def _maybe_flush(self) -> None:
        pending = self._n_pending()
        if pending >= FLUSH_EVERY or time.monotonic() - self._last_flush >= FLUSH_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        """Commit the buffered entries (kept for a later try if the database is busy)."""
        with self._lock:
            self._last_flush = time.monotonic()
            if not self._n_pending():
                return
            conn = self._connection()
            if conn is None:
                return
            if self._reached_limit():
                self._clear_pending()
                return
            vectors = [(t, b, zlib.crc32(b)) for t, b in self._pending_vectors.items()]
            tokens = list(self._pending_tokens.items())
            searches = [(s, k, q, b, zlib.crc32(b)) for (s, k, q), b in self._pending_searches.items()]
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.executemany("INSERT OR IGNORE INTO vectors VALUES (?, ?, ?)", vectors)
                    conn.executemany("INSERT OR IGNORE INTO tokens VALUES (?, ?)", tokens)
                    conn.executemany("INSERT OR IGNORE INTO searches VALUES (?, ?, ?, ?, ?)", searches)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error:
                if self._n_pending() > MAX_PENDING:
                    self._clear_pending()
                return
            self._clear_pending()

    def sizes(self) -> dict[str, int]:
        """Rows in the database (after committing what is buffered)."""
        self.flush()
        out = {}
        for table in ("vectors", "tokens", "batches", "searches"):
            row = self._select(f"SELECT COUNT(*) FROM {table}", ())
            out[table] = int(row[0]) if row else 0
        return out

"""Record/replay: a content-addressed cache of LLM answers on disk, so that real-model episodes replay offline.

:class:`ResponseCache` is one SQLite file (stdlib ``sqlite3``) that several processes may share: WAL journal, a
busy timeout, and ``INSERT OR IGNORE``, so the first answer stored for a key is the one every process gets.
:class:`CachedBackend` wraps any :class:`~edo_gym.agents.protocol.LLMBackend` (the OpenAI client, the simulator)
and keys each request by :meth:`LLMRequest.cache_key` with the endpoint model and the sampling parameters that
the backend reports through an optional ``cache_identity(request) -> (model, extra)`` method. Its modes:

``off``
    every call goes to the backend; the cache is not touched.
``record``
    a request already in the cache is answered from it; a new one goes to the backend and is stored. Repeated
    identical requests (same seed included) therefore get one answer, in this mode and in replay.
``replay``
    every answer comes from the cache; a request it does not hold raises :class:`ReplayMissError` naming the
    agent, role, instruction and key. Nothing is written, no server is needed.
``read-through``
    answers from the cache when it has them, from the backend otherwise, and writes nothing (for a recording that
    must not change, e.g. one committed for CI, with a live server for what it lacks).

What is stored: the answer's text, usage, latency and confidence, the model, and the request itself (for audit);
never an API key. A replayed answer has ``cached=True`` and the *recorded* latency, so rewards stay deterministic.
Failures are recorded too, so that a replay fails where the recording failed: an empty answer
(:class:`EmptyAnswerError`, replayed as such) and a transient failure that outlived the backend's retries
(replayed as :class:`LLMTransientError`; in ``record`` mode the backend is asked again, and a later answer replaces
the failure). Other errors (a rejected key, an unknown model) are configuration, not data, and are not stored.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from edo_gym._sqlite import retry_locked, set_wal
from edo_gym.agents.backend import TransientBackendError
from edo_gym.agents.protocol import LLMBackend, LLMRequest, LLMResponse
from edo_gym.llm.counts import CallCounter, CallCounts
from edo_gym.llm.errors import EmptyAnswerError, LLMBackendError, LLMCacheError, LLMTransientError, ReplayMissError

#: Cache modes, see the module docstring.
CACHE_MODES: tuple[str, ...] = ("off", "record", "replay", "read-through")
#: File name used when the cache path is a directory (``--llm-cache DIR``).
CACHE_FILE_NAME = "llm_cache.sqlite"
#: Name endings that make a cache path the SQLite file itself rather than a directory.
CACHE_FILE_SUFFIXES: tuple[str, ...] = (".sqlite", ".sqlite3", ".db")
#: Seconds a writer waits for another process's lock before failing.
BUSY_TIMEOUT_S = 60.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    role TEXT NOT NULL,
    agent TEXT NOT NULL,
    request TEXT NOT NULL,
    text TEXT,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    latency_s REAL,
    confidence REAL,
    error TEXT,
    error_message TEXT,
    created_at REAL NOT NULL
)
"""
_COLUMNS = (
    "key", "model", "role", "agent", "request", "text", "prompt_tokens", "completion_tokens", "latency_s", "confidence",
    "error", "error_message", "created_at",
)  # fmt: skip
#: ``error`` values: a recorded failure instead of an answer.
EMPTY, TRANSIENT = "empty", "transient"


@dataclass(frozen=True)
class CacheEntry:
    """One stored row: an answer, or a recorded failure (``error`` is ``"empty"`` or ``"transient"``)."""

    key: str
    model: str
    role: str
    agent: str
    text: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float | None
    confidence: float | None
    error: str | None
    error_message: str | None

    def response(self) -> LLMResponse:
        """The stored answer as an :class:`LLMResponse` with ``cached=True`` (its recorded latency included)."""
        return LLMResponse(
            text=self.text or "",
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            latency_s=self.latency_s,
            confidence=self.confidence,
            cached=True,
        )


def cache_file(path: str | os.PathLike) -> Path:
    """The SQLite file a cache path names: the path itself when its name ends in one of ``CACHE_FILE_SUFFIXES``
    (``.sqlite``, ``.sqlite3``, ``.db``), else ``path/llm_cache.sqlite`` (any other path is a directory).

    :raises ValueError: ``path`` is an existing file whose name does not end in one of those suffixes (it would
        otherwise be taken for a directory)."""
    p = Path(os.fspath(path))
    if p.suffix.lower() in CACHE_FILE_SUFFIXES:
        return p
    if p.exists() and not p.is_dir():
        raise ValueError(
            f"LLM cache path {p} is a file whose name does not end in {' / '.join(CACHE_FILE_SUFFIXES)}: a cache path is "
            f"a directory (it holds {CACHE_FILE_NAME}) or a file named *.sqlite"
        )
    return p / CACHE_FILE_NAME


class ResponseCache:
    """A SQLite file of LLM answers keyed by content address; safe to share between threads and processes.

    :param path: a file named ``*.sqlite`` (or ``.sqlite3``, ``.db``), or any other path: a directory to hold
        ``llm_cache.sqlite`` (see :func:`cache_file`; created when missing unless ``readonly``).
    :param readonly: open without write access (replay, read-through); a missing file is then an empty cache.
    :raises LLMCacheError: the file exists but is not an SQLite file, or not an EDO-Gym LLM cache.
    """

    def __init__(self, path: str | os.PathLike, *, readonly: bool = False) -> None:
        self.path = cache_file(path)
        self.readonly = readonly
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        if not readonly:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.check()  # connects, and fails here for a file that is not a cache

    def __getstate__(self) -> dict:
        return {"path": self.path, "readonly": self.readonly}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"], readonly=state["readonly"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.path)!r}, readonly={self.readonly})"

    def _connect(self) -> sqlite3.Connection | None:
        """This process's connection (a forked child opens its own); ``None`` for a read-only missing file."""
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        if self.readonly:
            if not self.path.exists():
                return None
            if self.path.is_dir():
                raise self._broken(IsADirectoryError(f"{self.path} is a directory"))
            conn = sqlite3.connect(
                f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False
            )
        else:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
            try:
                conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
                set_wal(conn, BUSY_TIMEOUT_S)  # retried: several processes may open a new file at once
                conn.execute("PRAGMA synchronous = NORMAL")
                retry_locked(lambda: conn.execute(_SCHEMA), BUSY_TIMEOUT_S)
            except BaseException:
                conn.close()
                raise
        self._conn, self._pid = conn, os.getpid()
        return conn

    def _broken(self, exc: BaseException) -> LLMCacheError:
        return LLMCacheError(
            f"the LLM cache {self.path} cannot be used ({type(exc).__name__}: {exc}): it is not an SQLite file written "
            "by EDO-Gym's record mode, or it is damaged; record a new one (--llm-cache-mode record) in another place",
            endpoint=str(self.path),
        )

    def check(self) -> None:
        """Fail now, rather than at every call, when the file is not a usable cache.

        :raises LLMCacheError: it is not an SQLite file, or it has tables but not an ``llm_responses`` table with
            this module's columns. A read-only file with no tables at all is an empty cache."""
        with self._lock:
            try:
                conn = self._connect()
                if conn is None:
                    return
                tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if not tables:
                    return
                if "llm_responses" not in tables:
                    raise sqlite3.DatabaseError(f"it has tables {sorted(tables)} but no llm_responses table")
                columns = {row[1] for row in conn.execute("PRAGMA table_info(llm_responses)")}
                missing = set(_COLUMNS) - columns
                if missing:
                    raise sqlite3.DatabaseError(f"its llm_responses table lacks the columns {sorted(missing)}")
                conn.execute("SELECT COUNT(*) FROM llm_responses").fetchone()
            except sqlite3.Error as exc:
                raise self._broken(exc) from None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __len__(self) -> int:
        with self._lock:
            conn = self._connect()
            if conn is None:
                return 0
            try:
                return int(conn.execute("SELECT COUNT(*) FROM llm_responses").fetchone()[0])
            except sqlite3.OperationalError:  # a read-only file without the table: empty
                return 0

    def models(self) -> list[str]:
        """The endpoint models the cache holds answers from (sorted)."""
        with self._lock:
            conn = self._connect()
            if conn is None:
                return []
            try:
                return sorted(row[0] for row in conn.execute("SELECT DISTINCT model FROM llm_responses"))
            except sqlite3.OperationalError:
                return []

    def get(self, key: str) -> CacheEntry | None:
        """The entry stored under ``key``, or ``None``."""
        with self._lock:
            conn = self._connect()
            if conn is None:
                return None
            try:
                row = conn.execute(
                    "SELECT key, model, role, agent, text, prompt_tokens, completion_tokens, latency_s, confidence, "
                    "error, error_message FROM llm_responses WHERE key = ?",
                    (key,),
                ).fetchone()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return None
                raise self._broken(exc) from None
            except sqlite3.Error as exc:
                raise self._broken(exc) from None
        return None if row is None else CacheEntry(*row)

    def put(
        self,
        key: str,
        model: str,
        request: LLMRequest,
        response: LLMResponse | None = None,
        *,
        error: str | None = None,
        error_message: str | None = None,
    ) -> CacheEntry:
        """Store an answer (``response``) or a failure (``error``) under ``key`` and return what the cache now holds.

        The first answer stored for a key wins (``INSERT OR IGNORE``: a process that lost a race gets the winner's
        answer back); an answer replaces a recorded transient failure; a failure never replaces an answer.
        """
        if self.readonly:
            raise PermissionError(f"{self!r} is read-only")
        if (response is None) == (error is None):
            raise ValueError("put() takes exactly one of response= and error=")
        if error is not None and error not in (EMPTY, TRANSIENT):
            raise ValueError(f"error must be {EMPTY!r} or {TRANSIENT!r}, got {error!r}")
        r = response or LLMResponse(text="")
        row = (
            key,
            model,
            request.role,
            request.agent,
            json.dumps(asdict(request), sort_keys=True, ensure_ascii=False),
            None if response is None else r.text,
            r.prompt_tokens,
            r.completion_tokens,
            r.latency_s,
            r.confidence,
            error,
            error_message,
            time.time(),
        )
        columns = (
            "key, model, role, agent, request, text, prompt_tokens, completion_tokens, latency_s, confidence, "
            "error, error_message, created_at"
        )
        if response is not None:
            sql = (
                f"INSERT INTO llm_responses ({columns}) VALUES ({', '.join('?' * 13)}) ON CONFLICT(key) DO UPDATE SET "
                "text = excluded.text, prompt_tokens = excluded.prompt_tokens, "
                "completion_tokens = excluded.completion_tokens, latency_s = excluded.latency_s, "
                "confidence = excluded.confidence, error = NULL, error_message = NULL, created_at = excluded.created_at "
                f"WHERE llm_responses.error = '{TRANSIENT}'"
            )
        else:
            sql = f"INSERT OR IGNORE INTO llm_responses ({columns}) VALUES ({', '.join('?' * 13)})"
        with self._lock:
            conn = self._connect()
            assert conn is not None
            try:
                conn.execute(sql, row)
            except sqlite3.Error as exc:
                raise self._broken(exc) from None
        stored = self.get(key)
        assert stored is not None
        return stored


def backend_identity(backend: Any, request: LLMRequest) -> tuple[str, dict]:
    """``(model, extra)`` that address ``request`` sent to ``backend``: its ``cache_identity(request)`` when it has
    one, else its class name and no extra parameters."""
    identity = getattr(backend, "cache_identity", None)
    if callable(identity):
        model, extra = identity(request)
        return str(model), dict(extra)
    return f"{type(backend).__module__}.{type(backend).__qualname__}", {}


class CachedBackend:
    """An :class:`LLMBackend` that records the answers of ``inner`` and replays them (see the module docstring).

    :param inner: the backend that answers misses; in ``replay`` it is never called (a stopped server is fine) but
        still names the model each request is keyed by.
    :param cache: a :class:`ResponseCache`, or a path (file or directory) to open one at; ``None`` only with ``off``.
    :param mode: one of ``CACHE_MODES``.
    """

    def __init__(self, inner: LLMBackend, cache: ResponseCache | str | os.PathLike | None, mode: str = "record") -> None:
        if mode not in CACHE_MODES:
            raise ValueError(f"cache mode must be one of {list(CACHE_MODES)}, got {mode!r}")
        if inner is None or not callable(getattr(inner, "complete", None)):
            raise TypeError(f"inner must be an LLMBackend (also in replay: it names the model of each request), got {inner!r}")
        if cache is None and mode != "off":
            raise ValueError(f"cache mode {mode!r} needs a cache (a ResponseCache or a path)")
        if isinstance(cache, (str, os.PathLike)):
            readonly = mode in ("replay", "read-through")
            if mode == "replay" and not cache_file(cache).exists():
                raise FileNotFoundError(f"no LLM cache to replay at {cache_file(cache)}: record one first (mode 'record')")
            cache = ResponseCache(cache, readonly=readonly)
        self.inner = inner
        self.cache = cache
        self.mode = mode
        self._counter = CallCounter()

    def __repr__(self) -> str:
        return f"CachedBackend({self.inner!r}, {self.cache!r}, mode={self.mode!r})"

    def close(self) -> None:
        """Close this process's connection to the cache file (SQLite then folds its write-ahead log into the file,
        so the ``.sqlite`` file alone holds the recording)."""
        if self.cache is not None:
            self.cache.close()

    @property
    def counts(self) -> CallCounts:
        """Calls answered by ``inner`` (``real``), from the cache (``cached``) and that raised (``failed``)."""
        return self._counter.snapshot()

    def cache_identity(self, request: LLMRequest) -> tuple[str, dict]:
        return backend_identity(self.inner, request)

    def key(self, request: LLMRequest) -> tuple[str, str]:
        """``(key, model)`` of ``request``: the content address it is stored under, and the endpoint model."""
        model, extra = backend_identity(self.inner, request)
        return request.cache_key(model, extra=extra), model

    def complete(self, request: LLMRequest) -> LLMResponse:
        if self.mode == "off":
            return self._ask(request, None, "")
        assert self.cache is not None
        key, model = self.key(request)
        try:
            entry = self.cache.get(key)
        except LLMCacheError as exc:
            self._counter.fail(f"{type(exc).__name__}: {exc}")
            raise
        if entry is not None and not (entry.error == TRANSIENT and self.mode != "replay"):
            return self._from_entry(request, entry)
        if self.mode == "replay":
            held = self.cache.models()
            if held and model not in held:
                hint = f"the cache holds answers from models {held}, none from {model!r}: replay with the model name used to record"
            else:
                hint = "the run asked something the recording never saw: record it with cache mode 'record' "
                hint += "(--llm-cache-mode record), or use 'read-through' to ask the server for what is missing"
            miss = ReplayMissError(
                f"replay miss: {self.cache.path} holds no answer for {request.role} {request.agent!r} "
                f"(model {model!r}, seed {request.seed}, instruction {request.instruction[:120]!r}, key {key}); {hint}",
                agent=request.agent,
                role=request.role,
                endpoint=str(self.cache.path),
            )
            self._counter.fail(f"{type(miss).__name__}: {miss}")
            raise miss
        return self._ask(request, key if self.mode == "record" else None, model)

    def _from_entry(self, request: LLMRequest, entry: CacheEntry, *, count: bool = True) -> LLMResponse:
        if entry.error is None:
            if count:
                self._counter.add("cached")
            return entry.response()
        cls = EmptyAnswerError if entry.error == EMPTY else LLMTransientError
        error = cls(
            f"recorded failure, replayed from {self.cache.path}: {entry.error_message}",  # type: ignore[union-attr]
            agent=request.agent,
            role=request.role,
            endpoint=str(self.cache.path),  # type: ignore[union-attr]
        )
        if count:
            self._counter.fail(f"{type(error).__name__}: {error}")
        raise error

    def _ask(self, request: LLMRequest, key: str | None, model: str) -> LLMResponse:
        """Ask ``inner``; store the outcome under ``key`` (``None``: store nothing)."""
        assert self.inner is not None
        try:
            response = self.inner.complete(request)
        except (EmptyAnswerError, TransientBackendError, TimeoutError) as exc:
            self._counter.fail(f"{type(exc).__name__}: {exc}")
            if key is not None:
                kind = EMPTY if isinstance(exc, EmptyAnswerError) else TRANSIENT
                message = str(exc) if isinstance(exc, LLMBackendError) else f"{type(exc).__name__}: {exc}"
                self.cache.put(key, model, request, error=kind, error_message=message)  # type: ignore[union-attr]
            raise
        except Exception as exc:
            self._counter.fail(f"{type(exc).__name__}: {exc}")
            raise
        if key is None:
            self._counter.add("real")
            return response
        try:
            stored = self.cache.put(key, model, request, response)  # type: ignore[union-attr]
        except LLMCacheError as exc:
            self._counter.fail(f"{type(exc).__name__}: {exc}")
            raise
        self._counter.add("real")
        if stored.error is None and stored.text == response.text:
            return response
        # Another process stored its answer (or an empty-answer failure) first: everyone gets that one.
        return self._from_entry(request, stored, count=False)

"""On-disk cache of embedding matrices, keyed by model and text content.

A cache file is a ``.npz`` holding the vectors and a JSON header (model id, hash of the texts, shape and a
SHA-256 of the vector bytes). Loading checks every field: a truncated, corrupted, or foreign file (another
model, another corpus version) is never used; it is rebuilt with a warning. Writes go to a temporary file in
the same directory, are flushed to disk, then atomically renamed, under a file lock, so several processes
building the same cache at once leave one valid file (the holder of the lock also deletes temporary files left
by a writer that died). When the directory cannot be created, locked or written, vectors are kept in memory
only, with a warning.

Location: ``$EDO_GYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/edo_gym``, else ``~/.cache/edo_gym``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

CACHE_ENV_VAR = "EDO_GYM_CACHE_DIR"
FORMAT_VERSION = 1


class CacheWarning(UserWarning):
    """The embedding cache was unusable (rebuilt) or could not be written (kept in memory)."""


def default_cache_dir() -> Path:
    """``$EDO_GYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/edo_gym``, else ``~/.cache/edo_gym``."""
    if os.environ.get(CACHE_ENV_VAR):
        return Path(os.environ[CACHE_ENV_VAR]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "edo_gym"


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def texts_hash(texts: list[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode())
        h.update(b"\x00")
    return h.hexdigest()


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)[:80]


class EmbeddingCache:
    """Load-or-build embedding matrices in ``directory`` (see module docstring)."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory).expanduser() if directory is not None else default_cache_dir()

    def path_for(self, kind: str, model_id: str, content_hash: str) -> Path:
        model_key = hashlib.sha256(model_id.encode()).hexdigest()[:12]
        return self.directory / f"{_safe(kind)}-{model_key}-{content_hash[:16]}.npz"

    def load_or_build(
        self, kind: str, model_id: str, texts: list[str], build: Callable[[list[str]], np.ndarray]
    ) -> np.ndarray:
        """The embeddings of ``texts`` under ``model_id``: from disk when a valid file exists, else built and stored.

        :param kind: a short label for the file name (``corpus``, ``queries``, ``tasks``).
        :param build: computes the embeddings of a list of texts (shape ``(n, dim)``, float32).
        """
        content_hash = texts_hash(texts)
        path = self.path_for(kind, model_id, content_hash)
        vectors = self._load(path, model_id, content_hash, len(texts))
        if vectors is not None:
            return vectors
        lock = self._acquire(path, kind)
        if lock is None:
            return self._check_built(build(texts), len(texts))
        try:
            vectors = self._load(path, model_id, content_hash, len(texts), quiet=True)  # another process may have built it
            if vectors is not None:
                return vectors
            self._remove_stale_temporaries(path)
            vectors = self._check_built(build(texts), len(texts))
            self._store(path, vectors, model_id, content_hash)
        finally:
            lock.release()
        return vectors

    def load_or_build_many(
        self,
        model_id: str,
        requests: Mapping[str, list[str]],
        build: Callable[[dict[str, list[str]]], dict[str, np.ndarray]],
    ) -> dict[str, np.ndarray]:
        """:meth:`load_or_build` for several kinds at once: the missing ones are built by one call of ``build``
        (``{kind: texts}`` -> ``{kind: vectors}``), so one progress bar and one pool of threads cover them all.

        Locks of the missing files are taken in path order (no deadlock with another process doing the same, or
        with :meth:`load_or_build`, which takes one).
        """
        hashes = {kind: texts_hash(texts) for kind, texts in requests.items()}
        paths = {kind: self.path_for(kind, model_id, content_hash) for kind, content_hash in hashes.items()}
        out: dict[str, np.ndarray] = {}
        missing = []
        for kind, texts in requests.items():
            vectors = self._load(paths[kind], model_id, hashes[kind], len(texts))
            if vectors is None:
                missing.append(kind)
            else:
                out[kind] = vectors
        if not missing:
            return out
        locks: list = []
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            for kind in sorted(missing, key=lambda k: str(paths[k])):
                lock = self._lock(paths[kind])
                lock.acquire()
                locks.append(lock)
        except Exception as exc:  # OSError (read-only, not a directory, lock timeout) or a lock-library error
            for lock in reversed(locks):
                lock.release()
            warnings.warn(
                f"embedding cache directory {self.directory} is not writable ({type(exc).__name__}: {exc}); "
                f"keeping {', '.join(missing)} embeddings in memory",
                CacheWarning,
                stacklevel=2,
            )
            built = build({kind: list(requests[kind]) for kind in missing})
            out.update({kind: self._check_built(built[kind], len(requests[kind])) for kind in missing})
            return out
        try:
            still = []
            for kind in missing:  # another process may have built some meanwhile
                vectors = self._load(paths[kind], model_id, hashes[kind], len(requests[kind]), quiet=True)
                if vectors is None:
                    still.append(kind)
                else:
                    out[kind] = vectors
            if still:
                for kind in still:
                    self._remove_stale_temporaries(paths[kind])
                built = build({kind: list(requests[kind]) for kind in still})
                for kind in still:
                    vectors = self._check_built(built[kind], len(requests[kind]))
                    self._store(paths[kind], vectors, model_id, hashes[kind])
                    out[kind] = vectors
        finally:
            for lock in reversed(locks):
                lock.release()
        return out

    def load(self, kind: str, model_id: str, texts: list[str]) -> np.ndarray | None:
        """The stored embeddings of ``texts`` under ``model_id``, or ``None`` (a damaged file warns and is ignored)."""
        content_hash = texts_hash(texts)
        return self._load(self.path_for(kind, model_id, content_hash), model_id, content_hash, len(texts))

    def store(self, kind: str, model_id: str, texts: list[str], vectors: np.ndarray) -> None:
        """Write the embeddings of ``texts`` unless a valid file is there (under the file's lock; a directory that
        cannot be written warns and keeps them in memory only)."""
        content_hash = texts_hash(texts)
        path = self.path_for(kind, model_id, content_hash)
        vectors = self._check_built(vectors, len(texts))
        lock = self._acquire(path, kind)
        if lock is None:
            return
        try:
            if self._load(path, model_id, content_hash, len(texts), quiet=True) is None:
                self._remove_stale_temporaries(path)
                self._store(path, vectors, model_id, content_hash)
        finally:
            lock.release()

    def _acquire(self, path: Path, kind: str):  # -> filelock.FileLock | None (filelock is imported lazily)
        """The held lock of ``path``, or None (with a warning) when the cache directory cannot be written."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            lock = self._lock(path)
            lock.acquire()
        except Exception as exc:  # OSError (read-only, not a directory, lock timeout) or a lock-library error
            warnings.warn(
                f"embedding cache directory {self.directory} is not writable ({type(exc).__name__}: {exc}); "
                f"keeping {kind} embeddings in memory",
                CacheWarning,
                stacklevel=3,
            )
            return None
        return lock

    @staticmethod
    def _remove_stale_temporaries(path: Path) -> None:
        """Delete temporary files of ``path`` left by a writer that died; only called while holding the lock."""
        for tmp in path.parent.glob(path.name + ".*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()

    @staticmethod
    def _check_built(vectors: np.ndarray, n: int) -> np.ndarray:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != n:
            raise ValueError(f"embedding build returned shape {vectors.shape}, expected ({n}, dim)")
        return vectors

    def _lock(self, path: Path):
        from filelock import FileLock

        return FileLock(str(path) + ".lock", timeout=600)

    def _load(self, path: Path, model_id: str, content_hash: str, n: int, quiet: bool = False) -> np.ndarray | None:
        if not path.exists():
            return None
        reason = None
        try:
            with np.load(path, allow_pickle=False) as data:
                header = json.loads(bytes(data["header"]).decode())
                vectors = np.ascontiguousarray(data["vectors"], dtype=np.float32)
            if header.get("format") != FORMAT_VERSION:
                reason = f"format {header.get('format')} != {FORMAT_VERSION}"
            elif header.get("model_id") != model_id:
                reason = f"written by model {header.get('model_id')!r}, expected {model_id!r}"
            elif header.get("content_hash") != content_hash:
                reason = "written for different texts (corpus version changed)"
            elif vectors.shape[0] != n or list(vectors.shape) != header.get("shape"):
                reason = f"shape {vectors.shape} does not match header {header.get('shape')} / {n} texts"
            elif hashlib.sha256(vectors.tobytes()).hexdigest() != header.get("sha256"):
                reason = "checksum mismatch (corrupted vectors)"
            elif not np.isfinite(vectors).all():
                reason = "non-finite values"
        except Exception as exc:  # a damaged zip raises many types (BadZipFile, RuntimeError, NotImplementedError, ...)
            reason = f"unreadable ({type(exc).__name__}: {exc})"
        if reason is None:
            return vectors
        if not quiet:
            warnings.warn(f"ignoring embedding cache {path}: {reason}; rebuilding it", CacheWarning, stacklevel=3)
        return None

    def _store(self, path: Path, vectors: np.ndarray, model_id: str, content_hash: str) -> None:
        header = {
            "format": FORMAT_VERSION,
            "model_id": model_id,
            "content_hash": content_hash,
            "shape": list(vectors.shape),
            "sha256": hashlib.sha256(vectors.tobytes()).hexdigest(),
        }
        try:
            fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
            try:
                os.fchmod(fd, 0o666 & ~_current_umask())  # mkstemp creates 0600; a shared cache dir must stay readable
                with os.fdopen(fd, "wb") as fh:
                    np.savez(fh, vectors=vectors, header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8))
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        except OSError as exc:
            warnings.warn(
                f"could not write embedding cache {path} ({exc}); keeping vectors in memory", CacheWarning, stacklevel=3
            )

"""Compiled hot path: the env's step-time modules built with Cython, from the same source, in place.

``edo compile`` (run by ``make install``) translates the modules in :data:`HOT_MODULES` with Cython and builds them
with the system's C compiler into extension modules beside their ``.py`` files. Python imports an extension module
before a source file of the same name, so the next ``import edo_gym`` steps the env with them. The source is the
same, so the trajectories are the same (the stored-digest runs, every observation, reward and ``info`` hashed, pass
compiled and with ``EDO_GYM_COMPILED=off``). A warm step alone took 0.96 of pure Python's time (median of 7
alternated rounds on a 2-core x86-64 CPU, ``python tools/ab_compiled.py --rounds 7``); inside ``make train`` the env's
time did not measurably change (docs/performance.md).

The build writes ``edo_gym/_compiled.json``: each built module with the SHA-256 of the source it was built from. At
import, a finder (installed by ``import edo_gym``) sends a module back to its ``.py`` file, with a warning, when its
source no longer matches (edited since the build) or the manifest does not list it, so an old build never runs
instead of new code. ``EDO_GYM_COMPILED`` chooses:

- ``auto`` (default): the compiled module where it is built and current, else the source;
- ``off``: always the source (pure Python);
- ``on``: the compiled modules, or an ``ImportError`` that says which one is missing or stale and why.

``edo compile --status`` prints which modules run compiled; :func:`status` and :func:`summary` say it to scripts.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: The modules a step runs through (env, simulated models, workers, retrieval, world, config), built by ``edo compile``.
HOT_MODULES: tuple[str, ...] = (
    "edo_gym.envs.edo_env",
    "edo_gym.agents.simulator",
    "edo_gym.agents.worker",
    "edo_gym.agents.protocol",
    "edo_gym.agents.backend",
    "edo_gym.agents.planner",
    "edo_gym.retrieval.store",
    "edo_gym.retrieval.runtime_cache",
    "edo_gym.world.text",
    "edo_gym.world.language",
    "edo_gym.world.queries",
    "edo_gym.world.tasks",
    "edo_gym.world.generator",
    "edo_gym.world.grading",
    "edo_gym.envs.observation",
    "edo_gym.config",
)

#: The values ``EDO_GYM_COMPILED`` may take.
MODES: tuple[str, ...] = ("auto", "off", "on")
ENV_VAR = "EDO_GYM_COMPILED"
MANIFEST_NAME = "_compiled.json"
#: Cython directives: plain Python semantics (annotations are not C types), Python 3.
DIRECTIVES: dict[str, Any] = {"language_level": 3, "annotation_typing": False}

PACKAGE_DIR = Path(__file__).resolve().parent
_EXT_SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
#: Why each hot module imported from its source though a build of it exists (filled by the finder).
_FALLBACKS: dict[str, str] = {}


def mode() -> str:
    """The mode ``EDO_GYM_COMPILED`` asks for (``auto`` when unset); a clear error for anything else."""
    value = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if value not in MODES:
        raise ValueError(f"{ENV_VAR}={os.environ[ENV_VAR]!r} is not a mode; use one of {', '.join(MODES)}")
    return value


def source_path(module: str, package_dir: Path = PACKAGE_DIR) -> Path:
    """The ``.py`` file of ``module`` (a dotted name under ``edo_gym``)."""
    parts = module.split(".")
    if parts[0] != "edo_gym" or len(parts) < 2:
        raise ValueError(f"{module!r} is not a module of edo_gym")
    return package_dir.joinpath(*parts[1:-1], parts[-1] + ".py")


def _extension_files(src: Path) -> list[Path]:
    return [p for suffix in importlib.machinery.EXTENSION_SUFFIXES if (p := src.with_name(src.stem + suffix)).exists()]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_manifest(package_dir: Path = PACKAGE_DIR) -> dict[str, Any]:
    """The build manifest (``{"modules": {name: {"sha256": ..., "file": ...}}, ...}``); empty when there is none."""
    try:
        data = json.loads((package_dir / MANIFEST_NAME).read_text())
    except FileNotFoundError:
        return {"modules": {}}
    except (OSError, ValueError) as exc:
        warnings.warn(f"unreadable {package_dir / MANIFEST_NAME} ({exc}); the hot modules run from source", stacklevel=2)
        return {"modules": {}}
    if not isinstance(data, dict) or not isinstance(data.get("modules"), dict):
        return {"modules": {}}
    return data


def source_reason(module: str, manifest: dict[str, Any], package_dir: Path = PACKAGE_DIR) -> str | None:
    """Why ``module`` must run from source though a build of it exists, or ``None`` when the build may run.

    A build may run when the manifest lists the extension file that exists and the SHA-256 of the source it was built
    from equals the current source's.
    """
    src = source_path(module, package_dir)
    exts = _extension_files(src)
    if not exts:
        return "not built"
    entry = manifest.get("modules", {}).get(module)
    if not isinstance(entry, dict):
        return f"{exts[0].name} is not in {MANIFEST_NAME} (built by something other than `edo compile`)"
    if entry.get("file") != exts[0].name or len(exts) > 1:
        return f"{', '.join(p.name for p in exts)} do not match {MANIFEST_NAME} ({entry.get('file')})"
    if not src.exists():
        return f"{src.name} is missing"
    if entry.get("sha256") != _sha256(src):
        return f"{src.name} changed since it was compiled"
    return None


class _CompiledModuleFinder(importlib.abc.MetaPathFinder):
    """Sends a hot module to its ``.py`` file when its build may not run (see :func:`source_reason`)."""

    def __init__(self, package_dir: Path = PACKAGE_DIR) -> None:
        self.package_dir = package_dir
        self._manifest: dict[str, Any] | None = None

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in HOT_MODULES:
            return None
        src = source_path(fullname, self.package_dir)
        wanted = mode()
        if wanted == "off":
            _FALLBACKS.pop(fullname, None)
            return importlib.util.spec_from_file_location(fullname, src)
        if self._manifest is None:
            self._manifest = read_manifest(self.package_dir)
        reason = source_reason(fullname, self._manifest, self.package_dir)
        if reason is None:
            return None  # the default path finder takes the extension module, as it always does
        if wanted == "on":
            raise ImportError(
                f"{ENV_VAR}=on but {fullname} is not compiled and current: {reason}; build it with "
                f"`{ENV_VAR}=auto edo compile` (or `make compile`)"
            )
        _FALLBACKS[fullname] = reason
        if reason != "not built":
            warnings.warn(f"{fullname} runs from source: {reason}; run `edo compile` (or `make install`)", stacklevel=2)
        return importlib.util.spec_from_file_location(fullname, src)


def install_finder() -> None:
    """Put the finder first on ``sys.meta_path`` (once); ``import edo_gym`` calls this before importing its modules."""
    if not any(isinstance(f, _CompiledModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _CompiledModuleFinder())


def is_compiled(module: str) -> bool:
    """Whether ``module`` (imported now if it is not yet) runs from an extension module."""
    mod = sys.modules.get(module) or importlib.import_module(module)
    return any(str(getattr(mod, "__file__", "")).endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES)


def status() -> dict[str, str]:
    """Per hot module: ``compiled``, or ``source: <why>`` (``off`` mode, not built, changed since the build, ...)."""
    out = {}
    for module in HOT_MODULES:
        if is_compiled(module):
            out[module] = "compiled"
        elif mode() == "off":
            out[module] = f"source: {ENV_VAR}=off"
        else:
            out[module] = f"source: {_FALLBACKS.get(module, 'not built')}"
    return out


def summary() -> str:
    """``compiled`` (all hot modules), ``source`` (none) or ``partial (k/n compiled)``: for benchmark records."""
    n = sum(v == "compiled" for v in status().values())
    return "compiled" if n == len(HOT_MODULES) else "source" if n == 0 else f"partial ({n}/{len(HOT_MODULES)} compiled)"


def _build_one(module: str, package_dir: str) -> tuple[str, str, str]:
    """Cythonize and compile one module in a temporary directory; (module, built file, source sha256 at the start)."""
    from Cython.Build import cythonize
    from setuptools import Distribution, Extension

    src = source_path(module, Path(package_dir))
    digest = _sha256(src)  # the source this build is of; a later edit makes the manifest entry stale, as it should
    with tempfile.TemporaryDirectory(prefix="edo_compile_") as tmp:
        copy = Path(tmp, "src", *module.split(".")[:-1], src.name)
        copy.parent.mkdir(parents=True)
        copy.write_bytes(src.read_bytes())
        ext = Extension(module, [str(copy)])
        (built,) = cythonize([ext], compiler_directives=DIRECTIVES, quiet=True, force=True, build_dir=str(Path(tmp, "c")))
        dist = Distribution({"ext_modules": [built], "script_name": "edo compile"})
        cmd = dist.get_command_obj("build_ext")
        cmd.build_lib = str(Path(tmp, "lib"))
        cmd.build_temp = str(Path(tmp, "tmp"))
        cmd.force = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        saved = os.dup(1)
        try:
            os.dup2(devnull, 1)  # the compiler command lines; errors go to stderr
            dist.run_command("build_ext")
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)
        (out,) = Path(cmd.build_lib).rglob(src.stem + "*" + _EXT_SUFFIX)
        # into place atomically: a reader sees the old file or the new one, never half of one
        staged = src.with_name(f".{out.name}.{os.getpid()}.tmp")
        shutil.copyfile(out, staged)
        os.replace(staged, src.with_name(out.name))
    return module, out.name, digest


def build(
    modules: Iterable[str] | None = None,
    *,
    force: bool = False,
    jobs: int | None = None,
    progress: bool = True,
    package_dir: Path = PACKAGE_DIR,
) -> dict[str, str]:
    """Compile the hot modules whose build is missing or stale (all of them with ``force``); returns their status.

    :param modules: a subset of :data:`HOT_MODULES` (default: all).
    :param jobs: modules compiled at once (default: the CPU count, at most 4).
    :param package_dir: the ``edo_gym`` directory to build in (default: this package's).
    :raises ValueError: for a module that is not a hot module.
    :raises RuntimeError: when Cython is not installed or a module fails to compile (the others stay as they were).
    """
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from filelock import FileLock
    from tqdm.auto import tqdm

    wanted = list(HOT_MODULES if modules is None else modules)
    unknown = [m for m in wanted if m not in HOT_MODULES]
    if unknown:
        raise ValueError(f"not hot modules: {', '.join(unknown)}; allowed: {', '.join(HOT_MODULES)}")
    if importlib.util.find_spec("Cython") is None:
        raise RuntimeError("edo compile needs Cython: pip install 'edo-gym[compile]' (`make install` installs it)")
    with FileLock(str(package_dir / ".compile.lock")):
        manifest = read_manifest(package_dir)
        todo = [m for m in wanted if force or source_reason(m, manifest, package_dir) is not None]
        failures = {}
        if todo:
            jobs = max(1, min(len(todo), jobs or min(4, os.cpu_count() or 1)))
            bar = tqdm(total=len(todo), desc="edo compile (Cython)", unit="module", disable=not progress)
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                futures = {pool.submit(_build_one, m, str(package_dir)): m for m in todo}
                for fut in as_completed(futures):
                    try:
                        module, file, digest = fut.result()
                    except Exception as exc:  # reported together below; the module keeps its old entry
                        failures[futures[fut]] = exc
                    else:
                        manifest["modules"][module] = {"sha256": digest, "file": file}
                    bar.set_postfix_str(futures[fut].rsplit(".", 1)[-1])
                    bar.update()
            bar.close()
            import Cython

            manifest.update(cython=Cython.__version__, python=sys.implementation.cache_tag, directives=DIRECTIVES)
            staged = package_dir / f".{MANIFEST_NAME}.{os.getpid()}.tmp"
            staged.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
            os.replace(staged, package_dir / MANIFEST_NAME)
        elif (package_dir / MANIFEST_NAME).exists():
            os.utime(package_dir / MANIFEST_NAME)  # up to date: `make` compares this file's time with the sources'
    if failures:
        lines = "; ".join(f"{m}: {type(e).__name__}: {e}" for m, e in failures.items())
        raise RuntimeError(f"{len(failures)} module(s) failed to compile ({lines}); they run from source")
    fresh = read_manifest(package_dir)
    reasons = {m: source_reason(m, fresh, package_dir) for m in wanted}
    return {m: "compiled" if reason is None else f"source: {reason}" for m, reason in reasons.items()}


def clean(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """Remove every build of the hot modules and the manifest (the env then runs from source); the removed files."""
    removed = []
    for module in HOT_MODULES:
        for path in _extension_files(source_path(module, package_dir)):
            path.unlink()
            removed.append(str(path))
    manifest = package_dir / MANIFEST_NAME
    if manifest.exists():
        manifest.unlink()
        removed.append(str(manifest))
    return removed


def main() -> int:
    """``edo compile --status``: print each hot module's status."""
    for module, state in status().items():
        print(f"{module:36s} {state}")
    return 0

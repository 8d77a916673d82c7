"""Dependencies point one way: ``baselines`` (policies, algorithms, training) uses ``edo_gym`` (the env), never the
reverse, so the env can be installed, read and changed without the algorithms."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "edo_gym"


def imported_modules(path: Path) -> set[str]:
    """Every module an ``import`` statement in ``path`` names, at any depth (functions included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_edo_gym_source_imports_baselines():
    offenders = {
        str(path.relative_to(REPO)): sorted(m for m in imported_modules(path) if m.split(".")[0] == "baselines")
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    offenders = {path: mods for path, mods in offenders.items() if mods}
    assert not offenders, f"edo_gym must not import baselines: {offenders}"


def test_importing_every_edo_gym_module_loads_no_baselines_module():
    code = (
        "import importlib, pkgutil, sys, edo_gym\n"
        "for m in pkgutil.walk_packages(edo_gym.__path__, 'edo_gym.'):\n"
        "    importlib.import_module(m.name)\n"
        "print(len(sys.modules), sorted(k for k in sys.modules if k.split('.')[0] == 'baselines'))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split(maxsplit=1)[1].strip() == "[]", proc.stdout


def test_the_edo_script_has_the_env_and_the_training_commands():
    from baselines.cli import build_parser
    from edo_gym.cli import build_parser as build_env_parser

    def commands(parser) -> list[str]:
        (sub,) = [a for a in parser._actions if a.dest == "command"]
        return list(sub.choices)

    assert commands(build_parser()) == ["demo", "prepare", "train", "record-dataset", "evaluate", "serve-llm"]
    assert commands(build_env_parser()) == ["prepare", "serve-llm"]

"""Dependencies point one way: ``baselines`` (policies, algorithms, training) uses ``edo_gym`` (the env), never the
reverse, so the env can be installed, read and changed without the algorithms; no two modules import each other,
no module imports another's private names, and no file edits ``sys.path``."""

from __future__ import annotations

import ast
import os
import re
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


#: The packages whose modules import one another: the env, the algorithms, the benchmarks, the developer tools, the tests.
PACKAGES = ("edo_gym", "baselines", "benchmarks", "tools", "tests")
#: Private names a test may import from another module, with the reason (none at present).
PRIVATE_IMPORTS_ALLOWED: set[tuple[str, str]] = set()
SYS_PATH_CHANGE = re.compile(r"\bsys\.path\s*(?:\.\s*(?:insert|append|extend|remove)\s*\(|\[[^\]]*\]\s*=|\+?=(?!=))")


def module_files() -> dict[str, Path]:
    """Every module of :data:`PACKAGES` by dotted name (``pkg/__init__.py`` is ``pkg``); result folders left out."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            if "results" in parts:
                continue
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def runtime_imports(name: str, path: Path) -> list[tuple[int, str, str | None]]:
    """``(line, module, imported name or None)`` for every import in ``path`` that runs, at module level or inside a
    function (those under ``if TYPE_CHECKING:`` do not), relative imports resolved against the module ``name``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    type_only = {
        id(sub)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for sub in ast.walk(stmt)
    }
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join([*package[: len(package) - node.level + 1], *([node.module] if node.module else [])])
            module = base if node.level else node.module or ""
            found += [(node.lineno, module, alias.name) for alias in node.names]
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Which of ``modules`` each one imports when it runs. Importing ``a.b.c`` runs ``a`` and ``a.b`` too (their
    ``__init__``), so a module depends on the packages above what it imports, except those it lives in."""

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for _, module, imported in runtime_imports(name, path):
            target = known(f"{module}.{imported}" if imported and f"{module}.{imported}" in modules else module)
            if target is None or target == name:
                continue
            parts = target.split(".")
            for k in range(1, len(parts) + 1):
                above = ".".join(parts[:k])
                if above in modules and above != name and not name.startswith(above + "."):
                    graph[name].add(above)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_a_function_level_import_through_a_package_init_is_a_cycle(tmp_path):
    """``x`` imports ``p.config`` inside a function, which runs ``p/__init__.py``, which imports ``p.run``, which
    imports ``x``: a cycle. An import under ``if TYPE_CHECKING:`` is no edge."""
    files = {
        "p/__init__.py": "from p.run import train\n",
        "p/run.py": "from x import warm\n\ndef train():\n    return warm()\n",
        "p/config.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from x import warm\nALGOS = ()\n",
        "x.py": "def warm():\n    from p.config import ALGOS\n\n    return ALGOS\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    modules = {"p": tmp_path / "p/__init__.py", "p.run": tmp_path / "p/run.py", "p.config": tmp_path / "p/config.py",
               "x": tmp_path / "x.py"}  # fmt: skip
    graph = import_graph(modules)
    assert graph == {"p": {"p.run"}, "p.run": {"x"}, "p.config": set(), "x": {"p", "p.config"}}
    assert cycles(graph) == [["p", "p.run", "x"]]
    assert cycles({**graph, "p.run": set()}) == []


def test_no_import_cycle_among_the_modules():
    """No two modules import each other, directly or through others, at module level or inside functions (a
    function-level import does not make a cycle go away, it only delays it); ``TYPE_CHECKING`` imports do not run."""
    found = cycles(import_graph(module_files()))
    assert not found, f"import cycles (move the shared code below both modules): {found}"


def test_no_private_name_is_imported_from_another_module():
    """A name used by another module is public: ``from x import _name`` across modules means a helper to make public
    (or to move to where both modules can import it)."""
    modules = module_files()
    used = set()
    offenders = []
    for name, path in modules.items():
        for line, module, imported in runtime_imports(name, path):
            if not imported or not imported.startswith("_") or imported.startswith("__") or module == name:
                continue
            if module.split(".")[0] not in PACKAGES or f"{module}.{imported}" in modules:
                continue
            if (module, imported) in PRIVATE_IMPORTS_ALLOWED and name.split(".")[0] == "tests":
                used.add((module, imported))
                continue
            offenders.append(f"{path.relative_to(REPO)}:{line}: from {module} import {imported}")
    assert not offenders, "private names imported across modules:\n" + "\n".join(offenders)
    assert used == PRIVATE_IMPORTS_ALLOWED, f"allowed private imports no test makes any more: {PRIVATE_IMPORTS_ALLOWED - used}"


def test_no_python_file_changes_sys_path():
    """Scripts run as modules from the repository root (``python -m benchmarks.<name>``), the tests with pytest's
    ``pythonpath``, child processes with ``PYTHONPATH``: no tracked Python file edits ``sys.path``, in code or in the
    code it runs in a child process."""
    path_attr = "sys." + "path"  # spelled apart, so that this file does not match
    assert SYS_PATH_CHANGE.search(path_attr + ".insert(0, root)") and SYS_PATH_CHANGE.search(path_attr + "[:0] = [root]")
    assert not SYS_PATH_CHANGE.search(f"print({path_attr})") and not SYS_PATH_CHANGE.search(f"if {path_attr} == saved:")
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True)
    paths = [REPO / p for p in listed.stdout.split()] if listed.returncode == 0 and listed.stdout else []
    paths = paths or [p for package in PACKAGES for p in (REPO / package).rglob("*.py")]
    offenders = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in paths
        if path.is_file()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if SYS_PATH_CHANGE.search(line)
    ]
    assert not offenders, "sys.path changed in:\n" + "\n".join(offenders)

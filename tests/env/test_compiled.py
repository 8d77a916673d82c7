"""The compiled hot path (``edo compile``, ``edo_gym.compiled``) is exact, and an old build never runs new code.

- pure Python (``EDO_GYM_COMPILED=off``, in a subprocess) and this process (compiled where ``make install`` built the
  hot modules) both reproduce the stored digests of ``test_speed_exactness.py``: the seeded runs with every ``info``
  key, recorded before any speed-up, so compiled and pure runs give the same trajectories;
- where a build is present the suite runs on it (a fallback to source would otherwise go unnoticed);
- the finder's decisions on a temporary package: not built, built by something else, source changed since the
  build, current; ``EDO_GYM_COMPILED`` ``on`` / ``off`` / a bad value;
- ``build()`` compiles a module of a copy of the package for real, and a fresh process imports it;
- (slow) GRPO through ``edo train``'s code trains the same parameters in a compiled and in a pure-Python process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from edo_gym import compiled
from edo_gym.compiled import HOT_MODULES, MANIFEST_NAME, source_reason

TESTS = Path(__file__).resolve().parent  # test_speed_exactness.py, whose digests the subprocesses compute
ROOT = TESTS.parents[1]
_EXT = compiled._EXT_SUFFIX


def _run(code: str, mode: str | None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS), str(ROOT / "tests")])}
    env.pop(compiled.ENV_VAR, None)
    if mode is not None:
        env[compiled.ENV_VAR] = mode
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


_DIGESTS = """
import json
from edo_gym import compiled
import test_speed_exactness as t
out = {name: t.full_run_digest(name) for name in t.DIGEST_RUNS}
out["seeded-400"] = t.seeded_run_digest(400)
print(json.dumps({"summary": compiled.summary(), "digests": out}))
"""


def _expected() -> dict[str, tuple[str, float]]:
    import test_speed_exactness as t

    return {**t.FULL_RUN_DIGESTS, "seeded-400": t.SEEDED_RUN_DIGEST}


def test_pure_python_reproduces_the_stored_digests() -> None:
    import test_speed_exactness as t

    proc = _run(_DIGESTS, "off")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["summary"] == "source"
    expected = _expected()
    assert set(result["digests"]) == set(expected)
    differing = {k: v for k, v in result["digests"].items() if not t.RunDigest(*v).matches(expected[k])}
    assert not differing, f"runs whose digests differ from the stored ones: {differing}"


def _all_built() -> bool:
    manifest = compiled.read_manifest()
    return all(source_reason(m, manifest) is None for m in HOT_MODULES)


def test_the_suite_runs_on_the_build_where_there_is_one() -> None:
    if not _all_built():
        pytest.skip("the hot modules are not all built and current here (`make install` builds them: `edo compile`)")
    if compiled.mode() == "off":
        pytest.skip("EDO_GYM_COMPILED=off: this run is pure Python on purpose")
    # this process: the stored-digest tests of test_speed_exactness.py ran on these modules
    assert compiled.summary() == "compiled", compiled.status()
    proc = _run("from edo_gym import compiled; print(compiled.summary())", "on")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "compiled"


def test_a_bad_mode_is_an_error_naming_the_allowed_ones() -> None:
    proc = _run("import edo_gym", "fast")
    assert proc.returncode != 0
    assert "EDO_GYM_COMPILED='fast' is not a mode; use one of auto, off, on" in proc.stderr


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A package directory with the source files of two hot modules (their text is all that matters here)."""
    pkg = tmp_path / "edo_gym"
    for module in ("edo_gym.agents.simulator", "edo_gym.world.text"):
        src = compiled.source_path(module, pkg)
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(f"NAME = {module!r}\n")
    return pkg


def _fake_build(pkg: Path, module: str, *, listed: bool = True) -> Path:
    src = compiled.source_path(module, pkg)
    ext = src.with_name(src.stem + _EXT)
    ext.write_bytes(b"not a real extension")
    manifest = compiled.read_manifest(pkg)
    if listed:
        manifest["modules"][module] = {"sha256": compiled._sha256(src), "file": ext.name}
    (pkg / MANIFEST_NAME).write_text(json.dumps(manifest))
    return ext


def test_source_reason_covers_every_case(package: Path) -> None:
    sim, text = "edo_gym.agents.simulator", "edo_gym.world.text"
    assert source_reason(sim, compiled.read_manifest(package), package) == "not built"
    _fake_build(package, sim)
    _fake_build(package, text, listed=False)
    manifest = compiled.read_manifest(package)
    assert source_reason(sim, manifest, package) is None
    assert "is not in _compiled.json" in source_reason(text, manifest, package)
    compiled.source_path(sim, package).write_text("NAME = 'edited'\n")
    assert source_reason(sim, manifest, package) == "simulator.py changed since it was compiled"


def test_the_finder_sends_a_stale_build_to_its_source(package: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sim = "edo_gym.agents.simulator"
    _fake_build(package, sim)
    compiled.source_path(sim, package).write_text("NAME = 'edited'\n")
    src = str(compiled.source_path(sim, package))
    monkeypatch.delenv(compiled.ENV_VAR, raising=False)
    with pytest.warns(UserWarning, match="runs from source: simulator.py changed since it was compiled"):
        spec = compiled._CompiledModuleFinder(package).find_spec(sim)
    assert spec is not None and spec.origin == src
    monkeypatch.setenv(compiled.ENV_VAR, "on")
    with pytest.raises(ImportError, match="EDO_GYM_COMPILED=on but edo_gym.agents.simulator is not compiled and current"):
        compiled._CompiledModuleFinder(package).find_spec(sim)
    monkeypatch.setenv(compiled.ENV_VAR, "off")
    spec = compiled._CompiledModuleFinder(package).find_spec(sim)
    assert spec is not None and spec.origin == src


def test_the_finder_leaves_current_builds_and_other_modules_to_python(package: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(compiled.ENV_VAR, "auto")
    _fake_build(package, "edo_gym.agents.simulator")
    finder = compiled._CompiledModuleFinder(package)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert finder.find_spec("edo_gym.agents.simulator") is None  # the default finder takes the extension module
        assert finder.find_spec("edo_gym.cli") is None  # not a hot module
        spec = finder.find_spec("edo_gym.world.text")  # no build: its source, without a warning
    assert spec is not None and spec.origin == str(compiled.source_path("edo_gym.world.text", package))


def test_build_rejects_modules_that_are_not_hot() -> None:
    with pytest.raises(ValueError, match="not hot modules: edo_gym.cli; allowed: edo_gym.envs.edo_env"):
        compiled.build(["edo_gym.cli"])


def test_build_of_no_modules_in_an_unbuilt_package_does_nothing(tmp_path: Path) -> None:
    pytest.importorskip("Cython")
    assert compiled.build([], package_dir=tmp_path, progress=False) == {}
    assert not (tmp_path / compiled.MANIFEST_NAME).exists()


def test_edo_compile_status_lists_every_hot_module() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "edo_gym.cli", "compile", "--status"],
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == list(HOT_MODULES)
    expected = "compiled" if _all_built() and compiled.mode() != "off" else "source:"
    assert all(line.split()[1].startswith(expected) for line in lines), proc.stdout


def test_build_compiles_a_module_that_a_fresh_process_then_imports(tmp_path: Path) -> None:
    pytest.importorskip("Cython", reason="edo compile needs Cython (the `compile` extra; `make install` installs it)")
    if not any(shutil.which(cc) for cc in (os.environ.get("CC", "cc"), "cc", "gcc", "clang")):
        pytest.skip("no C compiler here: edo compile cannot build (EDO-Gym runs as pure Python)")
    pkg = tmp_path / "edo_gym"
    shutil.copytree(compiled.PACKAGE_DIR, pkg, ignore=shutil.ignore_patterns("*.so", "_compiled.json", "__pycache__"))
    module = "edo_gym.world.queries"
    result = compiled.build([module], jobs=1, progress=False, package_dir=pkg)
    assert result == {module: "compiled"}
    manifest = compiled.read_manifest(pkg)
    assert manifest["modules"][module]["sha256"] == compiled._sha256(compiled.source_path(module, pkg))
    assert manifest["cython"] and manifest["directives"] == compiled.DIRECTIVES
    code = f"import {module} as m, edo_gym.world.text as t; print(m.__file__); print(t.__file__)"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(tmp_path)}
    env.pop(compiled.ENV_VAR, None)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    queries_file, text_file = proc.stdout.split()
    assert queries_file == str(pkg / "world" / f"queries{_EXT}")
    assert text_file == str(pkg / "world" / "text.py")  # not built in this copy
    # a second build finds it current and rebuilds nothing; an edit makes it stale again
    assert compiled.build([module], progress=False, package_dir=pkg) == {module: "compiled"}
    src = compiled.source_path(module, pkg)
    src.write_text(src.read_text() + "\n# edited\n")
    assert compiled.read_manifest(pkg)["modules"][module]["sha256"] != compiled._sha256(src)
    assert source_reason(module, compiled.read_manifest(pkg), pkg) == "queries.py changed since it was compiled"
    removed = compiled.clean(pkg)
    assert str(pkg / "world" / f"queries{_EXT}") in removed and not (pkg / MANIFEST_NAME).exists()


_TRAIN = """
import json, sys, torch
from baselines.training import TrainConfig, train
from edo_gym import compiled
cfg = TrainConfig(**json.loads(sys.argv[1]))
model, result = train(cfg)
torch.save(model.policy.state_dict(), sys.argv[2])
print(json.dumps({"summary": compiled.summary(), "steps": result.num_timesteps}))
"""


@pytest.mark.slow
def test_grpo_trains_the_same_parameters_compiled_and_as_pure_python(tmp_path: Path) -> None:
    """``edo train``'s code (GRPO, default world) in a compiled and in a pure-Python process: the same parameters to the
    bit (~20 s)."""
    if not _all_built():
        pytest.skip("the hot modules are not all built and current here (`edo compile`)")
    import torch

    settings = dict(env_id="EDO-v0", algo="grpo", total_timesteps=3_000, n_envs=4, group_size=4, groups_per_rollout=3,
                    batch_size=64, n_epochs=2, seed=5, eval_episodes=0, progress_bar=False)  # fmt: skip
    runs = {}
    for mode in ("on", "off"):
        out = tmp_path / mode
        proc = _run(_TRAIN.replace("sys.argv[1]", repr(json.dumps({**settings, "output_dir": str(out)}))).replace(
            "sys.argv[2]", repr(str(tmp_path / f"{mode}.pt"))), mode)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
        runs[mode]["params"] = torch.load(tmp_path / f"{mode}.pt", weights_only=True)
    assert runs["on"]["summary"] == "compiled" and runs["off"]["summary"] == "source"
    assert runs["on"]["steps"] == runs["off"]["steps"] >= 3_000
    a, b = runs["on"]["params"], runs["off"]["params"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

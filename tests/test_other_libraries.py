"""The snippets of docs/other_libraries.md run verbatim, and ``examples/train_rllib.py`` trains one iteration.

The plain-PyTorch snippet needs only the core dependencies and runs in ``make test``; the Tianshou and RLlib ones
need those libraries, which ``make test-compat`` installs (RLlib 2.60 pins gymnasium 1.2.2), and are skipped
elsewhere. Each runs in a fresh process from the repository root, as a user would paste it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DOC = "docs/other_libraries.md"
SECTION = "## Snippets"
#: snippet name (the start of its first comment line) -> module it needs
SNIPPETS = {"PyTorch": "torch", "Tianshou": "tianshou", "RLlib": "ray.rllib"}


def doc_snippets() -> dict[str, str]:
    """The ```python blocks of docs/other_libraries.md's "Snippets" section, by the first word of their first comment."""
    text = (REPO_ROOT / DOC).read_text()
    assert SECTION in text, f"{DOC} has no {SECTION!r} section"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    return {block.split("\n", 1)[0].removeprefix("# ").split()[0].rstrip(":,"): block for block in blocks}


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO_ROOT),  # this checkout's edo_gym, whatever is installed
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        RAY_DEDUP_LOGS="0",
    )
    return subprocess.run(
        [sys.executable, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _check(proc: subprocess.CompletedProcess, what: str) -> str:
    assert proc.returncode == 0, f"{what} failed:\nSTDOUT:\n{proc.stdout[-3000:]}\nSTDERR:\n{proc.stderr[-6000:]}"
    return proc.stdout


def test_readme_has_one_snippet_per_library():
    assert sorted(doc_snippets()) == sorted(SNIPPETS)


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n == "RLlib" else n for n in SNIPPETS], ids=list(SNIPPETS)
)
def test_readme_snippet_runs(name):
    pytest.importorskip(SNIPPETS[name], reason=f"{SNIPPETS[name]} is not importable here (make test-compat installs it)")
    out = _check(_run(["-c", doc_snippets()[name]], timeout=540), f"{DOC} {name} snippet")
    expected = {"PyTorch": "update 2: mean reward per step", "Tianshou": "illegal actions: 0", "RLlib": "episode return mean"}
    assert expected[name] in out, out[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_rllib_example_masks_every_illegal_action():
    """One PPO iteration with the masking RLModule samples no illegal action; without it the same run samples some
    (so the count is real)."""
    pytest.importorskip("ray.rllib")
    args = ["examples/train_rllib.py", "--iterations", "1", "--batch-size", "256", "--envs-per-runner", "2"]
    masked = _check(_run(args, timeout=280), "train_rllib.py")
    assert re.search(r"iteration 1: env steps \d+, .*illegal actions 0\n", masked), masked[-2000:]
    unmasked = _check(_run([*args, "--no-mask"], timeout=280), "train_rllib.py --no-mask")
    count = re.search(r"iteration 1: .*illegal actions (\d+)", unmasked)
    assert count and int(count.group(1)) > 0, unmasked[-2000:]

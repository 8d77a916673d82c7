"""The README's path, as a newcomer follows it: the Quickstart's ``make train``, then ``edo evaluate`` on the model it
saved (settings read from the file saved beside it), then the minimal example.

The commands are read from the README itself, so that a README that changes them is tested as it reads. The training
run is shortened (``TRAIN_ARGS``: later flags override the Makefile's), which is why the whole path is ``slow``; the
minimal example alone runs in the fast suite.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def _section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def test_the_quickstart_has_exactly_the_two_commands():
    (block,) = _code_blocks(_section("Quickstart"), "bash")
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["make train", "make test"]


def test_the_minimal_example_runs():
    (code,) = _code_blocks(_section("A minimal example"), "python")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "success" in proc.stdout and "TASK #" in proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_train_then_edo_evaluate_then_the_example(tmp_path):
    quickstart = _section("Quickstart")
    evaluate = re.search(r"`(edo evaluate runs/\S+\.zip)`", quickstart)
    assert evaluate, "the Quickstart names no edo evaluate command"
    short = f"--timesteps 8192 --eval-episodes 10 --warm-start-episodes 200 --no-progress --output-dir {tmp_path}"
    env = {**os.environ, "MINARI_DATASETS_PATH": str(tmp_path / "minari")}  # the teacher's recording stays in tmp
    train = subprocess.run(
        ["make", "train", f"TRAIN_ARGS={short}"], cwd=REPO, capture_output=True, text=True, timeout=1800, env=env
    )
    assert train.returncode == 0, train.stdout[-2000:] + train.stderr[-3000:]
    assert "grpo" in train.stdout
    model = tmp_path / Path(evaluate.group(1).split()[2]).name
    assert model.exists() and model.with_suffix(".json").exists()
    edo = Path(sys.executable).with_name("edo")
    command = [str(edo), *evaluate.group(1).split()[1:2], str(model), "--episodes", "10"]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1200, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "grpo" in proc.stdout and "oracle" in proc.stdout
    test_the_minimal_example_runs()

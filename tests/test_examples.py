"""Every script in examples/ runs end to end with a tiny budget (in a subprocess, as a user would run it)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

#: script -> tiny-budget arguments (``{out}`` is replaced by a temporary directory)
TINY_ARGS = {
    "train_grpo.py": ["--timesteps", "300", "--episodes", "3", "--output-dir", "{out}"],
    "train_ppo_maskable.py": ["--timesteps", "300", "--episodes", "3", "--output-dir", "{out}"],
    "evaluate_and_render.py": ["--timesteps", "300", "--episodes", "3", "--output-dir", "{out}"],
    "custom_algorithm.py": ["--timesteps", "300", "--batch-episodes", "4", "--episodes", "3"],
}
EXPECTED_OUTPUT = {
    "train_grpo.py": ["| grpo |", "| static_pipeline |", "first action on held-out task 0"],
    "train_ppo_maskable.py": ["| ppo |", "| maskable_ppo |", "| oracle |"],
    "evaluate_and_render.py": ["| GRPO |", "Episode trace", "TASK #0", "episode stats"],
    "custom_algorithm.py": ["| reinforce (custom) |", "updates"],
}


#: examples that need another RL library, run by tests/test_other_libraries.py (in `make test-compat`)
OTHER_LIBRARY_EXAMPLES = {"train_rllib.py"}


def test_every_example_is_covered():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted({*TINY_ARGS, *OTHER_LIBRARY_EXAMPLES})


@pytest.mark.parametrize("script", sorted(TINY_ARGS))
def test_example_runs_tiny(script, tmp_path):
    args = [a.replace("{out}", str(tmp_path / "runs")) for a in TINY_ARGS[script]]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"{script} failed:\nSTDOUT:\n{proc.stdout[-3000:]}\nSTDERR:\n{proc.stderr[-5000:]}"
    for expected in EXPECTED_OUTPUT[script]:
        assert expected in proc.stdout, f"{script}: {expected!r} not in output:\n{proc.stdout[-3000:]}"

"""The snippets of docs/other_libraries.md run verbatim, ``examples/train_rllib.py`` trains one iteration, TorchRL's
``GymEnv("EDO-v0")`` works, and the README's RL Zoo commands train and replay with ``examples/rl_zoo/``.

The plain-PyTorch snippet needs only the core dependencies and runs in ``make test``; the Tianshou, RLlib, TorchRL
and RL Zoo tests need those libraries, which ``make test-compat`` installs (RLlib 2.60 pins gymnasium 1.2.2), and
are skipped elsewhere. Each snippet and command runs in a fresh process from the repository root, as a user would
paste it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DOC = "docs/other_libraries.md"
SECTION = "## Snippets"
README_SECTION = "## Other libraries"
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


def test_torchrl_gymenv_builds_checks_specs_and_runs_a_masked_rollout():
    """TorchRL's ``GymEnv`` probes ``gym.make(id, frameskip=1)`` and falls back on Python's "unexpected keyword
    argument" ``TypeError``; then its spec check passes and a rollout that samples only legal actions runs across
    episodes (``illegal_action="raise"``: one illegal action would fail it)."""
    envs = pytest.importorskip("torchrl.envs", reason="torchrl is not importable here (make test-compat installs it)")
    import torch
    from torchrl.envs.utils import check_env_specs

    import edo_gym  # noqa: F401  (registers the ids)

    env = envs.GymEnv("EDO-v0", categorical_action_encoding=True, illegal_action="raise")
    check_env_specs(env, seed=0)
    generator = torch.Generator().manual_seed(0)

    def legal_random(td):
        td["action"] = torch.multinomial((td["action_mask"] > 0).float(), 1, generator=generator).squeeze(-1)
        return td

    steps = 300
    rollout = env.rollout(steps, legal_random, break_when_any_done=False)
    assert rollout.batch_size == torch.Size([steps])
    chosen = rollout["action_mask"].gather(-1, rollout["action"].unsqueeze(-1))
    assert bool((chosen > 0).all())
    assert int(rollout["next", "done"].sum()) >= 5  # several episodes: the rollout reset the env on its own
    env.close()


def readme_zoo_commands() -> list[str]:
    """The ``python -m rl_zoo3...`` lines of the README's "Other libraries" section, in order."""
    section = (REPO_ROOT / "README.md").read_text().split(README_SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip().startswith("python -m rl_zoo3.")]


def test_readme_shows_the_zoo_commands_with_the_shipped_hyperparameters():
    train, enjoy = readme_zoo_commands()
    assert "rl_zoo3.train --algo ppo --env EDO-v0 --gym-packages edo_gym --conf-file examples/rl_zoo/ppo.yml" in train
    assert "rl_zoo3.enjoy --algo ppo --env EDO-v0 --gym-packages edo_gym" in enjoy
    for algo in ("ppo", "a2c"):
        text = (REPO_ROOT / "examples" / "rl_zoo" / f"{algo}.yml").read_text()
        assert "\nEDO-v0:\n" in text and "policy: 'MultiInputPolicy'" in text, algo


@pytest.mark.timeout(600)
@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_readme_zoo_commands_train_and_replay(algo, tmp_path):
    """The README's ``rl_zoo3.train`` command (PPO; A2C with the algo swapped) for about 3,000 steps, then its
    ``rl_zoo3.enjoy`` command on the saved model; later flags override the README's (argparse keeps the last)."""
    pytest.importorskip("rl_zoo3", reason="rl_zoo3 is not importable here (make test-compat installs it)")
    train, enjoy = (line.replace("ppo", algo) for line in readme_zoo_commands())
    logs = str(tmp_path / "logs")
    out = _check(
        _run([*train.split()[1:], "-n", "3000", "--seed", "0", "--eval-freq", "-1", "-f", logs], timeout=540),
        f"rl_zoo3.train --algo {algo}",
    )
    run_dir = tmp_path / "logs" / algo / "EDO-v0_1"
    assert (run_dir / "EDO-v0.zip").is_file(), out[-2000:]
    config = (run_dir / "EDO-v0" / "config.yml").read_text()
    assert "MultiInputPolicy" in config  # the shipped file's hyperparameters were used
    with zipfile.ZipFile(run_dir / "EDO-v0.zip") as saved:  # SB3's save format: the attributes as JSON in "data"
        assert json.loads(saved.read("data"))["num_timesteps"] >= 3000
    out = _check(_run([*enjoy.split()[1:], "-f", logs, "-n", "300"], timeout=300), f"rl_zoo3.enjoy --algo {algo}")
    assert re.search(r"\d+ Episodes", out), out[-2000:]

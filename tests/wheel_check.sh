#!/usr/bin/env bash
# `make wheel-check`: build the wheel, install it with constraints.txt into a fresh venv in a temporary directory
# outside the repository, and run the package from there with a cold embedding cache, as a new user would:
# gym.make("EDO-v0") (with and without `import edo_gym`), `edo demo`, `edo train --timesteps 2000`.
#
#   bash tests/wheel_check.sh [WORK_DIR]      # default WORK_DIR: a new temporary directory, removed on success
#
# BUILD_PYTHON (default .venv/bin/python) runs `python -m build`; BASE_PYTHON (default python3) makes the venv.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
build_python="${BUILD_PYTHON:-$repo/.venv/bin/python}"
base_python="${BASE_PYTHON:-python3}"
if [ $# -ge 1 ]; then
    work="$1"
    rm -rf "$work" && mkdir -p "$work"
    work="$(cd "$work" && pwd)"
    keep=1
else
    work="$(mktemp -d -t edo-wheel-check.XXXXXX)"
    keep=0
fi
case "$work/" in
    "$repo"/*) echo "wheel-check: WORK_DIR must lie outside the repository ($repo), got $work" >&2; exit 2 ;;
esac
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export EDO_GYM_CACHE_DIR="$work/cache"   # cold embedding cache: nothing carried over from the repository
t0=$(date +%s)
stamp() { echo "[wheel-check +$(($(date +%s) - t0)) s] $*"; }

stamp "building the wheel"
rm -rf "$work/dist"
"$build_python" -m build --wheel --outdir "$work/dist" "$repo" > "$work/build.log" 2>&1 || { tail -40 "$work/build.log"; exit 1; }
wheel="$(ls "$work"/dist/edo_gym-*.whl)"
stamp "built $(basename "$wheel")"

# Every file git tracks under the packages is in the wheel (modules and any package data).
"$build_python" - "$repo" "$wheel" <<'EOF'
import subprocess, sys, zipfile
repo, wheel = sys.argv[1], sys.argv[2]
tracked = subprocess.run(["git", "-C", repo, "ls-files", "edo_gym", "baselines"], capture_output=True, text=True, check=True)
expected = {p for p in tracked.stdout.split() if "/tests/" not in p}
missing = sorted(expected - set(zipfile.ZipFile(wheel).namelist()))
assert not missing, f"files missing from the wheel: {missing}"
print(f"wheel holds all {len(expected)} package files")
EOF

stamp "installing it into a fresh venv with -c constraints.txt"
"$base_python" -m venv "$work/venv"
{
    "$work/venv/bin/python" -m pip install --upgrade pip
    "$work/venv/bin/python" -m pip install -c "$repo/constraints.txt" "$wheel"
} > "$work/install.log" 2>&1 || { grep -v "^WARNING: Location" "$work/install.log" | tail -40; exit 1; }
stamp "installed"

mkdir -p "$work/run" && cd "$work/run"
"$work/venv/bin/python" - "$repo" <<'EOF'
import sys
import gymnasium as gym
import numpy as np

env = gym.make("edo_gym:EDO-v0")  # no import needed
import edo_gym

assert not edo_gym.__file__.startswith(sys.argv[1]), f"edo_gym imported from the repository: {edo_gym.__file__}"
env = gym.make("EDO-v0")
obs, info = env.reset(seed=0)
obs, reward, terminated, truncated, info = env.step(int(np.flatnonzero(obs["action_mask"])[0]))
assert env.observation_space.contains(obs)
print(f"gym.make('EDO-v0') from {edo_gym.__file__}: one step, reward {reward:.4f}")
EOF
stamp "gym.make ok"
"$work/venv/bin/edo" demo > "$work/demo.log" 2>&1 || { tail -40 "$work/demo.log"; exit 1; }
grep -A 7 "^Heuristic policies" "$work/demo.log"
stamp "edo demo ok"
"$work/venv/bin/edo" train --timesteps 2000 > "$work/train.log" 2>&1 || { tail -40 "$work/train.log"; exit 1; }
tail -4 "$work/train.log"
test -f runs/grpo_EDO-v0_0.zip
stamp "edo train ok: wheel check passed"

cd /
if [ "$keep" = 0 ]; then rm -rf "$work"; fi

"""The algorithms by name and their saved models: :data:`ALGOS`, :func:`algo_class`, :func:`infer_algo` and
:func:`load_model`.

Below both :mod:`baselines.training` (which builds and trains them) and :mod:`baselines.experience` (which records a
saved model's episodes), so that each imports it and neither imports the other's caller.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import gymnasium as gym
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.vec_env import VecEnv

from baselines.evaluation import check_model_env

#: Algorithms ``train`` knows, by name.
ALGOS: tuple[str, ...] = ("grpo", "gigpo", "ppo", "maskable_ppo")
#: The group-relative algorithms (no critic, groups of episodes).
GROUP_ALGOS: tuple[str, ...] = ("grpo", "gigpo")


def algo_class(algo: str) -> type[BaseAlgorithm]:
    """The Stable-Baselines3 class of the algorithm named ``algo`` (one of :data:`ALGOS`)."""
    if algo == "grpo":
        from baselines.grpo import GRPO

        return GRPO
    if algo == "gigpo":
        from baselines.grpo import GiGPO

        return GiGPO
    if algo == "ppo":
        from stable_baselines3 import PPO

        return PPO
    if algo == "maskable_ppo":
        from sb3_contrib import MaskablePPO

        return MaskablePPO
    raise ValueError(f"unknown algo {algo!r}; choose from {list(ALGOS)}")


def infer_algo(path: str | os.PathLike) -> str:
    """The algo name (``ALGOS``) of a model saved by SB3 (``model.save``), read from the zip's ``data`` entry."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no saved model at {path}")
    try:
        with zipfile.ZipFile(path) as archive:
            data = json.loads(archive.read("data").decode("utf-8"))
    except (OSError, KeyError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a model saved by Stable-Baselines3 ({exc}); pass algo= explicitly") from exc
    if "group_size" in data and "groups_per_rollout" in data:
        return "gigpo" if "step_advantage_weight" in data else "grpo"
    policy_module = str(data.get("policy_class", {}).get("__module__", ""))
    if policy_module.startswith("sb3_contrib.common.maskable"):
        return "maskable_ppo"
    if policy_module.startswith("stable_baselines3") and "n_steps" in data and "clip_range" in data:
        return "ppo"
    raise ValueError(f"cannot tell which algorithm saved {path} (policy module {policy_module!r}); pass algo= explicitly")


def load_model(
    path: str | os.PathLike, algo: str | None = None, device: str = "cpu", env: gym.Env | VecEnv | None = None
) -> BaseAlgorithm:
    """Load a saved model; ``algo=None`` infers the class from the zip (:func:`infer_algo`). With ``env``, the model
    is checked against (and bound to) it: a model saved for other observations (before the pointer-free view of
    EDO-Gym 0.3.0, say) raises a ``ValueError`` that says so."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no saved model at {path}")
    if algo is None:
        algo = infer_algo(path)
    if algo not in ALGOS:
        raise ValueError(f"unknown algo {algo!r}; choose from {list(ALGOS)}")
    model = algo_class(algo).load(path, device=device)
    if env is not None:
        check_model_env(model, env, f"the model at {path}")
        model.set_env(env)
    return model

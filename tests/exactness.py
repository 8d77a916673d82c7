"""Helpers of the exactness tests (tests/env/test_speed_options.py, tests/retrieval/): a seeded trajectory of random
legal steps, the comparison of two of them, and the torch thread scope the embedder runs its passes under."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import numpy as np

from edo_gym.retrieval.embedder import scoped_torch_threads


def model_threads(embedder: Any) -> Any:
    """The torch thread count the embedder runs its passes under: the references are computed under it too (on some
    CPUs, measured on an Intel Xeon, a pass under 2 torch threads differs from one under 1 in the last bits)."""
    return scoped_torch_threads(embedder.torch_threads)


def trajectory(env: gym.Env, steps: int, seed: int) -> list[Any]:
    """Observations, rewards and infos of ``steps`` seeded random legal steps (resetting at episode ends)."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    out: list[Any] = [obs, json.dumps(info, sort_keys=True, default=repr)]
    for _ in range(steps):
        legal = np.flatnonzero(info["action_mask"])
        obs, reward, terminated, truncated, info = env.step(int(legal[int(rng.random() * len(legal))]))
        out += [obs, reward, terminated, truncated, json.dumps(info, sort_keys=True, default=repr)]
        if terminated or truncated:
            obs, info = env.reset()
            out += [obs, json.dumps(info, sort_keys=True, default=repr)]
    return out


def assert_same(a: list[Any], b: list[Any], name: str) -> None:
    """Assert that two :func:`trajectory` lists are equal item by item (observations array by array); ``name`` says
    which comparison failed."""
    assert len(a) == len(b), name
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if isinstance(x, dict):
            assert x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x), f"{name}: observation {i} differs"
        else:
            assert x == y, f"{name}: item {i} differs: {x!r} != {y!r}"

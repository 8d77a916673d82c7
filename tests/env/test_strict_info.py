"""``info`` is safe for strict clients (Tianshou, RLlib, gymnasium's vector envs): plain values only.

The contract (DESIGN.md section 7): every value in ``info`` from ``reset`` and ``step``, recursively
through nested dicts, is a number, a bool, a string or a numpy array of a numeric/bool dtype -- never ``None``,
never an object, never NaN; a key has the same type (and, for arrays, dtype and shape) wherever it appears; a
key whose value is a string is present on every step (Tianshou's buffer fills the rows of a key that appears
late with ``None``). Episodes are driven by random legal and some illegal actions, on the simulated backend and
on one that fails a third of its calls, so that every branch of the env that writes ``info`` is covered.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from edo_gym.agents.backend import TransientBackendError
from edo_gym.agents.protocol import LLMRequest, LLMResponse
from edo_gym.agents.simulator import SimulatedBackend
from edo_gym.registration import VARIANTS

ENV_IDS = list(VARIANTS)


class _FlakyBackend:
    """The simulator, failing about ``rate`` of its calls in every way a remote model fails (seeded)."""

    def __init__(self, inner: SimulatedBackend, rate: float, seed: int) -> None:
        self.inner, self.rate, self.rng = inner, rate, np.random.default_rng(seed)

    def complete(self, request: LLMRequest) -> LLMResponse:
        if self.rng.random() < self.rate:
            fault = self.rng.integers(4)
            if fault == 0:
                raise TransientBackendError("429 Too Many Requests")
            if fault == 1:
                raise TimeoutError("read timed out")
            if fault == 2:
                raise RuntimeError("500 Internal Server Error")
            return LLMResponse(text=None)  # type: ignore[arg-type] - garbage: rejected by validation
        return self.inner.complete(request)


def _leaves(info: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``("a/b", value)`` for every non-dict value of a nested ``info`` dict."""
    for key, value in info.items():
        assert isinstance(key, str), f"info key {prefix}{key!r} is not a string"
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}/")
        else:
            yield f"{prefix}{key}", value


def _kind(value: Any) -> tuple:
    """The type of a plain info value, or raise ``TypeError`` for anything a strict client cannot store."""
    if isinstance(value, bool | np.bool_):
        return ("bool",)
    if isinstance(value, int | np.integer):
        return ("int",)
    if isinstance(value, float | np.floating):
        if not math.isfinite(value):
            raise TypeError(f"non-finite float {value!r}")
        return ("float",)
    if isinstance(value, str):
        return ("str",)
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise TypeError(f"array of dtype {value.dtype} (only bool, integer and float arrays are plain)")
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            raise TypeError("array with NaN or inf")
        return ("ndarray", value.dtype.str, value.shape)
    raise TypeError(f"{type(value).__name__} {value!r}")


def _episode_infos(env: gym.Env, seed: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    """``info`` of the reset and of every step of one episode of random legal (and a few illegal) actions."""
    obs, info = env.reset(seed=seed)
    infos = [info]
    done = False
    while not done:
        mask = obs["action_mask"]
        illegal = np.flatnonzero(mask == 0)
        if len(illegal) and rng.random() < 0.1:
            action = int(rng.choice(illegal))
        else:
            legal = np.flatnonzero(mask)
            submit = env.unwrapped.A_SUBMIT
            preferred = [a for a in legal if a != submit] if rng.random() > 0.15 else list(legal)
            action = int(rng.choice(preferred or legal))
        obs, _, terminated, truncated, info = env.step(action)
        infos.append(info)
        done = terminated or truncated
    return infos


def _collect(env: gym.Env, episodes: int = 6, seed: int = 0) -> list[list[dict[str, Any]]]:
    rng = np.random.default_rng(seed)
    return [_episode_infos(env, seed + k, rng) for k in range(episodes)]


@pytest.fixture(scope="module")
def faulty_env() -> Iterator[gym.Env]:
    """EDO-v0 on a backend that fails about a third of its planner, worker and verifier calls (all fault kinds)."""
    import edo_gym  # noqa: F401

    probe = gym.make("EDO-v0").unwrapped
    cfg = probe.config
    backend = _FlakyBackend(SimulatedBackend(probe.world, cfg.workers, cfg.planner, probe.pool.tasks), rate=0.35, seed=7)
    probe.close()
    env = gym.make("EDO-v0", backend=backend)
    yield env
    env.close()


def _check_plain_and_consistent(episodes: list[list[dict[str, Any]]]) -> None:
    problems: dict[str, list[str]] = {}  # problem -> where it occurred
    kinds: dict[str, tuple] = {}
    for e, infos in enumerate(episodes):
        for t, info in enumerate(infos):
            where = f"episode {e} " + ("reset" if t == 0 else f"step {t}")
            for key, value in _leaves(info):
                try:
                    kind = _kind(value)
                except TypeError as exc:
                    problems.setdefault(f"info[{key!r}] is not plain: {exc}", []).append(where)
                    continue
                if kinds.setdefault(key, kind) != kind:
                    problems.setdefault(f"info[{key!r}] is {kind} here, {kinds[key]} elsewhere", []).append(where)
    total = sum(len(infos) for infos in episodes)
    report = [f"{p} ({len(w)} of {total} infos, first at {w[0]})" for p, w in problems.items()]
    assert not report, "\n".join(report)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_info_values_are_plain_and_keep_their_type(make_env, env_id):
    _check_plain_and_consistent(_collect(make_env(env_id)))


def test_info_values_are_plain_and_keep_their_type_when_calls_fail(faulty_env):
    episodes = _collect(faulty_env, episodes=8, seed=50)
    failed = [info for infos in episodes for info in infos[1:] if info.get("call_failed")]
    assert failed, "the faulty backend failed no call: the failure branch was not covered"
    _check_plain_and_consistent(episodes)


# ================================================================================================ Tianshou
def _tianshou_like_store(step_infos: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Stack step infos as Tianshou 2's ``ReplayBuffer`` does (``tianshou.data.batch.create_value``): one array
    per leaf key, allocated when the key first appears, with rows the key was absent from left at 0 for numbers
    and bools and at ``None`` for anything else."""
    columns: dict[str, np.ndarray] = {}
    n = len(step_infos)
    for row, info in enumerate(step_infos):
        for key, value in _leaves(info):
            if key not in columns:
                probe = np.asarray(value)
                if probe.dtype.kind in "biuf":
                    columns[key] = np.zeros((n, *probe.shape), dtype=probe.dtype)
                else:
                    columns[key] = np.full(n, None, dtype=object)
            columns[key][row] = value
    return columns


def _nulls(columns: dict[str, np.ndarray]) -> dict[str, int]:
    """Per key, how many entries ``pandas.isnull`` (Tianshou's ``Batch.hasnull``) would flag: ``None`` or NaN."""
    out = {}
    for key, col in columns.items():
        if col.dtype == object:
            bad = sum(v is None or (isinstance(v, float) and math.isnan(v)) for v in col)
        elif col.dtype.kind == "f":
            bad = int(np.isnan(col).sum())
        else:
            bad = 0
        if bad:
            out[key] = bad
    return out


def test_infos_stored_tianshou_style_hold_no_none_or_nan(make_env, faulty_env):
    steps = [info for env in (make_env("EDO-v0"), faulty_env) for infos in _collect(env, 5, 20) for info in infos[1:]]
    assert not _nulls(_tianshou_like_store(steps))


def test_infos_in_a_real_tianshou_buffer_hold_no_null(make_env, faulty_env):
    """The same through Tianshou's own ``ReplayBuffer`` and ``hasnull`` (where Tianshou is installed: make test-compat)."""
    data = pytest.importorskip("tianshou.data")
    steps = [info for env in (make_env("EDO-v0"), faulty_env) for infos in _collect(env, 3, 30) for info in infos[1:]]
    buffer = data.ReplayBuffer(size=len(steps))
    obs = np.zeros(1, dtype=np.float32)
    for info in steps:
        buffer.add(data.Batch(obs=obs, act=0, rew=0.0, terminated=False, truncated=False, obs_next=obs, info=data.Batch(info)))
    null_counts = dict(_leaves(buffer.isnull().apply_values_transform(np.sum).to_dict(recursive=True)))
    assert not buffer.hasnull(), {key: int(n) for key, n in null_counts.items() if n}


# ================================================================================================ gymnasium.vector
def test_infos_round_trip_through_vector_info_stacking(make_env):
    """``SyncVectorEnv`` stacks the sub-envs' infos into arrays with ``_key`` masks; unstacking gives them back
    with their values and types, up to and including the step that ends the first episode."""
    vec = gym.vector.SyncVectorEnv([lambda: gym.make("EDO-v0")] * 2)
    singles = [make_env("EDO-v0"), make_env("EDO-v0")]
    rng = np.random.default_rng(3)
    try:
        obs, vinfo = vec.reset(seed=[5, 6])
        expected = [single.reset(seed=5 + i)[1] for i, single in enumerate(singles)]
        done, steps = False, 0
        while not done:
            _assert_unstacks_to(vinfo, expected)
            actions = [int(rng.choice(np.flatnonzero(obs["action_mask"][i]))) for i in range(2)]
            obs, _, terminated, truncated, vinfo = vec.step(np.array(actions))
            expected = [single.step(a)[4] for single, a in zip(singles, actions, strict=True)]
            done, steps = bool(terminated.any() or truncated.any()), steps + 1
        _assert_unstacks_to(vinfo, expected)  # the step that ended an episode, with its episode_stats
        assert steps > 2
    finally:
        vec.close()


def _assert_unstacks_to(vinfo: dict[str, Any], expected: list[dict[str, Any]], path: str = "") -> None:
    for i, info in enumerate(expected):
        for key, value in info.items():
            assert vinfo[f"_{key}"][i], f"{path}{key} missing for env {i}"
            if isinstance(value, dict):
                _assert_unstacks_to(vinfo[key], [value if j == i else {} for j in range(len(expected))], f"{path}{key}/")
                continue
            stacked = vinfo[key][i]
            if isinstance(value, np.ndarray):
                assert vinfo[key].dtype == value.dtype, f"{path}{key}: stacked as {vinfo[key].dtype}, was {value.dtype}"
                np.testing.assert_array_equal(stacked, value)
            else:
                assert vinfo[key].dtype != object or isinstance(value, str), f"{path}{key}={value!r} stacked as objects"
                assert stacked == value and _kind(stacked) == _kind(value), f"{path}{key}: {stacked!r} != {value!r}"

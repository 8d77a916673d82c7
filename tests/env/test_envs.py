"""Every registered EDO id against the Gymnasium and SB3 API contracts, in the style of Minigrid's test_envs.py.

Per id: both env checkers (with an explicit warning allow-list), two-env determinism, pickling, sync and async
vector envs, the reward breakdown, and the action masks. Then the API edges of ``EDOEnv``: reset options, step
order, malformed actions, ``illegal_action="raise"``, rendering, construction in a fresh process and SB3
``SubprocVecEnv`` with the ``spawn`` and ``forkserver`` start methods.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import pickle
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from gymnasium.utils.env_checker import data_equivalence
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from baselines.heuristics import GreedyRouter, OraclePolicy
from edo_gym.envs.edo_env import EDOEnv
from edo_gym.registration import VARIANTS

ENV_IDS = list(VARIANTS)

#: Warning-message substrings gymnasium's ``check_env`` may emit on an EDO env. None is acceptable: the env is
#: a plain ``gym.Env`` with Box spaces in [0, 1]/[-1, 1], seeded resets and both declared render modes.
GYM_CHECK_ENV_ALLOWED: tuple[str, ...] = ()

#: SB3's ``check_env`` warns once per Box observation that is neither 1-D nor image-shaped. EDO's ``subtasks``
#: ``(S, 25)``, ``workers`` ``(W, 18)`` and ``history`` ``(H, A)`` are 2-D tables by design (one row per plan
#: step / worker / past action, documented in ``edo_gym/envs/observation.py``); SB3's ``MultiInputPolicy``
#: (``CombinedExtractor``) flattens them, so the warning is advisory. Allowed per key, so that a *new* 2-D key
#: (or any other SB3 warning, e.g. about the action space or the reset) still fails.
SB3_CHECK_ENV_ALLOWED: tuple[str, ...] = tuple(
    f"Your observation {key} has an unconventional shape (neither an image, nor a 1D vector)"
    for key in ("subtasks", "workers", "history", "tried", "step_text")
)


def _unexpected_warnings(records: list[warnings.WarningMessage], allowed: tuple[str, ...]) -> list[str]:
    return [
        f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})"
        for w in records
        if not any(fragment in str(w.message) for fragment in allowed)
    ]


def random_legal_action(mask: np.ndarray, rng: np.random.Generator, exclude: tuple[int, ...] = ()) -> int:
    """A uniformly random action with ``mask == 1``, avoiding ``exclude`` when something else is legal."""
    legal = [int(a) for a in np.flatnonzero(mask)]
    preferred = [a for a in legal if a not in exclude]
    return int(rng.choice(preferred or legal))


def _explore(obs: dict[str, np.ndarray], env: gym.Env, rng: np.random.Generator, submit_p: float = 0.1) -> int:
    """A random legal action that submits only with probability ``submit_p`` (or when nothing else is legal)."""
    submit = env.unwrapped.A_SUBMIT
    if rng.random() < submit_p:
        return random_legal_action(obs["action_mask"], rng)
    return random_legal_action(obs["action_mask"], rng, exclude=(submit,))


def _pick(mask: np.ndarray, t: int) -> int:
    """Deterministic legal-action rule shared with the subprocess scripts (0 when nothing is legal)."""
    legal = np.flatnonzero(np.asarray(mask))
    return int(legal[(7 * t + 3) % len(legal)]) if len(legal) else 0


def _trajectory_digest(env: Any, seeds: tuple[int, ...] = (0, 1, 2), max_steps: int = 40) -> str:
    """SHA-256 of observations and rewards of episodes driven by ``_pick`` (also run in subprocesses)."""
    h = hashlib.sha256()
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        for t in range(max_steps):
            obs, reward, terminated, truncated, _ = env.step(_pick(obs["action_mask"], t))
            for key in sorted(obs):
                h.update(key.encode())
                h.update(np.ascontiguousarray(obs[key]).tobytes())
            h.update(repr(float(reward)).encode())
            if terminated or truncated:
                break
    return h.hexdigest()


def _rollout(env: gym.Env, seed: int, action_seed: int, episodes: int = 2) -> list[Any]:
    """Everything ``reset``/``step`` returned over ``episodes`` episodes of seeded random legal actions."""
    rng = np.random.default_rng(action_seed)
    out: list[Any] = []
    for k in range(episodes):
        obs, info = env.reset(seed=seed + k)
        out.append((obs, info))
        done = False
        while not done:
            step = env.step(_explore(obs, env, rng))
            out.append(step)
            obs, done = step[0], step[2] or step[3]
    return out


# ================================================================================================ env checkers
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_check_env(make_env, env_id):
    env = make_env(env_id)
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        gym_check_env(env.unwrapped)
    assert not _unexpected_warnings(records, GYM_CHECK_ENV_ALLOWED)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_sb3_check_env(make_env, env_id):
    env = make_env(env_id)
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        sb3_check_env(env.unwrapped, warn=True)
    assert not _unexpected_warnings(records, SB3_CHECK_ENV_ALLOWED)


# ================================================================================================ determinism
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_two_envs_same_seed_same_actions_identical(make_env, env_id):
    env_a, env_b = make_env(env_id), make_env(env_id)
    rng = np.random.default_rng(0)
    steps = 0
    for seed in (0, 1, 2):
        obs_a, info_a = env_a.reset(seed=seed)
        obs_b, info_b = env_b.reset(seed=seed)
        assert data_equivalence((obs_a, info_a), (obs_b, info_b), exact=True)
        done = False
        while not done:
            action = _explore(obs_a, env_a, rng)
            out_a, out_b = env_a.step(action), env_b.step(action)
            assert data_equivalence(out_a, out_b, exact=True), f"seed {seed}, step {steps}: {out_a} != {out_b}"
            obs_a, done = out_a[0], out_a[2] or out_a[3]
            steps += 1
        assert repr(env_a.unwrapped.episode.trace) == repr(env_b.unwrapped.episode.trace)
    assert steps > 6  # the comparison was not vacuous


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_pickle_round_trip(make_env, env_id):
    env = make_env(env_id)
    env.reset(seed=3)
    env.step(_pick(env.unwrapped.action_masks(), 0))
    clone = pickle.loads(pickle.dumps(env))
    try:
        assert data_equivalence(_rollout(env, seed=11, action_seed=4), _rollout(clone, seed=11, action_seed=4), exact=True)
    finally:
        clone.close()


@pytest.mark.slow
def test_pickled_env_replays_in_a_fresh_process(make_env, run_python, tmp_path):
    """An env pickled here and unpickled in a new process (which builds its own retrieval service) behaves the same."""
    env = make_env("EDO-v0")
    env.reset(seed=0)
    path = tmp_path / "env.pkl"
    path.write_bytes(pickle.dumps(env))
    script = "\n".join(
        [
            "import hashlib, pickle",
            "from typing import Any",
            "import numpy as np",
            inspect.getsource(_pick),
            inspect.getsource(_trajectory_digest),
            f"env = pickle.loads(open({str(path)!r}, 'rb').read())",
            'print("DIGEST", _trajectory_digest(env))',
        ]
    )
    proc = run_python(script, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("DIGEST ", 1)[1].strip() == _trajectory_digest(env)


# ================================================================================================ vector envs
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_make_vec_sync_steps_and_matches_single_envs(make_env, env_id):
    vec = gym.make_vec(env_id, num_envs=2, vectorization_mode="sync")
    singles = [make_env(env_id), make_env(env_id)]
    try:
        obs, _ = vec.reset(seed=10)
        for i, single in enumerate(singles):  # reset(seed=10) seeds sub-env i with 10 + i
            assert data_equivalence({k: v[i] for k, v in obs.items()}, single.reset(seed=10 + i)[0], exact=True)
        alive = [True, True]
        for t in range(12):
            actions = np.array([_pick(obs["action_mask"][i], t) for i in range(2)])
            obs, rewards, terminated, truncated, _ = vec.step(actions)
            assert vec.observation_space.contains(obs)
            assert np.isfinite(rewards).all()
            for i, single in enumerate(singles):
                if not alive[i]:
                    continue
                s_obs, s_reward, s_term, s_trunc, _ = single.step(int(actions[i]))
                assert data_equivalence({k: v[i] for k, v in obs.items()}, s_obs, exact=True)
                assert rewards[i] == s_reward and terminated[i] == s_term and truncated[i] == s_trunc
                alive[i] = not (s_term or s_trunc)
    finally:
        vec.close()


_ASYNC_SCRIPT = """
import json
import numpy as np
import gymnasium as gym
import edo_gym  # registers the ids
{pick}
if __name__ == "__main__":
    kwargs = {{}} if {context!r} is None else {{"vector_kwargs": {{"context": {context!r}}}}}
    vec = gym.make_vec({env_id!r}, num_envs=2, vectorization_mode="async", **kwargs)
    obs, infos = vec.reset(seed=10)
    rewards = []
    for t in range(8):
        actions = np.array([_pick(m, t) for m in obs["action_mask"]])
        obs, r, terminated, truncated, infos = vec.step(actions)
        rewards.append([float(x) for x in r])
    contains = bool(vec.observation_space.contains(obs))
    vec.close()
    print("RESULT " + json.dumps({{"rewards": rewards, "contains": contains}}))
"""

_ASYNC_CASES = [
    pytest.param("EDO-v0", None, id="EDO-v0-default-context"),
    pytest.param("EDO-v0", "forkserver", id="EDO-v0-forkserver", marks=pytest.mark.slow),
] + [pytest.param(env_id, None, id=f"{env_id}-default-context", marks=pytest.mark.slow) for env_id in ENV_IDS[1:]]


@pytest.mark.parametrize(("env_id", "context"), _ASYNC_CASES)
def test_make_vec_async_steps_and_matches_sync(run_python, env_id, context):
    """``gym.make_vec(..., "async")`` in a fresh process (a hang is killed with the whole process group)."""
    script = _ASYNC_SCRIPT.format(pick=inspect.getsource(_pick), context=context, env_id=env_id)
    proc = run_python(script, timeout=90)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert result["contains"]
    sync = gym.make_vec(env_id, num_envs=2, vectorization_mode="sync")
    try:
        obs, _ = sync.reset(seed=10)
        expected = []
        for t in range(8):
            obs, r, _, _, _ = sync.step(np.array([_pick(m, t) for m in obs["action_mask"]]))
            expected.append([float(x) for x in r])
    finally:
        sync.close()
    assert result["rewards"] == expected


@pytest.mark.timeout(240)
@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_sb3_subproc_vec_env_builds_and_steps(start_method):
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    vec = SubprocVecEnv([lambda: gym.make("edo_gym:EDO-v0")] * 2, start_method=start_method)
    ref = DummyVecEnv([lambda: gym.make("edo_gym:EDO-v0")] * 2)
    try:
        vec.seed(3)
        ref.seed(3)
        obs, ref_obs = vec.reset(), ref.reset()
        assert data_equivalence(dict(obs), dict(ref_obs), exact=True)  # SubprocVecEnv returns an OrderedDict
        for t in range(10):
            actions = np.array([_pick(m, t) for m in obs["action_mask"]])
            obs, rewards, dones, _ = vec.step(actions)
            ref_obs, ref_rewards, ref_dones, _ = ref.step(actions)
            assert data_equivalence(dict(obs), dict(ref_obs), exact=True)
            np.testing.assert_allclose(rewards, ref_rewards, rtol=1e-6)  # DummyVecEnv stores rewards as float32
            np.testing.assert_array_equal(dones, ref_dones)
    finally:
        vec.close()
        ref.close()


def test_make_in_fresh_subprocess_matches_this_process(run_python, make_env):
    """``gym.make("edo_gym:EDO-v0")`` needs no prior import, and a new process replays the same trajectories."""
    script = "\n".join(
        [
            "import hashlib",
            "from typing import Any",
            "import numpy as np",
            "import gymnasium as gym",
            inspect.getsource(_pick),
            inspect.getsource(_trajectory_digest),
            'env = gym.make("edo_gym:EDO-v0")',
            'print("DIGEST", _trajectory_digest(env))',
        ]
    )
    proc = run_python(script, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    digest = proc.stdout.split("DIGEST ", 1)[1].strip()
    assert digest == _trajectory_digest(make_env("EDO-v0"))


# ================================================================================================ reward and masks
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reward_terms_sum_to_reward(make_env, env_id):
    env = make_env(env_id)
    base: EDOEnv = env.unwrapped
    rng = np.random.default_rng(5)
    policies = [None, GreedyRouter(), OraclePolicy()]  # None = random legal; the router also adds overhead cost
    nonzero: set[str] = set()
    steps = 0
    for episode in range(9):
        policy = policies[episode % 3]
        obs, info = env.reset(seed=100 + episode)
        if policy is not None:
            policy.reset(obs, info)
        done = False
        while not done:
            if policy is None:
                action = _explore(obs, env, rng)
            elif policy.uses_hidden_state:
                action = policy.act_hidden(obs, info, base.hidden_state())
            else:
                base.charge(*policy.decision_cost)  # the router pays for its decisions, through the public call
                action = policy.act(obs, info)
            obs, reward, terminated, truncated, info = env.step(action)
            assert not info["illegal_action"]
            terms = info["reward_terms"]
            assert abs(sum(terms.values()) - reward) <= 1e-6, (terms, reward)
            nonzero |= {k for k, v in terms.items() if v != 0}
            done = terminated or truncated
            steps += 1
    assert steps >= 27  # at least three steps per episode were checked
    assert {"success", "tokens", "calls", "latency"} <= nonzero  # every cost term was exercised


def _sample_states(env: gym.Env, n: int, rng: np.random.Generator) -> list[tuple[int, list[int]]]:
    """``(seed, action prefix)`` of ``n`` random reachable, non-terminal states: a fresh reset, then alternately
    random dispatch-heavy prefixes and prefixes that run every plan step (so that states where dispatches are
    masked occur) mixed with up to two random other actions."""
    base: EDOEnv = env.unwrapped
    limit = base.step_limit // 2
    states: list[tuple[int, list[int]]] = [(int(rng.integers(1_000_000)), [])]
    while len(states) < n:
        complete_plan = len(states) % 2 == 0
        seed = int(rng.integers(1_000_000))
        obs, _ = env.reset(seed=seed)
        prefix: list[int] = []
        extra = int(rng.integers(0, 3)) if complete_plan else int(rng.integers(1, limit))
        ended = False
        while len(prefix) < limit:
            mask = obs["action_mask"]
            dispatches = np.flatnonzero(mask[: base.n_dispatch])
            if complete_plan and len(dispatches):
                action = int(rng.choice(dispatches))
            elif extra == 0:
                break
            else:
                extra -= 1
                if len(dispatches) and rng.random() < 0.7:
                    action = int(rng.choice(dispatches))
                else:
                    action = random_legal_action(mask, rng, exclude=(base.A_SUBMIT,))
                if action == base.A_SUBMIT:
                    break
            obs, _, terminated, truncated, _ = env.step(action)
            prefix.append(action)
            if terminated or truncated:
                ended = True
                break
        if not ended:
            states.append((seed, prefix))
    return states


def _replay(env: gym.Env, seed: int, prefix: list[int]) -> dict[str, np.ndarray]:
    obs, _ = env.reset(seed=seed)
    for action in prefix:
        obs, _, terminated, truncated, info = env.step(action)
        assert not info["illegal_action"] and not (terminated or truncated)
    return obs


def test_is_success_is_the_episode_outcome_at_its_end(make_env):
    """SB3's convention: ``info["is_success"]`` is False while an episode runs and its outcome once it ends."""
    env = make_env("EDO-v0")
    base: EDOEnv = env.unwrapped
    outcomes = []
    # the oracle solves about four tasks in five of the default distribution (some are out of every worker's reach):
    # three tries of it, each followed by an episode that submits at once
    for episode, policy in enumerate([OraclePolicy(), None] * 3):
        obs, info = env.reset(seed=200 + episode)
        if policy is not None:
            policy.reset(obs, info)
        done = False
        while not done:
            action = base.A_SUBMIT if policy is None else policy.act_hidden(obs, info, base.hidden_state())
            obs, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            assert type(info["is_success"]) is bool
            assert info["is_success"] == (done and info["episode_stats"]["success"])
        outcomes.append(info["is_success"])
    assert outcomes[1::2] == [False] * 3 and True in outcomes[::2]  # submitting at once fails


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_mask_admits_only_legal_actions(make_env, env_id):
    env = make_env(env_id)
    base: EDOEnv = env.unwrapped
    tested: set[int] = set()
    for seed, prefix in _sample_states(env, 8, np.random.default_rng(1)):
        obs = _replay(env, seed, prefix)
        np.testing.assert_array_equal(base.action_masks(), obs["action_mask"] > 0)
        for action in np.flatnonzero(obs["action_mask"]):
            again = _replay(env, seed, prefix)
            assert data_equivalence(again, obs, exact=True)  # the replay reached the same state
            _, _, _, _, info = env.step(int(action))
            assert info["illegal_action"] is False, (seed, prefix, int(action))
            assert info["event"] == base.decode_action(int(action))[0]
            tested.add(int(action))
    assert {base.A_SUBMIT, base.A_ROLLBACK} <= tested
    assert (base.A_REPLAN in tested) == base.config.enable_replan  # EDO-Small-v0 plans by rules: replan is never legal
    assert tested & set(range(base.A_VERIFY, base.A_VERIFY + len(base.workers)))  # some verify(w)
    assert tested & set(range(base.n_dispatch))
    # verify_plan(w) (with enable_plan_review) is legal in every state before a worker critiqued the plan
    reviews = set(range(base.A_VERIFY_PLAN, base.A_ROLLBACK))
    assert bool(tested & reviews) == base.config.enable_plan_review


def _documented_mask(base: EDOEnv) -> np.ndarray:
    """The legality rules of the ``EDOEnv`` docstring, written independently of ``EDOEnv._mask``."""
    mask = np.zeros(base.n_actions, dtype=bool)
    if any(
        r is None for r in base.episode.plan.results
    ):  # a plan step without a result: dispatch it (retrieval needs a shard)
        for a in range(base.n_dispatch):
            _, w, retrieve = base.decode_action(a)
            mask[a] = not retrieve or base.workers[w].retriever.size > 0
    if base.episode.plan.done_stack:  # a last result exists: it can be rolled back, and verified once by each worker
        mask[base.A_ROLLBACK] = True
        for w in range(len(base.workers)):
            mask[base.A_VERIFY + w] = (
                base.config.enable_verify and w not in base.episode.plan.verified_by[base.episode.plan.done_stack[-1]]
            )
    if base.config.enable_plan_review:  # the plan as written may be critiqued once by each worker (a replan: again)
        for w in range(len(base.workers)):
            mask[base.A_VERIFY_PLAN + w] = w not in base.episode.plan.reviewed_by
    mask[base.A_REPLAN] = base.config.enable_replan and base.episode.replans < base.config.max_replans
    mask[base.A_SUBMIT] = True
    return mask


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_mask_follows_the_documented_rules(make_env, env_id):
    env = make_env(env_id)
    base: EDOEnv = env.unwrapped
    seen = np.zeros(base.n_actions, dtype=int)
    for seed, prefix in _sample_states(env, 8, np.random.default_rng(3)):
        obs, _ = env.reset(seed=seed)
        for action in [*prefix, None]:
            np.testing.assert_array_equal(obs["action_mask"] > 0, _documented_mask(base), err_msg=f"{seed} {prefix}")
            seen += obs["action_mask"] == 0
            if action is not None:
                obs = env.step(action)[0]
    verifies = seen[base.A_VERIFY : base.A_VERIFY + len(base.workers)]
    assert verifies.any() and seen[base.A_ROLLBACK] and seen[: base.n_dispatch].any()


def _hidden_but_the_clock(base: EDOEnv) -> str:
    """``hidden_state()`` as text, less what the step counter alone decides: whether the episode's drift is in force
    (it starts at an env step, and an illegal action is a step). That flag is checked against its onset here."""
    hidden = base.hidden_state()
    drift = hidden["deviations"]["drift"]
    if drift is not None:
        assert drift.pop("active") == (base.episode.steps >= drift["onset"])
    return repr(hidden)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_masked_actions_are_illegal_and_change_nothing(make_env, env_id):
    env = make_env(env_id)
    base: EDOEnv = env.unwrapped
    penalty = base.config.reward.illegal_action_penalty
    tested: set[int] = set()
    for seed, prefix in _sample_states(env, 8, np.random.default_rng(2)):
        obs = _replay(env, seed, prefix)
        for action in np.flatnonzero(obs["action_mask"] == 0):
            before = _replay(env, seed, prefix)
            plan, results, verdicts = (
                base.episode.plan,
                list(base.episode.plan.results),
                [list(v) for v in base.episode.plan.verdicts],
            )
            hidden, rng_state = _hidden_but_the_clock(base), base.np_random.bit_generator.state
            # the planner's call at reset is charged on the first step, illegal or not
            pending = base.episode.pending
            ledger = (
                base.episode.tokens + pending.tokens,
                base.episode.calls + pending.calls,
                base.episode.latency_s + pending.latency_s,
                base.episode.replans,
            )
            after, reward, terminated, truncated, info = env.step(int(action))
            assert info["illegal_action"] is True, (seed, prefix, int(action))
            assert not terminated and not truncated
            costs = sum(info["reward_terms"][k] for k in ("tokens", "calls", "latency"))
            assert info["reward_terms"]["illegal"] == pytest.approx(-penalty) and info["reward_terms"]["success"] == 0
            assert reward == pytest.approx(-penalty + costs)
            assert costs == 0 or not prefix
            for key in ("task", "plan", "subtasks", "workers", "action_mask"):
                np.testing.assert_array_equal(after[key], before[key], err_msg=key)
            if prefix:
                np.testing.assert_array_equal(after["budget"][:3], before["budget"][:3])  # tokens, calls, latency
            assert after["budget"][3] > before["budget"][3]  # the step counter moved
            assert (
                base.episode.plan is plan and base.episode.plan.results == results and base.episode.plan.verdicts == verdicts
            )
            assert (base.episode.tokens, base.episode.calls, base.episode.latency_s, base.episode.replans) == pytest.approx(
                ledger
            )
            assert _hidden_but_the_clock(base) == hidden and base.np_random.bit_generator.state == rng_state
            tested.add(int(action))
    assert base.A_ROLLBACK in tested and tested & set(range(base.A_VERIFY, base.A_VERIFY + len(base.workers)))
    assert tested & set(range(base.n_dispatch))  # states with every step done were reached


# ================================================================================================ API edges
def test_reset_task_id_selects_that_task(make_env):
    env = make_env()
    base: EDOEnv = env.unwrapped
    _, info = env.reset(seed=0)
    task_id, text = info["task_id"], base.episode.task.text
    for seed in (1, 2, None):
        _, info = env.reset(seed=seed, options={"task_id": task_id})
        assert info["task_id"] == task_id and base.episode.task.text == text
    _, info = env.reset(seed=0, options={"task_id": (task_id + 1) % base.num_tasks})
    assert base.episode.task.text != text


def test_reset_unknown_option_raises(make_env):
    env = make_env()
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(seed=0, options={"task": 3})


@pytest.mark.parametrize("task_id", [-1, "num_tasks", 10**9])
def test_reset_out_of_range_task_id_raises(make_env, task_id):
    env = make_env()
    if task_id == "num_tasks":
        task_id = env.unwrapped.num_tasks
    with pytest.raises(ValueError, match="task_id"):
        env.reset(seed=0, options={"task_id": task_id})


def test_step_before_reset_raises(make_env):
    base: EDOEnv = make_env().unwrapped
    with pytest.raises(RuntimeError, match=r"before reset\(\)"):
        base.step(0)


@pytest.mark.parametrize("ending", ["terminated", "truncated"])
def test_step_after_episode_end_raises(make_env, ending):
    env = make_env(max_steps=1) if ending == "truncated" else make_env()
    base: EDOEnv = env.unwrapped
    obs, _ = env.reset(seed=0)
    action = base.A_SUBMIT if ending == "terminated" else int(np.flatnonzero(obs["action_mask"])[0])
    _, _, terminated, truncated, _ = env.step(action)
    assert (terminated, truncated) == ((True, False) if ending == "terminated" else (False, True))
    with pytest.raises(RuntimeError, match="episode ended"):
        env.step(base.A_SUBMIT)


@pytest.mark.parametrize(
    "action",
    ["n_actions", -1, 1.5, np.array([0, 1]), "1", None, True, np.float32(2.0)],
    ids=["n_actions", "minus_one", "float", "array_of_2", "str", "None", "bool", "np_float"],
)
def test_out_of_range_or_malformed_action_raises(make_env, action):
    env = make_env()
    base: EDOEnv = env.unwrapped
    env.reset(seed=0)
    if isinstance(action, str) and action == "n_actions":
        action = base.n_actions
    with pytest.raises(ValueError, match="action"):
        base.step(action)
    assert base.episode.steps == 0 and base.episode.tokens == 0  # nothing happened


def test_illegal_action_raise_mode(make_env):
    env = make_env(illegal_action="raise")
    base: EDOEnv = env.unwrapped
    obs, _ = env.reset(seed=0)
    assert obs["action_mask"][base.A_VERIFY] == 0  # nothing to verify yet
    with pytest.raises(ValueError, match="illegal action"):
        env.step(base.A_VERIFY)
    assert base.episode.steps == 0 and base.episode.illegal_actions == 0


# ================================================================================================ render
def test_render_ansi_returns_the_trace(make_env):
    env = make_env(render_mode="ansi")
    base: EDOEnv = env.unwrapped
    obs, _ = env.reset(seed=0)
    text = env.render()
    assert isinstance(text, str) and base.episode.task.text in text
    env.step(int(np.flatnonzero(obs["action_mask"][: base.n_dispatch])[0]))
    text = env.render()
    assert "dispatch" in text and "submit" not in text
    env.step(base.A_SUBMIT)
    assert "submit" in env.render()


def test_render_human_prints(make_env, capsys):
    env = make_env(render_mode="human")
    env.reset(seed=0)
    capsys.readouterr()
    assert env.render() is None
    assert env.unwrapped.episode.task.text in capsys.readouterr().out


def test_returned_arrays_are_fresh_and_writable(make_env):
    """Observations, info masks and ``action_masks()`` are new writable arrays: writing into them changes nothing the
    env returns next (masks and observation parts are memoised or kept inside the env)."""
    env = make_env("EDO-v0")
    base: EDOEnv = env.unwrapped
    obs, info = env.reset(seed=0)
    expected_mask = base.action_masks().copy()
    expected_obs = {k: v.copy() for k, v in obs.items()}
    for array in [base.action_masks(), info["action_mask"], *obs.values()]:
        assert array.flags.writeable
        array[...] = 1
    np.testing.assert_array_equal(base.action_masks(), expected_mask)
    again, _ = env.reset(seed=0)
    assert data_equivalence(again, expected_obs, exact=True)

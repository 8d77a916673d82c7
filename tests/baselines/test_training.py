"""Tests of the baselines.training package and the `edo train` / `edo evaluate` commands (tiny budgets)."""

import json
import os
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch as th  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

from baselines.cli import build_parser, main  # noqa: E402
from baselines.grpo.wrappers import GroupStartWrapper  # noqa: E402
from baselines.heuristics import HEURISTICS  # noqa: E402
from baselines.training import (  # noqa: E402
    ALGOS,
    FreshInfoDummyVecEnv,
    RecordedStepsProgressBar,
    TrainConfig,
    TrainResult,
    evaluate_saved,
    format_time_breakdown,
    infer_algo,
    load_model,
    make_algo,
    make_train_env,
    settings_for,
    train,
)

th.set_num_threads(1)

TINY = dict(total_timesteps=64, n_envs=2, batch_size=32, n_epochs=1, net_arch=[16], eval_episodes=4, progress_bar=False)
#: Each algorithm's own part of a tiny run: GRPO groups of 2, PPO rollouts of 32 steps per env.
TINY_BY_ALGO = dict(group_size=2, groups_per_rollout=2, n_steps=32)


def tiny(algo: str = "grpo", **overrides: Any) -> dict[str, Any]:
    """A tiny run's settings for ``algo`` (TrainConfig refuses another algorithm's settings), with ``overrides``."""
    return {**TINY, **settings_for(algo, TINY_BY_ALGO), **overrides}


# ----------------------------------------------------------------------------- TrainConfig
def test_default_config_is_valid_grpo_on_edo():
    cfg = TrainConfig()
    assert cfg.algo == "grpo" and cfg.env_id == "EDO-v0"
    assert cfg.model_path.name == "grpo_EDO-v0_0.zip"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"algo": "dqn"}, "algo must be one of"),
        ({"env_id": ""}, "env_id"),
        ({"total_timesteps": 0}, "total_timesteps"),
        ({"total_timesteps": 1.5}, "total_timesteps"),
        ({"seed": -1}, "seed"),
        ({"n_envs": 0}, "n_envs"),
        ({"net_arch": [64, 0]}, "net_arch"),
        ({"net_arch": "64,64"}, "net_arch"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"ent_coef": -0.1}, "ent_coef"),
        ({"batch_size": 0}, "batch_size"),
        ({"algo": "ppo", "batch_size": None}, "only supported by grpo"),
        ({"n_epochs": 0}, "n_epochs"),
        ({"clip_range": 1.5}, "clip_range"),
        ({"group_size": 1}, "group_size"),
        ({"groups_per_rollout": 0}, "groups_per_rollout"),
        ({"group_mode": "episode"}, "group_mode"),
        ({"supervision": "dense"}, "supervision"),
        ({"kl_coef": -1.0}, "kl_coef"),
        ({"n_steps": 0}, "n_steps"),
        ({"gamma": 1.5}, "gamma"),
        ({"eval_episodes": -1}, "eval_episodes"),
        ({"vec_env": "ray"}, "vec_env"),
        ({"torch_threads": 0}, "torch_threads"),
        ({"env_kwargs": None}, "env_kwargs"),
        ({"output_dir": ""}, "output_dir"),
    ],
)
def test_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**kwargs)


def test_config_net_arch_tuple_is_accepted():
    assert TrainConfig(net_arch=(8, 8)).net_arch == [8, 8]


def test_unknown_env_id_is_a_clear_error(tmp_path):
    cfg = TrainConfig(env_id="EDO-Nope-v0", output_dir=str(tmp_path), **tiny())
    with pytest.raises(ValueError, match="unknown env id"):
        train(cfg)


# ----------------------------------------------------------------------------- train / save / evaluate_saved
@pytest.mark.parametrize("algo", ALGOS)
def test_train_save_evaluate_round_trip(algo, tmp_path):
    cfg = TrainConfig(algo=algo, env_id="EDO-v0", seed=1, output_dir=str(tmp_path), **tiny(algo))
    model, result = train(cfg)
    assert result.model_path == tmp_path / f"{algo}_EDO-v0_1.zip"
    assert result.model_path.is_file()
    summary = json.loads(result.model_path.with_suffix(".json").read_text())
    assert summary["config"]["algo"] == algo and summary["num_timesteps"] == result.num_timesteps
    assert result.num_timesteps >= cfg.total_timesteps
    assert result.train_wall_s > 0 and result.steps_per_s > 0 and result.n_params > 0
    # where the training time went: every part measured, the parts add up to learn()'s wall time
    times = result.time_breakdown
    assert summary["time_breakdown"] == pytest.approx(times)
    parts = ("env_s", "policy_inference_s", "update_s", "rollout_other_s", "other_s")
    retrieval = ("query_embeds", "query_embed_s", "index_searches", "index_search_s")
    assert set(times) == {"total_s", "process_cpu_s", "env_steps", "gc_s", "gc_collections", *retrieval, *parts}
    assert 0.0 <= times["query_embed_s"] + times["index_search_s"] <= times["env_s"] + times["other_s"]
    assert times["query_embeds"] >= 0 and times["index_searches"] >= 0
    assert times["process_cpu_s"] > 0 and 0.0 <= times["gc_s"] <= times["total_s"] and times["gc_collections"] >= 0
    line = format_time_breakdown(times)
    assert line.startswith("env stepping ") and "CPU s in this process" in line
    assert ("garbage collector pauses" in line) == (times["gc_collections"] > 0)
    # every env steps in every vector step: as many env steps as recorded ones (PPO), or more (GRPO's idle envs)
    assert times["env_steps"] % cfg.n_envs == 0 and times["env_steps"] >= result.num_timesteps
    assert all(times[k] > 0 for k in ("env_s", "policy_inference_s", "update_s")), times
    assert sum(times[k] for k in parts) == pytest.approx(times["total_s"], rel=1e-6)
    assert times["total_s"] <= result.train_wall_s
    # the timing hooks are gone: nothing of them is left on the model, its policy or in the saved file
    assert not {"train", "collect_rollouts"} & set(vars(model)) and not {"forward", "sample_from_numpy"} & set(
        vars(model.policy)
    )
    if algo in ("grpo", "gigpo"):  # EDO's observations carry the action mask: read there, not through env_method
        assert model.action_mask_key == "action_mask"
    # the heuristics, the text reader compared with (compare_with), the warm start's clone before RL, then the model,
    # on the same 4 held-out tasks
    assert [r.policy for r in result.results] == [*HEURISTICS, "plan_check_text", f"clone of {cfg.warm_start}", algo]
    assert all(r.episodes == 4 for r in result.results)
    assert f"clone before RL {result.results[-2].success_rate:.3f}" in result.summary
    assert "best hand-written policy" in result.summary and "oracle" not in result.summary
    assert "| policy |" in result.table and f"| {algo} |" in result.table

    assert infer_algo(result.model_path) == algo
    loaded = load_model(result.model_path)
    assert type(loaded) is type(model)
    rows = evaluate_saved(result.model_path, "EDO-v0", episodes=4, seed=0)
    assert [r.policy for r in rows] == [*HEURISTICS, algo]
    # deterministic policy, same tasks and seeds: the loaded model reproduces the trained model's row
    assert rows[-1].success_rate == result.model_result.success_rate
    assert rows[-1].mean_return == pytest.approx(result.model_result.mean_return)
    only_model = evaluate_saved(result.model_path, "EDO-v0", episodes=2, algo=algo, heuristics=False)
    assert [r.policy for r in only_model] == [algo]


@pytest.mark.filterwarnings("ignore:rich is experimental")
@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_progress_bar_counts_recorded_steps(algo):
    cfg = TrainConfig(algo=algo, **tiny(algo))
    env = make_train_env(cfg)
    try:
        model = make_algo(cfg, env)
        bar = RecordedStepsProgressBar()
        model.learn(total_timesteps=cfg.total_timesteps, callback=bar)
    finally:
        env.close()
    assert bar.pbar.n == model.num_timesteps >= cfg.total_timesteps


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return type(a) is type(b) and a == b


def _mutables(value, out: list) -> list:
    if isinstance(value, (dict, np.ndarray, list)):
        out.append(value)
    if isinstance(value, dict):
        for v in value.values():
            _mutables(v, out)
    return out


def test_fresh_info_dummy_vec_env_matches_dummy_vec_env():
    """make_train_env's VecEnv for EDO ids skips DummyVecEnv's deepcopy of the infos: same observations, rewards,
    dones and infos step for step (episode ends and auto-resets included), and no info shares a dict or an array
    with another step's info (so the copy was not needed)."""
    cfg = TrainConfig(**tiny(n_envs=3))
    fast = make_train_env(cfg)
    ref = make_vec_env(
        cfg.env_id, n_envs=3, seed=cfg.seed, vec_env_cls=DummyVecEnv, env_kwargs={"render_mode": None},
        wrapper_class=GroupStartWrapper,
    )  # fmt: skip
    try:
        assert type(fast) is FreshInfoDummyVecEnv and type(ref) is DummyVecEnv
        obs_a, obs_b = fast.reset(), ref.reset()
        rng = np.random.default_rng(0)
        seen: list = []
        dones = 0
        for _ in range(300):
            assert _same(dict(obs_a), dict(obs_b))
            assert type(obs_a) is type(obs_b) and list(obs_a) == list(obs_b)
            # the observations handed out are copies: the next step does not change them
            assert not any(np.shares_memory(obs_a[k], buf) for k, buf in fast.buf_obs.items())
            masks = np.stack(fast.env_method("action_masks"))
            actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
            obs_a, rew_a, done_a, infos_a = fast.step(actions)
            obs_b, rew_b, done_b, infos_b = ref.step(actions)
            assert np.array_equal(rew_a, rew_b) and np.array_equal(done_a, done_b)
            for x, y in zip(infos_a, infos_b, strict=True):
                if "episode" in x:  # Monitor's episode record holds the wall time since the env was made
                    x, y = {**x, "episode": {**x["episode"], "t": 0}}, {**y, "episode": {**y["episode"], "t": 0}}
                assert _same(x, y), (x, y)
            for info in infos_a:
                seen += _mutables(info, [])
            dones += int(done_a.sum())
        assert dones > 10  # episode ends (terminal observations, auto-resets) were compared too
        assert len({id(v) for v in seen}) == len(seen), "an info shares a dict or array with another step's info"
    finally:
        fast.close()
        ref.close()


def test_fresh_info_dummy_vec_env_steps_box_observations_as_dummy_vec_env():
    """A Box observation (one buffer, key None): the same observations, rewards and dones as DummyVecEnv's."""
    fast = FreshInfoDummyVecEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
    ref = DummyVecEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
    try:
        fast.seed(3)
        ref.seed(3)
        obs_a, obs_b = fast.reset(), ref.reset()
        for t in range(60):
            assert np.array_equal(obs_a, obs_b)
            actions = np.array([t % 2, (t // 3) % 2])
            obs_a, rew_a, done_a, _ = fast.step(actions)
            obs_b, rew_b, done_b, _ = ref.step(actions)
            assert np.array_equal(rew_a, rew_b) and np.array_equal(done_a, done_b)
    finally:
        fast.close()
        ref.close()


def test_eval_episodes_zero_skips_evaluation(tmp_path):
    cfg = TrainConfig(output_dir=str(tmp_path), **tiny(eval_episodes=0))
    _, result = train(cfg)
    assert result.results == [] and result.model_result is None
    assert result.model_path.is_file()


def test_evaluate_saved_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_model(tmp_path / "missing.zip", algo="grpo")
    not_a_model = tmp_path / "x.zip"
    not_a_model.write_text("not a zip")
    with pytest.raises(ValueError, match="not a model saved by Stable-Baselines3"):
        infer_algo(not_a_model)
    with pytest.raises(ValueError, match="episodes"):
        evaluate_saved(not_a_model, episodes=0)


# ----------------------------------------------------------------------------- CLI
def test_cli_train_and_evaluate_tiny(tmp_path, capsys):
    out = tmp_path / "runs"
    rc = main(
        [
            "train",
            "--algo", "grpo",
            "--env", "EDO-v0",
            "--timesteps", "64",
            "--seed", "2",
            "--n-envs", "2",
            "--net-arch", "16,16",
            "--group-size", "2",
            "--groups-per-rollout", "2",
            "--batch-size", "all",
            "--output-dir", str(out),
            "--tensorboard-dir", str(tmp_path / "tb"),
            "--eval-episodes", "3",
            "--no-progress",
        ]
    )  # fmt: skip
    assert rc == 0
    text = capsys.readouterr().out
    path = out / "grpo_EDO-v0_2.zip"
    assert path.is_file()
    assert "| policy | success rate" in text and "| grpo |" in text and "| static_pipeline |" in text
    assert "the static pipeline's" in text  # the verdict line
    assert "Where the training time went: env stepping" in text and "policy inference" in text and "update" in text
    assert "training ran at" in text and "x that rate" in text
    assert any((tmp_path / "tb").rglob("events.out.tfevents.*")), "TensorBoard log expected"

    rc = main(["evaluate", str(path), "--env", "EDO-v0", "--episodes", "3", "--no-heuristics"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "| grpo |" in text and "static_pipeline" not in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "--algo", "dqn"], "invalid choice"),
        (["train", "--timesteps", "ten"], "must be an integer"),
        (["train", "--net-arch", "64,x"], "comma-separated integers"),
        (["train", "--learning-rate", "fast"], "must be a number"),
        (["train", "--scale-rewards", "std"], "invalid choice: 'std' (choose from auto, group, batch, none)"),
        (["evaluate"], "the following arguments are required: path"),
        (["evaluate", "m.zip", "--episodes", "0"], "must be a positive integer"),
        (["evaluate", "m.zip", "--algo", "a2c"], "invalid choice"),
    ],
)
def test_cli_argument_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--timesteps", "0"], "total_timesteps must be an int >= 1"),
        (["--n-envs", "-2"], "n_envs must be an int >= 1"),
        (["--net-arch", "64,0"], "net_arch must be a list of positive ints"),
        (["--learning-rate", "-1"], "learning_rate must be > 0"),
        (["--eval-episodes", "-1"], "eval_episodes must be an int >= 0"),
        (["--group-size", "1"], "group_size must be an int >= 2"),
        (["--bc-ent-coef", "-0.1"], "bc_ent_coef must be a number >= 0"),
        (["--compare-with", "plan_check_text,nope"], "compare_with names ['nope'], which are not hand-written policies"),
    ],
)
def test_cli_bad_settings_are_refused_by_train_config(argv, message, tmp_path, capsys):
    """A value of the right type but out of range is TrainConfig's to refuse (the one place the ranges are checked):
    exit status 2 and its message, before anything is trained or written."""
    assert main(["train", *argv, "--output-dir", str(tmp_path), "--no-progress"]) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_cli_train_defaults_are_train_config_defaults():
    from baselines.cli import train_config_from_args

    assert train_config_from_args(build_parser().parse_args(["train"])) == TrainConfig()


def test_cli_compare_with_reads_a_list_of_names_or_none():
    from baselines.cli import train_config_from_args

    def parsed(*argv: str) -> TrainConfig:
        return train_config_from_args(build_parser().parse_args(["train", *argv]))

    assert TrainConfig().compare_with == ["plan_check_text"] and TrainConfig().warm_start == "static_pipeline"
    assert parsed("--compare-with", "none").compare_with == []
    assert parsed("--compare-with", "plan_check_text,rule_based").compare_with == ["plan_check_text", "rule_based"]
    with pytest.raises(SystemExit):
        parsed("--compare-with", "a,,b")


def test_cli_unknown_env_is_reported(tmp_path, capsys):
    assert main(["train", "--env", "EDO-Nope-v0", "--output-dir", str(tmp_path), "--no-progress"]) == 2
    assert "unknown env id 'EDO-Nope-v0'" in capsys.readouterr().err
    assert main(["evaluate", str(tmp_path / "m.zip"), "--env", "EDO-Nope-v0"]) == 2
    assert "unknown env id" in capsys.readouterr().err


def test_cli_evaluate_missing_model(tmp_path, capsys):
    rc = main(["evaluate", str(tmp_path / "nope.zip"), "--algo", "grpo", "--episodes", "2"])
    assert rc == 2
    assert "no saved model" in capsys.readouterr().err


def test_retrieval_counters_see_new_query_texts_and_index_searches():
    """``time_breakdown``'s retrieval figures: a query text no cache holds is embedded by the model (counted and
    timed), and its search queries the index (counted and timed), once per service however many envs share it."""
    import uuid

    from baselines.training import retrieval_counters

    env = make_train_env(TrainConfig(algo="grpo", env_id="EDO-v0", seed=0, n_envs=2, group_size=2, groups_per_rollout=2))
    try:
        env.reset()
        service = env.envs[0].unwrapped.service
        assert env.envs[1].unwrapped.service is service
        before = retrieval_counters(env)
        retriever = next(r for r in service.retrievers if r.size > 0)
        retriever.search(f"Who founded the company with id {uuid.uuid4().hex}?", 3)
        after = retrieval_counters(env)
        assert after[0] - before[0] == 1 and after[1] > before[1]
        assert after[2] - before[2] == 1 and after[3] > before[3]
        assert retrieval_counters(DummyVecEnv([lambda: gym.make("CartPole-v1")])) == (0, 0.0, 0, 0.0)
    finally:
        env.close()


@pytest.mark.parametrize("algo", ["grpo", "gigpo"])
def test_idle_envs_left_where_they_are_train_the_same_parameters(algo, tmp_path, monkeypatch):
    """``FreshInfoDummyVecEnv.step_some``: the envs idle at the end of a rollout no longer step, and training is the
    same to the bit (every recorded episode starts with a seeded reset; idle rows still go through the policy, so torch
    draws as many random numbers)."""
    kwargs = tiny(total_timesteps=900, n_envs=4, group_size=4, groups_per_rollout=3, eval_episodes=0)

    def run(name: str) -> tuple[dict, TrainResult]:
        cfg = TrainConfig(algo=algo, env_id="EDO-v0", seed=5, output_dir=str(tmp_path / name), **kwargs)
        model, result = train(cfg)
        return {k: v.detach().clone() for k, v in model.policy.state_dict().items()}, result

    from edo_gym.envs.edo_env import EDOEnv

    resets = {"n": 0}
    reset = EDOEnv.reset

    def counted_reset(self, **kwargs):
        resets["n"] += 1
        return reset(self, **kwargs)

    monkeypatch.setattr(EDOEnv, "reset", counted_reset)
    params, result = run("some")
    resets_some = resets["n"]
    resets["n"] = 0
    monkeypatch.delattr(FreshInfoDummyVecEnv, "step_some")
    params_all, result_all = run("all")
    assert result.num_timesteps == result_all.num_timesteps
    assert params.keys() == params_all.keys() and all(th.equal(params[k], params_all[k]) for k in params)
    # the idle envs' steps are gone: every env step taken is a recorded one (nothing was queued on an idle env)
    assert result.time_breakdown["env_steps"] == result.num_timesteps < result_all.time_breakdown["env_steps"]
    # and so are the auto-resets of envs with no start queued (held at their episode's end): fewer resets in all
    assert resets_some < resets["n"]


def test_torch_threads_hold_after_the_envs_load_their_embedder(tmp_path, monkeypatch):
    """``TrainConfig.torch_threads`` is the count the update runs with, also when the envs load the embedding model
    after it is set (a fresh retrieval service, as in a new process). Before, the load set it back to 1."""
    from baselines.grpo.grpo import GRPO
    from edo_gym.retrieval.service import RetrievalService

    monkeypatch.setattr(RetrievalService, "_registry", {})
    seen: list[int] = []
    update = GRPO.train

    def spied_update(self):
        seen.append(th.get_num_threads())
        return update(self)

    monkeypatch.setattr(GRPO, "train", spied_update)
    cfg = TrainConfig(algo="grpo", env_id="EDO-v0", torch_threads=2, output_dir=str(tmp_path), **tiny(eval_episodes=0))
    try:
        train(cfg)
    finally:
        th.set_num_threads(1)
    assert seen and set(seen) == {2}


def test_gc_freeze_trains_the_same_parameters_and_unfreezes(tmp_path, monkeypatch):
    """``TrainConfig.gc_freeze``: the collector skips what earlier rollouts left while training, and nothing else
    changes; everything is handed back to the collector afterwards."""
    import gc

    from baselines.grpo.callbacks import FreezeGCCallback

    frozen_at_rollout = []
    on_rollout_start = FreezeGCCallback._on_rollout_start

    def spy(self):
        on_rollout_start(self)
        frozen_at_rollout.append(gc.get_freeze_count())

    monkeypatch.setattr(FreezeGCCallback, "_on_rollout_start", spy)
    kwargs = tiny(total_timesteps=600, n_envs=2, group_size=2, groups_per_rollout=2, eval_episodes=0, seed=3)
    runs = {}
    for freeze in (True, False):
        cfg = TrainConfig(algo="grpo", env_id="EDO-v0", gc_freeze=freeze, output_dir=str(tmp_path / str(freeze)), **kwargs)
        model, result = train(cfg)
        runs[freeze] = ({k: v.detach().clone() for k, v in model.policy.state_dict().items()}, result)
        assert gc.get_freeze_count() == 0
        assert result.time_breakdown["gc_collections"] >= 0 and result.time_breakdown["gc_s"] >= 0.0
    assert len(frozen_at_rollout) >= 2 and all(n > 0 for n in frozen_at_rollout)  # only the gc_freeze run froze
    (params, result), (params_off, result_off) = runs[True], runs[False]
    assert result.num_timesteps == result_off.num_timesteps
    assert all(th.equal(params[k], params_off[k]) for k in params)
    with pytest.raises(ValueError, match="gc_freeze must be a bool"):
        TrainConfig(gc_freeze="yes").validate()


def test_step_some_can_hold_an_env_at_its_episode_end(small_world_kwargs):
    """``step_some(..., hold=...)``: an env that ends is not auto-reset; it starts an episode before its next step,
    unless a reset (of the VecEnv, or of that env through ``env_method``) starts one first."""
    import gymnasium as gym

    venv = FreshInfoDummyVecEnv([lambda: gym.make("EDO-v0", **small_world_kwargs) for _ in range(3)])
    venv.seed(1)
    venv.reset()
    base = [e.unwrapped for e in venv.envs]
    submit = base[0].A_SUBMIT
    actions = np.array([submit] * 3)
    obs, rewards, dones, infos = venv.step_some(actions, [0, 1], hold=[1])
    assert dones.tolist() == [True, True, False]
    assert base[0].episode.steps == 0 and base[1].episode.steps == 1 and base[1].episode.ended  # env 0 was reset, env 1 held
    assert venv.reset_infos[1] == {} and "task_id" in venv.reset_infos[0]
    for key in obs:  # the held env's row is its terminal observation
        assert np.array_equal(obs[key][1], infos[1]["terminal_observation"][key])
    # stepped again, the held env starts an episode first (an unseeded reset), then takes the step
    obs, rewards, dones, infos = venv.step_some(actions, [1])
    assert dones.tolist() == [False, True, False] and infos[1]["episode_stats"]["ended"] and base[1].episode.steps == 0
    assert "task_id" in venv.reset_infos[1]
    # a reset through env_method ends the hold: the next step is that episode's first
    venv.step_some(actions, [2], hold=[2])
    obs2, _ = venv.env_method("reset", seed=7, indices=[2])[0]
    steps_before = base[2].episode.steps
    venv.step_some(np.array([0, 0, base[2].A_VERIFY]), [2])
    assert steps_before == 0 and base[2].episode.steps == 1
    # and so does VecEnv.reset
    venv.step_some(actions, [0], hold=[0])
    venv.reset()
    assert all(e.episode.steps == 0 for e in base) and not venv._held
    venv.close()


def test_step_some_steps_only_the_envs_named(small_world_kwargs):
    import gymnasium as gym

    venv = FreshInfoDummyVecEnv([lambda: gym.make("EDO-v0", **small_world_kwargs) for _ in range(3)])
    venv.seed(1)
    obs = venv.reset()
    before = {k: v.copy() for k, v in obs.items()}
    steps_before = [e.unwrapped.episode.steps for e in venv.envs]
    submit = venv.envs[0].unwrapped.A_SUBMIT
    obs, rewards, dones, infos = venv.step_some(np.array([submit, submit, submit]), [1])
    assert [e.unwrapped.episode.steps for e in venv.envs] == [steps_before[0], 0, steps_before[2]]  # env 1 ended and reset
    assert dones.tolist() == [False, True, False] and rewards[0] == rewards[2] == 0.0 and infos[0] == infos[2] == {}
    assert "terminal_observation" in infos[1] and infos[1]["episode_stats"]["ended"]
    for key in obs:
        assert np.array_equal(obs[key][[0, 2]], before[key][[0, 2]])

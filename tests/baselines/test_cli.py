"""The ``edo train`` flags generated from ``TrainConfig``, ``edo train``'s refusal to overwrite a run, and ``edo evaluate``
reading a model's env settings from the ``.json`` saved beside it (a flag that disagrees is an error before anything
is evaluated)."""

import dataclasses
import json
import os
import re

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gymnasium as gym  # noqa: E402
import pytest  # noqa: E402
import torch as th  # noqa: E402

import baselines.cli as cli  # noqa: E402
import baselines.training.run as run  # noqa: E402
from baselines.cli import TRAIN_FLAG_ALIASES, build_parser, main, train_config_from_args, train_flag  # noqa: E402
from baselines.training import TrainConfig  # noqa: E402
from baselines.training.config import SETTING_GROUPS  # noqa: E402

th.set_num_threads(1)

FIELDS = [f.name for f in dataclasses.fields(TrainConfig)]


def _train_help(monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "100000")  # one line per option's help: the texts are found unwrapped
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sub.choices["train"].format_help()


# ----------------------------------------------------------------------------- flags generated from TrainConfig
@pytest.mark.parametrize("name", FIELDS)
def test_every_train_config_field_has_a_flag_with_its_help(name, monkeypatch):
    field = TrainConfig.__dataclass_fields__[name]
    assert field.metadata.get("help"), f"TrainConfig.{name} has no help text"
    assert field.metadata.get("group") in SETTING_GROUPS
    text = _train_help(monkeypatch)
    assert re.search(rf"\s{re.escape(train_flag(name))}[\s,]", text)
    assert field.metadata["help"] in text  # whole, as written ("%" too)


def test_train_help_groups_the_settings_by_algorithm(monkeypatch):
    text = _train_help(monkeypatch)
    for title in SETTING_GROUPS:
        assert f"\n{title}:\n" in text
    grpo = text.split("\nGRPO and GiGPO (group-relative, no critic):\n")[1].split("\n\n")[0]
    ppo = text.split("\nPPO and MaskablePPO:\n")[1].split("\n\n")[0]
    assert "--group-size" in grpo and "--kl-coef" in grpo and "--gamma" not in grpo
    assert "--gae-lambda" in ppo and "--vf-coef" in ppo and "--group-size" not in ppo


@pytest.mark.parametrize(
    ("argv", "name", "value"),
    [
        (["--clip-range", "0.1"], "clip_range", 0.1),
        (["--target-kl", "0.05"], "target_kl", 0.05),
        (["--target-kl", "none"], "target_kl", None),
        (["--gamma", "1"], "gamma", 1.0),
        (["--gae-lambda", "0.9"], "gae_lambda", 0.9),
        (["--vf-coef", "0.25"], "vf_coef", 0.25),
        (["--kl-coef", "0.05"], "kl_coef", 0.05),
        (["--group-mode", "seed"], "group_mode", "seed"),
        (["--group-mode", "auto"], "group_mode", None),
        (["--supervision", "process"], "supervision", "process"),
        (["--bc-learning-rate", "3e-4"], "bc_learning_rate", 3e-4),
        (["--bc-batch-size", "64"], "bc_batch_size", 64),
        (["--clip-range-high", "0.28"], "clip_range_high", 0.28),
        (["--max-grad-norm", "1"], "max_grad_norm", 1.0),
        (["--scale-rewards", "none"], "scale_rewards", "none"),  # the string choice, not None
        (["--scale-rewards", "auto"], "scale_rewards", None),
        (["--batch-size", "all"], "batch_size", None),
        (["--net-arch", "64,32"], "net_arch", [64, 32]),
        (["--net-arch", "none"], "net_arch", []),
        (["--features-extractor", "table"], "features_extractor", "table"),
        (["--features-extractor", "flat"], "features_extractor", None),
        (["--warm-start", "none"], "warm_start", None),
        (["--hop-curriculum", "0.25:2,0.5:3"], "hop_curriculum", [[0.25, 2], [0.5, 3]]),
        (["--no-eval-heuristics"], "eval_heuristics", False),
        (["--dynamic-sampling"], "dynamic_sampling", True),
        (["--no-gc-freeze"], "gc_freeze", False),
        (["--torch-threads", "none"], "torch_threads", None),
        (["--device", "cuda"], "device", "cuda"),
        (["--env-kwargs", '{"plan_check": true}'], "env_kwargs", {"plan_check": True}),
        (
            ["--env-kwargs", '{"plan_check": true}', "--text-features"],
            "env_kwargs",
            {"plan_check": True, "text_features": True},
        ),
        (["--retrieval-encoder", "static"], "env_kwargs", {"retrieval": {"encoder": "static"}}),
    ],
)
def test_train_flags_set_their_fields(argv, name, value):
    from baselines.training import applies_to

    algos = applies_to(name)  # a PPO setting is set with --algo ppo: TrainConfig refuses it for GRPO
    extra = [] if TrainConfig().algo in algos else ["--algo", algos[0]]
    cfg = train_config_from_args(build_parser().parse_args(["train", *extra, *argv]))
    assert getattr(cfg, name) == value
    others = {f: getattr(cfg, f) for f in FIELDS if f not in (name, "algo")}
    assert others == {f: getattr(TrainConfig(), f) for f in FIELDS if f not in (name, "algo")}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--algo", "ppo", "--group-size", "4"], "group_size=4 applies to grpo and gigpo only, not to algo 'ppo'"),
        (["--algo", "grpo", "--n-steps", "128"], "n_steps=128 applies to ppo and maskable_ppo only, not to algo 'grpo'"),
        (["--algo", "grpo", "--step-advantage-weight", "0.5"], "applies to gigpo only"),
    ],
)
def test_a_setting_of_another_algorithm_is_an_error_not_ignored(argv, message):
    """A flag of another algorithm's group, changed from its default, would change nothing: refused with its name;
    settings_for drops such settings from shared ones (a study's)."""
    from baselines.training import settings_for

    with pytest.raises(ValueError, match=re.escape(message)):
        train_config_from_args(build_parser().parse_args(["train", *argv]))
    assert settings_for("ppo", {"group_size": 4, "n_steps": 128, "ent_coef": 0.02}) == {"n_steps": 128, "ent_coef": 0.02}
    assert TrainConfig(algo="ppo", **settings_for("ppo", {"scale_rewards": "none", "ent_coef": 0.02})).ent_coef == 0.02


@pytest.mark.parametrize(
    ("name", "alias"), [(name, alias) for name, aliases in TRAIN_FLAG_ALIASES.items() for alias in aliases]
)
def test_the_older_spellings_still_set_their_fields(name, alias):
    """Each alias of the one table sets its field as the field's own flag does (a boolean's --no- form too)."""
    assert name in FIELDS
    parse = build_parser().parse_args
    if isinstance(getattr(TrainConfig(), name), bool):
        assert getattr(parse(["train", alias]), name) is True
        assert getattr(parse(["train", f"--no-{alias[2:]}"]), name) is False
    else:
        value = {"env_id": "EDO-Easy-v0", "total_timesteps": "64", "learning_rate": "0.002", "tensorboard_log": "tb"}[name]
        assert getattr(parse(["train", alias, value]), name) == getattr(parse(["train", train_flag(name), value]), name)


# ----------------------------------------------------------------------------- edo train: no silent overwrite
def _fail_if_called(what: str):
    def tripwire(*args, **kwargs):
        raise AssertionError(f"{what} ran although the command should have stopped before it")

    return tripwire


@pytest.mark.parametrize("present", [(".zip",), (".json",), (".zip", ".json")])
def test_train_refuses_to_overwrite_an_earlier_run(present, tmp_path, capsys, monkeypatch):
    import baselines.training

    monkeypatch.setattr(baselines.training, "train", _fail_if_called("training"))
    path = TrainConfig(output_dir=str(tmp_path)).model_path
    for suffix in present:
        path.with_suffix(suffix).write_text(f"an earlier run's {suffix}")
    assert main(["train", "--output-dir", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--overwrite" in err
    for suffix in present:
        assert str(path.with_suffix(suffix)) in err
        assert path.with_suffix(suffix).read_text() == f"an earlier run's {suffix}"


def test_train_with_overwrite_replaces_the_earlier_run(tmp_path, capsys):
    argv = ["train", "--timesteps", "32", "--n-envs", "2", "--net-arch", "8", "--group-size", "2", "--groups-per-rollout",
            "2", "--batch-size", "all", "--n-epochs", "1", "--warm-start", "none", "--eval-episodes", "0", "--no-progress",
            "--output-dir", str(tmp_path)]  # fmt: skip
    path = TrainConfig(output_dir=str(tmp_path)).model_path
    path.write_text("an earlier run's model")
    assert main([*argv, "--overwrite"]) == 0
    assert path.read_bytes()[:2] == b"PK"  # a zip now: the saved model
    assert json.loads(path.with_suffix(".json").read_text())["config"]["total_timesteps"] == 32
    capsys.readouterr()
    assert main(argv) == 2  # and a second run without --overwrite stops
    assert str(path) in capsys.readouterr().err


# ----------------------------------------------------------------------------- edo evaluate: the saved settings
SAVED_ENV_KWARGS = {"text_features": True, "plan_check": True}


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    """A GRPO model made for EDO-v0 with the text features and the plan check, and the .json edo train writes beside
    it (its config); ``bare`` is the same model without the .json."""
    from baselines.grpo import GRPO

    folder = tmp_path_factory.mktemp("saved")
    env = gym.make("EDO-v0", **SAVED_ENV_KWARGS)
    try:
        model = GRPO("MultiInputPolicy", env, seed=0, policy_kwargs={"net_arch": [8]})
        path, bare = folder / "grpo_EDO-v0_0.zip", folder / "bare" / "grpo_EDO-v0_0.zip"
        model.save(path)
        bare.parent.mkdir()
        model.save(bare)
    finally:
        env.close()
    config = TrainConfig(env_kwargs=dict(SAVED_ENV_KWARGS), output_dir=str(folder)).as_dict()
    path.with_suffix(".json").write_text(json.dumps({"config": config}))
    return path, bare


def test_evaluate_reads_the_env_settings_saved_beside_the_model(saved_model, capsys):
    """The README's command after `make train`: no flag repeats the training's env settings, and it runs."""
    path, _ = saved_model
    assert main(["evaluate", str(path), "--episodes", "2", "--no-heuristics"]) == 0
    out = capsys.readouterr().out
    assert f"Env settings from {path.with_suffix('.json')}: EDO-v0, text_features=True, plan_check=True" in out
    assert "| grpo |" in out
    # flags that agree with the saved settings are accepted
    assert main(["evaluate", str(path), "--episodes", "2", "--no-heuristics", "--env", "EDO-v0", "--plan-check",
                 "--text-features", "--algo", "grpo", "--retrieval-encoder", "transformer"]) == 0  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--no-plan-check"], "--no-plan-check disagrees with the settings the model was trained with ({json}): saved "
         "plan_check=True, given plan_check=False"),
        (["--no-text-features"], "saved text_features=True, given text_features=False"),
        (["--env", "EDO-Easy-v0"], "--env EDO-Easy-v0 disagrees with the settings the model was trained with ({json}): "
         "saved env_id='EDO-v0', given env_id='EDO-Easy-v0'"),
        (["--algo", "ppo"], "--algo ppo disagrees"),
        (["--retrieval-encoder", "static"], "saved retrieval.encoder='transformer', given retrieval.encoder='static'"),
    ],
)  # fmt: skip
def test_evaluate_flag_that_disagrees_with_the_saved_settings_fails_before_any_evaluation(
    flags, message, saved_model, capsys, monkeypatch
):
    path, _ = saved_model
    # neither a language-model server, nor the eval env, nor a heuristic's episode may start
    monkeypatch.setattr(cli, "llm_backend_from_args", _fail_if_called("the backend set-up"))
    monkeypatch.setattr(run, "make_eval_env", _fail_if_called("the eval env"))
    monkeypatch.setattr(run, "evaluate_heuristic", _fail_if_called("a heuristic's evaluation"))
    assert main(["evaluate", str(path), "--episodes", "200", *flags]) == 2
    captured = capsys.readouterr()
    assert message.format(json=path.with_suffix(".json")) in captured.err
    assert "leave the flag out to use the saved setting" in captured.err
    assert captured.out == ""


def test_evaluate_without_the_saved_settings_takes_the_flags(saved_model, capsys, monkeypatch):
    """A model without its .json runs with explicit flags; without the right ones it fails on the observation space,
    also before the heuristics' rows."""
    _, bare = saved_model
    assert main(["evaluate", str(bare), "--episodes", "2", "--no-heuristics", "--text-features", "--plan-check"]) == 0
    assert "| grpo |" in capsys.readouterr().out
    monkeypatch.setattr(run, "evaluate_heuristic", _fail_if_called("a heuristic's evaluation"))
    assert main(["evaluate", str(bare), "--episodes", "2", "--text-features"]) == 2
    assert "key 'plan_check' only in the model's space" in capsys.readouterr().err


def test_evaluate_refuses_a_json_beside_the_model_that_is_not_a_run_summary(saved_model, tmp_path, capsys):
    _, bare = saved_model
    path = tmp_path / bare.name
    path.write_bytes(bare.read_bytes())
    path.with_suffix(".json").write_text(json.dumps({"results": []}))
    assert main(["evaluate", str(path), "--episodes", "2", "--text-features", "--plan-check"]) == 2
    assert "is not the summary edo train saves" in capsys.readouterr().err

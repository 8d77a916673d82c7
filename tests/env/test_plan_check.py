"""The plan check an orchestrator makes by reading task and plan (``plan_check=True``: ``step_check``, ``plan_check``)."""

from __future__ import annotations

import numpy as np
import pytest

from edo_gym import SCRIPTED
from edo_gym.envs.observation import plan_check_features

TASK = "What was the combined revenue of the Birch and Cedar stores in January, in thousands?"
RIGHT = ("What was the revenue of the Birch store in January?", "What was the revenue of the Cedar store in January?",
         "Compute the sum of these revenue figures (in thousands): {1}, {2}.")  # fmt: skip


def test_the_rule_based_plan_passes_and_each_kind_of_error_is_flagged():
    step, plan = plan_check_features(TASK, RIGHT, 6)
    assert not step.any() and plan.tolist() == [0.0, 0.0]
    wrong_op = (RIGHT[0], RIGHT[1], "Compute the highest value of these revenue figures (in thousands): {1}, {2}.")
    step, plan = plan_check_features(TASK, wrong_op, 6)
    assert step.tolist() == [0, 0, 1, 0, 0, 0] and plan[0] == 1.0
    dropped = (RIGHT[0], "Compute the sum of these revenue figures (in thousands): {1}.")
    step, plan = plan_check_features(TASK, dropped, 6)
    assert step[1] == 1.0 and plan[0] == 1.0
    longer = (*RIGHT, "What was the revenue of the Fir store in January?")
    step, plan = plan_check_features(TASK, longer, 6)
    assert step.tolist() == [0, 0, 0, 1, 0, 0] and plan[0] == 1.0  # a step beyond the rule-based plan


def test_a_task_of_no_known_form_is_said_to_be_unread():
    step, plan = plan_check_features("Summarise our quarterly numbers for the board.", ("Summarise them.",), 6)
    assert not step.any() and plan.tolist() == [0.0, 1.0]


@pytest.mark.parametrize("scripted", [True, False], ids=["scripted", "default"])
def test_opt_in_and_it_flags_every_planner_error_and_follows_replans(make_env, scripted):
    """Every unfaithful initial plan is flagged in the scripted world (``SCRIPTED``: the planner's errors are its only
    cause). In the default one half the support tasks need a step no plan written from their text holds
    (:mod:`edo_gym.world.extra_step`): the check reads only the text, so such a plan passes unless the planner also
    erred; every other unfaithful plan is flagged."""
    kwargs = SCRIPTED if scripted else {}
    assert "plan_check" not in make_env("EDO-v0", **kwargs).observation_space.spaces
    env = make_env("EDO-v0", plan_check=True, **kwargs)
    flagged: dict[bool | str, list] = {True: [], False: [], "lacks the extra step": []}
    rng = np.random.default_rng(0)
    for episode in range(60):
        obs, _ = env.reset(seed=episode)
        base = env.unwrapped
        hidden = base.hidden_state()
        extra = hidden["deviations"]["extra_step"]
        key = hidden["plan_faithful"] or ("lacks the extra step" if extra is not None and not extra["in_plan"] else False)
        flagged[key].append(obs["plan_check"][0])
        for _ in range(30 if episode < 5 else 0):
            assert env.observation_space.contains(obs)
            step, plan = plan_check_features(base.episode.task.text, tuple(s.instruction for s in base.episode.plan.steps), 6)
            np.testing.assert_array_equal(obs["step_check"], step)  # follows replans
            np.testing.assert_array_equal(obs["plan_check"], plan)
            obs, _, terminated, truncated, _ = env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
            if terminated or truncated:
                break
    assert flagged[False] and min(flagged[False]) == 1.0  # the planner's errors all change the written plan
    assert np.mean(flagged[True]) < 0.2
    lacking = flagged["lacks the extra step"]
    assert bool(lacking) == (not scripted) and (scripted or min(lacking) == 0.0)


def test_a_bad_setting_is_refused_and_the_cli_flag_sets_it():
    from baselines.cli import build_parser, observation_kwargs
    from edo_gym.config import EDOConfig

    with pytest.raises((TypeError, ValueError), match="plan_check"):
        EDOConfig(plan_check="yes").validate()
    for command in ("train", "evaluate"):
        extra = ["m.zip"] if command == "evaluate" else []
        args = build_parser().parse_args([command, *extra, "--plan-check"])
        assert observation_kwargs(args) == {"plan_check": True}

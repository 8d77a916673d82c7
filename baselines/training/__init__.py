"""Train GRPO / PPO / MaskablePPO on an EDO env, save the model and evaluate it next to the heuristics.

Typical use::

    from baselines.training import TrainConfig, train

    model, result = train(TrainConfig(algo="grpo", env_id="EDO-v0", total_timesteps=200_000))
    print(result.table)

or from the shell: ``edo train --algo grpo --timesteps 200000`` and ``edo evaluate runs/grpo_EDO-v0_0.zip``.

Every algorithm gets the same actor ``net_arch`` (PPO/MaskablePPO get an equally sized critic,
``net_arch=dict(pi=net_arch, vf=net_arch)``; GRPO and GiGPO have no critic). Stock PPO is trained without action
masks: the env penalises illegal actions (``illegal_action_penalty``) and ignores them. MaskablePPO, GRPO and GiGPO
use the env's ``action_masks()``. GRPO/GiGPO group episodes by task (``group_mode="task_id"``) on envs that expose
``num_tasks``, by reset seed otherwise; their training envs are wrapped in ``GroupStartWrapper`` so that every
episode starts with one reset.

The held-out evaluation runs the trained model (deterministic actions) and the four heuristic policies on the
same first ``eval_episodes`` tasks of the env's ``test`` split with the same per-episode seeds
(:mod:`baselines.evaluation`).
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# The modules: config (TrainConfig), vec_env (the training VecEnv), timing (TimeBreakdown, timed_learning), run
# (make_algo, train, evaluate), and baselines.algorithms below them (ALGOS, load_model); their public names are
# importable from here.
from baselines.algorithms import ALGOS, GROUP_ALGOS, infer_algo, load_model  # noqa: E402
from baselines.grpo.callbacks import RecordedStepsProgressBar  # noqa: E402
from baselines.training.config import (  # noqa: E402
    FILTER_ON,
    GROUP_MODES,
    LOSS_TYPES,
    SCALE_REWARDS,
    SUPERVISIONS,
    VEC_ENV_KINDS,
    TrainConfig,
    applies_to,
    settings_for,
)
from baselines.training.run import (  # noqa: E402
    TrainResult,
    apply_warm_start,
    count_parameters,
    curriculum_callbacks,
    evaluate_saved,
    evaluate_with_heuristics,
    make_algo,
    saved_config,
    train,
)
from baselines.training.timing import (  # noqa: E402
    TimeBreakdown,
    format_time_breakdown,
    retrieval_counters,
    timed_learning,
)
from baselines.training.vec_env import FreshInfoDummyVecEnv, check_env_id, make_train_env  # noqa: E402

__all__ = [
    "apply_warm_start",
    "ALGOS",
    "FILTER_ON",
    "GROUP_ALGOS",
    "GROUP_MODES",
    "LOSS_TYPES",
    "SCALE_REWARDS",
    "SUPERVISIONS",
    "VEC_ENV_KINDS",
    "FreshInfoDummyVecEnv",
    "RecordedStepsProgressBar",
    "TimeBreakdown",
    "TrainConfig",
    "applies_to",
    "settings_for",
    "TrainResult",
    "check_env_id",
    "count_parameters",
    "curriculum_callbacks",
    "evaluate_saved",
    "evaluate_with_heuristics",
    "format_time_breakdown",
    "infer_algo",
    "load_model",
    "make_algo",
    "make_train_env",
    "retrieval_counters",
    "timed_learning",
    "saved_config",
    "train",
]

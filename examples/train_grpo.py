"""Train GRPO on EDO-v0 and compare it with the heuristic policies on held-out tasks.

    python examples/train_grpo.py                      # 100k steps, about a minute on 2 CPU cores
    python examples/train_grpo.py --timesteps 300000   # the `make train` budget

GRPO samples ``group_size`` episodes of the *same task* (``group_mode="task_id"``), scores each by its
return, and pushes up the actions of the episodes that beat their group's mean. No critic is learned.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from baselines.training import TrainConfig, train  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="EDO-v0")
    parser.add_argument("--timesteps", type=int, default=100_000)
    parser.add_argument("--episodes", type=int, default=100, help="held-out tasks to evaluate on")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", default="runs/examples")
    args = parser.parse_args(argv)

    cfg = TrainConfig(
        algo="grpo",
        env_id=args.env,
        total_timesteps=args.timesteps,
        seed=args.seed,
        # one group = 8 episodes of one task; 16 groups per policy update
        group_size=8,
        groups_per_rollout=16,
        n_envs=16,
        net_arch=[128, 128],
        learning_rate=5e-4,
        ent_coef=0.01,
        scale_rewards="none",  # Dr. GRPO: centre group returns, do not divide by their std
        eval_episodes=args.episodes,
        output_dir=args.output_dir,
        progress_bar=False,
    )
    model, result = train(cfg)
    print(f"trained {result.num_timesteps} steps in {result.train_wall_s:.1f} s, saved {result.model_path}")
    print(result.table)

    # The saved model is a regular SB3 model: load it and act with action masks.
    from baselines.evaluation import make_eval_env
    from baselines.grpo import GRPO

    loaded = GRPO.load(result.model_path, device="cpu")
    env = make_eval_env(args.env)
    obs, _ = env.reset(seed=0, options={"task_id": 0})
    action, _ = loaded.predict(obs, deterministic=True, action_masks=env.unwrapped.action_masks())
    print(f"first action on held-out task 0: {env.unwrapped.action_names[int(action)]}")
    env.close()


if __name__ == "__main__":
    main()

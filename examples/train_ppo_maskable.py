"""Train stock PPO and sb3-contrib MaskablePPO on EDO-v0 with the same budget and actor network, then compare.

    python examples/train_ppo_maskable.py
    python examples/train_ppo_maskable.py --timesteps 200000 --episodes 200

Stock PPO gets no action masks: the env penalises an illegal action (``illegal_action_penalty``) and leaves the
state unchanged, so PPO has to learn legality from the reward. MaskablePPO reads ``env.action_masks()`` and only
samples legal actions. Both learn a critic (``net_arch=dict(pi=..., vf=...)``) next to the actor.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from baselines.evaluation import format_table  # noqa: E402
from baselines.training import TrainConfig, evaluate_with_heuristics, train  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="EDO-v0")
    parser.add_argument("--timesteps", type=int, default=50_000, help="env steps per algorithm")
    parser.add_argument("--episodes", type=int, default=100, help="held-out tasks to evaluate on")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", default="runs/examples")
    args = parser.parse_args(argv)

    rows = []
    for algo in ("ppo", "maskable_ppo"):
        cfg = TrainConfig(
            algo=algo,
            env_id=args.env,
            total_timesteps=args.timesteps,
            seed=args.seed,
            n_envs=8,
            n_steps=128,  # rollout = 8 envs x 128 steps
            batch_size=256,
            net_arch=[128, 128],  # actor and critic
            learning_rate=3e-4,
            ent_coef=0.01,
            eval_episodes=0,  # evaluated together below
            output_dir=args.output_dir,
            progress_bar=False,
        )
        model, result = train(cfg)
        print(f"{algo}: {result.num_timesteps} steps in {result.train_wall_s:.1f} s, {result.n_params} parameters")
        # the heuristics are evaluated once, with the first model
        rows += evaluate_with_heuristics(model, args.env, args.episodes, seed=0, name=algo, heuristics=not rows)

    print(f"\n{args.env}, {rows[-1].episodes} held-out tasks:\n")
    print(format_table(rows))


if __name__ == "__main__":
    main()

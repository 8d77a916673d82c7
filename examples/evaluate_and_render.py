"""Load (or quickly train) a model, evaluate it on held-out tasks and print one episode's trace.

    python examples/evaluate_and_render.py                       # trains a small GRPO model first
    python examples/evaluate_and_render.py --model runs/grpo_EDO-v0_0.zip --episodes 200

``render_mode="ansi"`` makes ``env.render()`` return the episode as text: the task, the planner's plan, every
orchestration decision (worker, retrieval hits, answer) and the final outcome with its cost.
"""

from __future__ import annotations

import argparse
import inspect
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from baselines.evaluation import evaluate_model, format_table, heldout_task_ids, make_eval_env  # noqa: E402
from baselines.training import TrainConfig, load_model, train  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="EDO-v0")
    parser.add_argument("--model", default=None, help="a saved model (.zip); default: train a small GRPO model")
    parser.add_argument("--timesteps", type=int, default=30_000, help="training steps when no --model is given")
    parser.add_argument("--episodes", type=int, default=50, help="held-out tasks to evaluate on")
    parser.add_argument("--task-id", type=int, default=0, help="held-out task whose episode is rendered")
    parser.add_argument("--output-dir", default="runs/examples")
    args = parser.parse_args(argv)

    if args.model is None:
        cfg = TrainConfig(
            algo="grpo",
            env_id=args.env,
            total_timesteps=args.timesteps,
            n_envs=16,
            scale_rewards="none",
            ent_coef=0.01,
            eval_episodes=0,
            output_dir=args.output_dir,
            progress_bar=False,
        )
        _, result = train(cfg)
        model_path = result.model_path
        print(f"trained {result.num_timesteps} steps in {result.train_wall_s:.1f} s -> {model_path}")
    else:
        model_path = args.model
    model = load_model(model_path)  # the algorithm is read from the zip

    env = make_eval_env(args.env, render_mode="ansi")
    task_ids = heldout_task_ids(env, args.episodes)
    print(format_table([evaluate_model(model, env, task_ids, seed=0, name=type(model).__name__)]))

    # One episode, step by step; GRPO and MaskablePPO take the action masks, stock PPO does not
    base = env.unwrapped
    takes_masks = "action_masks" in inspect.signature(model.predict).parameters
    obs, info = env.reset(seed=0, options={"task_id": args.task_id})
    total, done = 0.0, False
    while not done:
        masks = {"action_masks": base.action_masks()} if takes_masks else {}
        action, _ = model.predict(obs, deterministic=True, **masks)
        obs, reward, terminated, truncated, info = env.step(int(action))
        total += float(reward)
        done = terminated or truncated
    print(f"\nEpisode trace (held-out task {args.task_id}):\n")
    print(env.render())
    print(f"\nreturn {total:+.3f}, episode stats {info['episode_stats']}")
    env.close()


if __name__ == "__main__":
    main()

"""
Which GRPO defaults learn on CartPole-v1: a small sweep over ``loss_type`` x ``scale_rewards`` x ``ent_coef``.

Every run trains GRPO (everything else at the class defaults: group_size 8, 8 groups per rollout, batch 256,
4 epochs, lr 3e-4, clip 0.2, ``[64, 64]``) on 8 CartPole-v1 envs for ``--timesteps`` steps and evaluates the
deterministic policy on 20 episodes (seeds 10_000+) every ``--eval-every`` steps. Reported per setting, over the
seeds: the final mean return and the mean over all evaluations (area under the learning curve, a speed measure;
500 is the maximum). Runs are resumable: one JSON per run under ``--out``, finished runs are skipped.

Usage::

    python -m tools.grpo_cartpole_defaults --out runs/grpo_cartpole_defaults   # 18 settings x 3 seeds
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy

from baselines.grpo.grpo import GRPO

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo")
SCALES = ("group", "batch", "none")
ENT_COEFS = (0.0, 0.01)


def run_one(loss_type: str, scale_rewards: str, ent_coef: float, seed: int, timesteps: int, eval_every: int) -> dict[str, Any]:
    """Train one GRPO on CartPole-v1 and evaluate it along the way."""
    eval_env = make_vec_env("CartPole-v1", n_envs=4, seed=10_000)
    model = GRPO(
        "MlpPolicy",
        make_vec_env("CartPole-v1", n_envs=8, seed=seed),
        loss_type=loss_type,
        scale_rewards=scale_rewards,
        ent_coef=ent_coef,
        seed=seed,
    )
    curve: list[tuple[int, float]] = []

    class Evaluate(BaseCallback):
        def _on_rollout_start(self) -> None:
            while self.model.num_timesteps >= eval_every * (len(curve) + 1):
                mean, _ = evaluate_policy(self.model, eval_env, n_eval_episodes=20, deterministic=True)
                curve.append((int(self.model.num_timesteps), float(mean)))

        def _on_step(self) -> bool:
            return True

    t0 = time.perf_counter()
    model.learn(timesteps, callback=Evaluate())
    final, _ = evaluate_policy(model, eval_env, n_eval_episodes=20, deterministic=True)
    curve.append((int(model.num_timesteps), float(final)))
    return {
        "loss_type": loss_type,
        "scale_rewards": scale_rewards,
        "ent_coef": ent_coef,
        "seed": seed,
        "num_timesteps": int(model.num_timesteps),
        "final_return": float(final),
        "curve": curve,
        "auc_return": float(np.mean([r for _, r in curve])),
        "wall_s": time.perf_counter() - t0,
    }


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per setting: means and per-seed values of the final return and of the curve's mean."""
    rows = []
    for (loss_type, scale, ent), group in itertools.groupby(
        sorted(runs, key=lambda r: (r["loss_type"], r["scale_rewards"], r["ent_coef"], r["seed"])),
        key=lambda r: (r["loss_type"], r["scale_rewards"], r["ent_coef"]),
    ):
        group = list(group)
        rows.append(
            {
                "loss_type": loss_type,
                "scale_rewards": scale,
                "ent_coef": ent,
                "seeds": [r["seed"] for r in group],
                "final_return": float(np.mean([r["final_return"] for r in group])),
                "final_return_per_seed": [r["final_return"] for r in group],
                "auc_return": float(np.mean([r["auc_return"] for r in group])),
            }
        )
    return sorted(rows, key=lambda row: -row["auc_return"])


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/grpo_cartpole_defaults", help="one JSON per run (resumable)")
    parser.add_argument("--timesteps", type=int, default=50_000)
    parser.add_argument("--eval-every", type=int, default=10_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--loss-types", nargs="+", default=list(LOSS_TYPES))
    parser.add_argument("--scales", nargs="+", default=list(SCALES))
    parser.add_argument("--ent-coefs", type=float, nargs="+", default=list(ENT_COEFS))
    args = parser.parse_args(argv)
    th.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for loss_type, scale, ent, seed in itertools.product(args.loss_types, args.scales, args.ent_coefs, args.seeds):
        path = out / f"{loss_type}_{scale}_ent{ent:g}_seed{seed}_{args.timesteps}.json"
        if path.is_file():
            runs.append(json.loads(path.read_text()))
            continue
        record = run_one(loss_type, scale, ent, seed, args.timesteps, args.eval_every)
        path.write_text(json.dumps(record, indent=1))
        runs.append(record)
        print(
            f"{path.name}: final {record['final_return']:.0f}, curve mean {record['auc_return']:.0f}, {record['wall_s']:.0f} s"
        )
    rows = summarise(runs)
    print("| loss_type | scale_rewards | ent_coef | final return (mean) | per seed | curve mean |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        seeds = ", ".join(f"{v:.0f}" for v in row["final_return_per_seed"])
        print(
            f"| {row['loss_type']} | {row['scale_rewards']} | {row['ent_coef']:g} | {row['final_return']:.0f} | {seeds} "
            f"| {row['auc_return']:.0f} |"
        )
    (out / "summary.json").write_text(json.dumps({"settings": vars(args), "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main()

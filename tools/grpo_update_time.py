"""
GRPO's update time per sample and epoch, against Stable-Baselines3 PPO's, measured in the same process.

Both algorithms get the same actor ``net_arch`` (PPO also gets an equally sized critic, as in
``baselines.training``), the same number of epochs and the same minibatch size; GRPO's zero-variance group filter
is off, so every collected step is trained on. Each algorithm collects one rollout of about ``--samples`` steps,
then its ``train()`` (the whole update phase: minibatching, forward, loss, backward, optimizer step, logging) is
timed ``--repeats`` times, alternating GRPO and PPO so that machine load hits both alike. The figure is
``seconds / (samples trained on x epochs)``, median over the repeats, and the ratio GRPO / PPO of the medians, for
wall time and for the process's CPU time.

Usage::

    python -m tools.grpo_update_time                        # SB3 PPO's defaults: [64, 64], batch 64, 10 epochs
    python -m tools.grpo_update_time --net-arch 128 128 --batch-size 512 --n-epochs 4   # `make train`'s
    python -m tools.grpo_update_time --profile              # plus a cProfile of one GRPO update
    python -m tools.grpo_update_time --env EDO-v0           # Dict observations: MultiInputPolicy in both
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import time
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from baselines.grpo.grpo import GRPO


def build_models(
    env_id: str = "CartPole-v1",
    net_arch: tuple[int, ...] = (64, 64),
    batch_size: int = 64,
    n_epochs: int = 10,
    samples: int = 4096,
    n_envs: int = 8,
    group_size: int = 8,
    seed: int = 0,
    device: str = "cpu",
    ent_coef: float = 0.0,
) -> tuple[GRPO, PPO]:
    """
    A GRPO and a PPO model, each with one collected rollout of about ``samples`` steps in its buffer.

    Dict observation spaces (EDO-v0) get ``MultiInputPolicy`` in both, as ``baselines.training`` does; GRPO groups
    by task id when the env has ``num_tasks`` (EDO envs), by seed otherwise, and samples with action masks when the
    env has ``action_masks()`` (its default, as in ``make train``; stock PPO never masks).

    :param env_id: Gymnasium env id (EDO ids are registered by importing ``edo_gym``)
    :param net_arch: Actor hidden layers (PPO: also its critic's)
    :param batch_size: Minibatch size of both
    :param n_epochs: Epochs of both
    :param samples: Rollout size in steps (about, for GRPO: whole groups of episodes)
    :param n_envs: Parallel envs of both
    :param group_size: GRPO's group size
    :param seed: Seed of both
    :param device: Torch device
    :param ent_coef: Entropy coefficient of both
    :return: ``(grpo, ppo)``
    """
    if env_id.startswith("EDO"):
        import edo_gym  # noqa: F401  (registers the EDO env ids)
    arch = list(net_arch)
    env = make_vec_env(env_id, n_envs=n_envs, seed=seed)
    policy = "MultiInputPolicy" if isinstance(env.observation_space, spaces.Dict) else "MlpPolicy"
    group_mode = "task_id" if env.has_attr("num_tasks") else "seed"
    ppo = PPO(
        policy,
        make_vec_env(env_id, n_envs=n_envs, seed=seed),
        n_steps=max(samples // n_envs, 2),
        batch_size=batch_size,
        n_epochs=n_epochs,
        ent_coef=ent_coef,
        policy_kwargs=dict(net_arch=dict(pi=arch, vf=arch)),
        seed=seed,
        device=device,
    )
    ppo.learn(ppo.n_steps * n_envs)  # one rollout (and one update)

    # rough episode length of the untrained policy, to size the rollout
    probe = GRPO(policy, env, group_size=group_size, groups_per_rollout=1, group_mode=group_mode, seed=seed, device=device)
    probe.learn(1)
    mean_length = max(probe.rollout_buffer.n_steps / probe.rollout_buffer.n_episodes, 1.0)
    groups = max(int(round(samples / (group_size * mean_length))), 1)
    grpo = GRPO(
        policy,
        env,
        group_size=group_size,
        group_mode=group_mode,
        groups_per_rollout=groups,
        batch_size=batch_size,
        n_epochs=n_epochs,
        ent_coef=ent_coef,
        filter_zero_std_groups=False,
        policy_kwargs=dict(net_arch=arch),
        seed=seed,
        device=device,
    )
    grpo.learn(1)  # one rollout (and one update)
    return grpo, ppo


def time_updates(grpo: GRPO, ppo: PPO, repeats: int = 7) -> dict[str, Any]:
    """
    Time ``train()`` of both models, alternating, and return the per-sample-epoch figures.

    Two clocks: wall time (``perf_counter``, what a user waits) and this process's CPU time (``process_time``, less
    sensitive to other processes on a shared machine; equal to wall time on an idle one with one torch thread).

    :param grpo: GRPO model with a collected rollout
    :param ppo: PPO model with a collected rollout
    :param repeats: Timed updates per algorithm
    :return: A dict with the samples, the seconds of every update per clock, the medians (seconds per
        sample-epoch) and the ratios GRPO / PPO of the medians
    """
    samples = {"grpo": grpo.rollout_buffer.n_kept_steps, "ppo": ppo.rollout_buffer.buffer_size * ppo.rollout_buffer.n_envs}
    models = {"grpo": grpo, "ppo": ppo}
    seconds: dict[str, dict[str, list[float]]] = {clock: {"grpo": [], "ppo": []} for clock in ("wall", "cpu")}
    for _ in range(repeats):
        for name, model in models.items():
            wall, cpu = time.perf_counter(), time.process_time()
            model.train()
            seconds["cpu"][name].append(time.process_time() - cpu)
            seconds["wall"][name].append(time.perf_counter() - wall)
    per_sample = {
        clock: {name: float(np.median(values[name])) / (samples[name] * models[name].n_epochs) for name in models}
        for clock, values in seconds.items()
    }
    return {
        "samples": samples,
        "update_s": seconds,
        "s_per_sample_epoch": per_sample,
        "grpo_over_ppo": {clock: v["grpo"] / v["ppo"] for clock, v in per_sample.items()},
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartPole-v1", help="env id (EDO-v0: MultiInputPolicy, task-id groups)")
    parser.add_argument("--net-arch", type=int, nargs="+", default=[64, 64], help="actor hidden layers (PPO: also critic)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--n-epochs", type=int, default=10)
    parser.add_argument("--samples", type=int, default=4096, help="steps per rollout (about, for GRPO)")
    parser.add_argument("--repeats", type=int, default=7, help="timed updates per algorithm")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--ent-coef", type=float, default=0.0, help="entropy coefficient of both algorithms")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one GRPO update")
    parser.add_argument("--json", default=None, help="also write the result to this JSON file")
    args = parser.parse_args(argv)

    th.set_num_threads(args.threads)
    grpo, ppo = build_models(
        args.env,
        tuple(args.net_arch),
        args.batch_size,
        args.n_epochs,
        args.samples,
        seed=args.seed,
        device=args.device,
        ent_coef=args.ent_coef,
    )
    result = time_updates(grpo, ppo, args.repeats)
    result["settings"] = vars(args) | {
        "torch": th.__version__,
        "policy": type(grpo.policy).__name__,
        "grpo_action_masks": bool(grpo._use_masking_now),
    }
    print(
        f"{args.env}, net_arch {args.net_arch}, batch {args.batch_size}, {args.n_epochs} epochs, "
        f"samples GRPO {result['samples']['grpo']} / PPO {result['samples']['ppo']}, {args.repeats} repeats"
    )
    for clock in ("wall", "cpu"):
        us = {k: v * 1e6 for k, v in result["s_per_sample_epoch"][clock].items()}
        print(
            f"{clock:4s} update time per sample-epoch (median): GRPO {us['grpo']:.2f} us, PPO {us['ppo']:.2f} us, "
            f"GRPO / PPO {result['grpo_over_ppo'][clock]:.3f}"
        )
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        grpo.train()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()

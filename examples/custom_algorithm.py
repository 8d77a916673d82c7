"""A custom algorithm without SB3: masked REINFORCE in plain PyTorch on a Gymnasium vector env.

    python examples/custom_algorithm.py                  # ~1-2 minutes on 2 CPU cores
    python examples/custom_algorithm.py --timesteps 2000 # smoke run

Shows what any algorithm needs from EDO-Gym:

- ``gym.make_vec("EDO-v0", num_envs=2, vectorization_mode="sync")``: a Gymnasium vector env. With
  ``AutoresetMode.SAME_STEP`` a finished sub-env is reset inside ``step()``: the returned observation is the
  new episode's first one and the finished episode's ``info`` is under ``info["final_info"]``.
- the Dict observation, flattened here into one vector per env (keys in sorted order);
- the action mask ``obs["action_mask"]`` (also ``info["action_mask"]``): illegal logits are set to -inf so the
  policy never samples an illegal action;
- ``info["final_info"]["episode_stats"]`` at episode end (success, tokens, calls, latency).

The update is REINFORCE with the batch-mean return as baseline and an entropy bonus, one gradient step per
batch of ``--batch-episodes`` complete episodes.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch as th  # noqa: E402
from torch import nn  # noqa: E402

import edo_gym  # noqa: E402, F401 - registers EDO-v0
from baselines.evaluation import format_table, heldout_task_ids, make_eval_env, run_episodes  # noqa: E402


def flatten(obs: dict[str, np.ndarray], batched: bool = True) -> th.Tensor:
    """Dict observation -> float tensor ``(n_envs, obs_dim)`` (or ``(obs_dim,)`` when not batched)."""
    if batched:
        n = len(obs["action_mask"])
        return th.as_tensor(np.concatenate([np.asarray(obs[k], dtype=np.float32).reshape(n, -1) for k in sorted(obs)], axis=1))
    return th.as_tensor(np.concatenate([np.asarray(obs[k], dtype=np.float32).ravel() for k in sorted(obs)]))


class MaskedPolicy(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 128) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.head = nn.Linear(hidden, n_actions)
        nn.init.orthogonal_(self.head.weight, gain=0.01)  # start near uniform over the legal actions
        nn.init.zeros_(self.head.bias)

    def distribution(self, x: th.Tensor, mask: th.Tensor) -> th.distributions.Categorical:
        logits = self.head(self.net(x))
        return th.distributions.Categorical(logits=logits.masked_fill(~mask, -1e9))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="EDO-v0")
    parser.add_argument("--timesteps", type=int, default=60_000, help="env steps to train on (both envs together)")
    parser.add_argument("--batch-episodes", type=int, default=32, help="complete episodes per gradient step")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--ent-coef", type=float, default=0.01)
    parser.add_argument("--episodes", type=int, default=100, help="held-out tasks to evaluate on")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    th.set_num_threads(1)
    th.manual_seed(args.seed)
    envs = gym.make_vec(
        args.env, num_envs=2, vectorization_mode="sync", vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    )
    obs, info = envs.reset(seed=args.seed)
    n_envs = envs.num_envs
    policy = MaskedPolicy(flatten(obs).shape[1], int(envs.single_action_space.n))
    optimizer = th.optim.Adam(policy.parameters(), lr=args.lr)

    # per-env running episode: flattened observations, masks, actions, rewards (log-probs are recomputed
    # at update time, with gradients, from these)
    def new_episode() -> dict[str, list]:
        return {"obs": [], "mask": [], "act": [], "rew": []}

    running = [new_episode() for _ in range(n_envs)]
    finished: list[dict[str, list]] = []
    successes: list[float] = []
    steps, updates = 0, 0
    while steps < args.timesteps:
        x, mask = flatten(obs), th.as_tensor(obs["action_mask"] > 0)
        with th.no_grad():
            actions = policy.distribution(x, mask).sample()
        obs, rewards, terminated, truncated, info = envs.step(actions.numpy())
        steps += n_envs
        for i in range(n_envs):
            ep = running[i]
            ep["obs"].append(x[i])
            ep["mask"].append(mask[i])
            ep["act"].append(actions[i])
            ep["rew"].append(float(rewards[i]))
            if terminated[i] or truncated[i]:
                finished.append(ep)
                running[i] = new_episode()
                successes.append(float(info["final_info"]["episode_stats"]["success"][i]))

        if len(finished) >= args.batch_episodes:
            returns = th.tensor([sum(ep["rew"]) for ep in finished])
            advantages = returns - returns.mean()  # batch-mean baseline
            step_adv = th.cat([adv.repeat(len(ep["act"])) for adv, ep in zip(advantages, finished, strict=True)])
            dist = policy.distribution(
                th.stack([o for ep in finished for o in ep["obs"]]), th.stack([m for ep in finished for m in ep["mask"]])
            )
            log_prob = dist.log_prob(th.stack([a for ep in finished for a in ep["act"]]))
            loss = -(step_adv * log_prob).mean() - args.ent_coef * dist.entropy().mean()
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            optimizer.step()
            updates += 1
            if updates % 20 == 0:
                print(
                    f"steps {steps:7d}  updates {updates:4d}  mean return {returns.mean():+.3f}  "
                    f"train success (last 200 ep) {np.mean(successes[-200:]):.2f}",
                    flush=True,
                )
            finished = []
    envs.close()

    # Held-out evaluation: any function (obs, info) -> action plugs into baselines.evaluation
    def act(single_obs, info) -> int:
        with th.no_grad():
            mask = th.as_tensor(single_obs["action_mask"] > 0)[None]
            return int(policy.distribution(flatten(single_obs, batched=False)[None], mask).probs.argmax())

    env = make_eval_env(args.env)
    result = run_episodes(env, act, heldout_task_ids(env, args.episodes), seed=0, name="reinforce (custom)")
    env.close()
    print(f"\n{steps} steps, {updates} updates; held-out evaluation:\n")
    print(format_table([result]))


if __name__ == "__main__":
    main()

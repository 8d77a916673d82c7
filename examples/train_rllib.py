"""PPO from RLlib (new API stack) on ``edo_gym:EDO-v0``, with action masking.

    pip install -c constraints.txt -e . "ray[rllib]==2.60.0"   # RLlib 2.60 pins gymnasium 1.2.2: `make test-compat`
    python examples/train_rllib.py --iterations 20

The env runners build ``EDO-v0`` themselves (``gym.make_vec("edo_gym:EDO-v0", ...)``: no registration needed).
The ``FlattenObservations`` env-to-module connector turns EDO's ``Dict`` observation into one vector; RLlib's
``Dict`` flattening goes through the keys in sorted order, so the ``n_actions`` entries of ``"action_mask"`` (the
first key) open the vector. ``MaskedPPOTorchRLModule`` (PPO's default torch module plus two lines) reads the mask
from there and sets the logits of illegal actions to a large negative number, in exploration, inference and
training alike, so PPO never samples an illegal action and its ratios are computed on the same distribution.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gymnasium as gym  # noqa: E402
from ray.rllib.algorithms.ppo import PPOConfig  # noqa: E402
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule  # noqa: E402
from ray.rllib.callbacks.callbacks import RLlibCallback  # noqa: E402
from ray.rllib.connectors.env_to_module import FlattenObservations  # noqa: E402
from ray.rllib.core.columns import Columns  # noqa: E402
from ray.rllib.core.rl_module.rl_module import RLModuleSpec  # noqa: E402
from ray.rllib.utils.torch_utils import FLOAT_MIN  # noqa: E402

ENV_ID = "edo_gym:EDO-v0"


class MaskedPPOTorchRLModule(DefaultPPOTorchRLModule):
    """PPO's default torch RLModule on the flattened observation, with illegal actions masked out.

    Expects the observation flattened by ``FlattenObservations`` from a ``Dict`` whose first key (in sorted order)
    is ``"action_mask"``: its first ``action_space.n`` entries are the mask (1 = legal).
    """

    def _masked(self, batch: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
        legal = batch[Columns.OBS][..., : self.action_space.n] > 0.5
        out[Columns.ACTION_DIST_INPUTS] = out[Columns.ACTION_DIST_INPUTS].masked_fill(~legal, FLOAT_MIN)
        return out

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._masked(batch, super()._forward(batch, **kwargs))

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._masked(batch, super()._forward_train(batch, **kwargs))


class CountIllegalActions(RLlibCallback):
    """Counts the steps whose ``info["illegal_action"]`` is set (result key ``env_runners/illegal_actions``)."""

    def on_episode_step(self, *, episode: Any, metrics_logger: Any = None, **kwargs: Any) -> None:
        metrics_logger.log_value(
            "illegal_actions", int(bool(episode.get_infos(-1).get("illegal_action"))), reduce="lifetime_sum"
        )


def check_mask_comes_first(env_id: str = ENV_ID) -> None:
    """``MaskedPPOTorchRLModule`` relies on ``"action_mask"`` being the first key of the observation ``Dict``."""
    env = gym.make(env_id)
    keys = list(env.observation_space.spaces)
    env.close()
    if sorted(keys)[0] != "action_mask":
        raise RuntimeError(f"'action_mask' must sort first among the observation keys to be read by the module, got {keys}")


def make_config(
    env_id: str = ENV_ID,
    num_env_runners: int = 0,
    envs_per_runner: int = 4,
    batch_size: int = 2048,
    seed: int = 0,
    mask: bool = True,
) -> PPOConfig:
    """PPO on EDO: a [128, 128] tanh MLP for actor and critic, 4 epochs of minibatches of 256, entropy bonus 0.01.

    :param mask: use ``MaskedPPOTorchRLModule``; ``False`` runs PPO's default module, which samples illegal actions
        (EDO penalises them and changes nothing).
    """
    return (
        PPOConfig()
        .environment(env_id)
        .env_runners(
            num_env_runners=num_env_runners,
            num_envs_per_env_runner=envs_per_runner,
            env_to_module_connector=lambda env, spaces=None, device=None: FlattenObservations(),
        )
        .rl_module(
            rl_module_spec=RLModuleSpec(
                module_class=MaskedPPOTorchRLModule if mask else DefaultPPOTorchRLModule,
                model_config={"fcnet_hiddens": [128, 128], "fcnet_activation": "tanh", "vf_share_layers": False},
            )
        )
        .training(
            train_batch_size_per_learner=batch_size,
            minibatch_size=min(256, batch_size),
            num_epochs=4,
            lr=3e-4,
            entropy_coeff=0.01,
            gamma=0.99,
        )
        .callbacks(CountIllegalActions)
        .debugging(seed=seed)
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default=ENV_ID)
    parser.add_argument("--iterations", type=int, default=20, help="training iterations (one batch each)")
    parser.add_argument("--batch-size", type=int, default=2048, help="env steps per iteration")
    parser.add_argument("--envs-per-runner", type=int, default=4)
    parser.add_argument("--num-env-runners", type=int, default=0, help="0: sample in the driver process")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-mask", action="store_true", help="PPO's default module, without action masking")
    args = parser.parse_args(argv)

    import ray

    check_mask_comes_first(args.env)
    ray.init(num_cpus=max(1, args.num_env_runners + 1), include_dashboard=False, log_to_driver=False)
    try:
        config = make_config(
            args.env, args.num_env_runners, args.envs_per_runner, args.batch_size, args.seed, mask=not args.no_mask
        )
        algo = config.build_algo()
        for i in range(1, args.iterations + 1):
            result = algo.train()
            runners = result["env_runners"]
            ret = runners.get("episode_return_mean", float("nan"))
            length = runners.get("episode_len_mean", float("nan"))
            steps = result.get("num_env_steps_sampled_lifetime", runners.get("num_env_steps_sampled_lifetime", 0))
            illegal = int(runners.get("illegal_actions", 0))
            print(
                f"iteration {i}: env steps {int(steps)}, episode return mean {ret:.3f}, "
                f"episode length mean {length:.1f}, illegal actions {illegal}"
            )
        algo.stop()
    finally:
        ray.shutdown()
    print("done")


if __name__ == "__main__":
    main()

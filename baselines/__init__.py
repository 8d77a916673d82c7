from baselines.grpo import GRPO, GiGPO
from baselines.sharded_vec_env import ShardedVecEnv

__all__ = ["GRPO", "GiGPO", "ShardedVecEnv"]

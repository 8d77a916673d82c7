from baselines.grpo import GRPO, GiGPO

__all__ = ["GRPO", "GiGPO"]

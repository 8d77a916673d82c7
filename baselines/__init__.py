from baselines.grpo import GRPO

__all__ = ["GRPO"]

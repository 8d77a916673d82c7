from baselines.grpo.grpo import GRPO
from baselines.grpo.policies import CnnPolicy, MlpPolicy, MultiInputPolicy

__all__ = ["GRPO", "CnnPolicy", "MlpPolicy", "MultiInputPolicy"]

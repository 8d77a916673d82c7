from baselines.grpo.callbacks import RecordedStepsProgressBar
from baselines.grpo.gigpo import GiGPO
from baselines.grpo.grpo import GRPO
from baselines.grpo.policies import CnnPolicy, MlpPolicy, MultiInputPolicy
from baselines.grpo.wrappers import GroupStartWrapper

__all__ = ["GRPO", "CnnPolicy", "GiGPO", "GroupStartWrapper", "MlpPolicy", "MultiInputPolicy", "RecordedStepsProgressBar"]

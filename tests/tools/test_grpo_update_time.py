"""``tools/grpo_update_time.py``: GRPO's update time against SB3 PPO's, on CartPole-v1 and on EDO-v0."""

from __future__ import annotations


def test_grpo_update_time_runs_on_cartpole():
    from tools.grpo_update_time import build_models, time_updates

    grpo, ppo = build_models(samples=256, n_epochs=1, batch_size=64)
    result = time_updates(grpo, ppo, repeats=1)
    assert result["samples"]["ppo"] == 256 and result["samples"]["grpo"] > 0
    assert set(result["grpo_over_ppo"]) == {"wall", "cpu"} and all(v > 0 for v in result["grpo_over_ppo"].values())


def test_grpo_update_time_on_edo_uses_dict_policies_and_one_features_pass():
    from baselines.grpo.policies import MultiInputGRPOPolicy
    from tools.grpo_update_time import build_models, time_updates

    grpo, ppo = build_models("EDO-v0", net_arch=(16,), batch_size=64, n_epochs=1, samples=128, n_envs=2, group_size=2)
    assert isinstance(grpo.policy, MultiInputGRPOPolicy) and type(ppo.policy).__name__ == "MultiInputActorCriticPolicy"
    assert grpo.group_mode == "task_id" and grpo._use_masking_now
    assert grpo.policy.has_static_features  # CombinedExtractor over vector inputs: features extracted once per update
    result = time_updates(grpo, ppo, repeats=1)
    assert result["samples"]["ppo"] == 128 and result["samples"]["grpo"] == grpo.rollout_buffer.n_steps > 0

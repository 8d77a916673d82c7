"""Callbacks that fit GRPO's episode-based collection."""

from stable_baselines3.common.callbacks import ProgressBarCallback


class RecordedStepsProgressBar(ProgressBarCallback):
    """
    SB3's progress bar, advanced by the algorithm's recorded ``num_timesteps``.

    SB3's own bar adds ``n_envs`` per vectorized step; GRPO steps some envs without recording the steps (envs
    without a group member at the end of a rollout, or idle envs of a synchronous wave), so that bar runs ahead
    of ``num_timesteps`` (it showed 2.2x the recorded steps on EDO-v0 with wave-only collection). This one does not.
    It works for any SB3 algorithm; ``GRPO.learn(progress_bar=True)`` uses it.
    """

    def _on_training_start(self) -> None:
        super()._on_training_start()
        self._start = self.model.num_timesteps

    def _on_step(self) -> bool:
        done = self.model.num_timesteps - self._start
        if done > self.pbar.n:
            self.pbar.update(done - self.pbar.n)
        return True

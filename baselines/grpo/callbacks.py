"""Callbacks that fit GRPO's episode-based collection, and one that keeps the garbage collector's pauses short."""

import gc

from stable_baselines3.common.callbacks import BaseCallback, ProgressBarCallback


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


class FreezeGCCallback(BaseCallback):
    """
    ``gc.freeze()`` at the start of training and of every rollout, ``gc.unfreeze()`` at the end of training.

    CPython's full collections scan every object the collector tracks, and run each time the objects that survived
    younger collections grow by a quarter. A training run keeps what it builds: the envs' memo tables grow step by step
    next to the ~500k objects of the world, torch and the embedding model (EDO-v0), so each full collection costs more
    (0.3 s on 2 cores by the end of ``make train``, which had 7). Frozen objects are skipped, so a full collection only
    sees what the current rollout made.

    Objects that die are freed by reference counting as usual; only reference cycles that were already garbage when a
    rollout starts wait until training ends (then ``unfreeze`` hands everything back to the oldest generation). Results
    are unchanged. It works with any SB3 algorithm.
    """

    def _on_training_start(self) -> None:
        gc.freeze()

    def _on_rollout_start(self) -> None:
        gc.freeze()

    def _on_step(self) -> bool:
        return True

    def _on_training_end(self) -> None:
        gc.unfreeze()

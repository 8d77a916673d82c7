"""
Group scheduling: which env of a VecEnv runs which group member, and how each member's episode starts.

A GRPO rollout is not SB3's ``(n_steps, n_envs)`` grid of transitions: it is ``groups_per_rollout`` groups of
``group_size`` complete episodes, and every member of a group starts from the same task. SB3 VecEnvs reset a finished
env on their own, without a seed or options, so a :class:`GroupScheduler` decides the start of every episode:

* **Members.** The rollout draws groups from the algorithm's group RNG (:func:`plan_group_members`): with
  ``group_mode="seed"`` every member of a group is reset with the group's seed; with ``"task_id"`` every member is
  reset with ``options={"task_id": k}`` and a seed of its own. Drawn members wait in ``pending`` until an env is free.
* **Slots.** Each env of the VecEnv has an :class:`EnvSlot`: the member whose episode it runs (None: the env is idle
  and its steps are not recorded), the steps taken, and, in queued-start mode, the members queued in it.
* **Starts.** Through public VecEnv API only, in one of two modes (:func:`start_mode`):

  - *queued starts*, when every env is wrapped in :class:`~baselines.grpo.wrappers.GroupStartWrapper`: the next
    member's ``(seed, options)`` is queued in the env ahead of time (``env_method("queue_starts", ...)``) and the
    VecEnv's own auto-reset (or ``VecEnv.reset()``) starts it: one reset per episode, and it works through VecEnv
    wrappers;
  - *direct starts*, for any VecEnv that is not a VecEnvWrapper: a finished env is reset again with
    ``env_method("reset", seed=..., options=..., indices=[i])`` (the VecEnv's own auto-reset is wasted).

  A VecEnvWrapper whose envs lack the GroupStartWrapper is refused: a direct reset would bypass it.
* **Refill.** With ``refill_envs=True`` an env whose episode ends starts the next pending member at once; otherwise
  collection runs in synchronous waves of ``n_envs`` members (a wave starts when every env is idle).
* **Dynamic sampling.** More groups are drawn while the informative groups found, plus the expected informative share
  of the unfinished ones, fall short of the target (up to a cap): :meth:`GroupScheduler.groups_to_claim`.
* **Idle envs wait** (:func:`idle_envs_can_wait`). Near the end of a rollout some envs have no member left to run.
  On a VecEnv that can step some of its envs only (``step_some(actions, indices, hold)``, as
  :class:`~baselines.training.vec_env.FreshInfoDummyVecEnv` can), those envs are not stepped, and an env whose episode ends with no start queued is held at its end instead of
  auto-reset (that episode would never be recorded). Every recorded episode starts with a seeded reset and the policy
  still samples for every env, so the recorded data are the same as when every env steps; ``docs/performance.md``
  gives the figures.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from stable_baselines3.common.vec_env import VecEnv

from baselines.grpo.wrappers import GroupStartWrapper

GROUP_MODES = ("seed", "task_id")
#: Seeds drawn for env resets are in ``[0, MAX_SEED)``
MAX_SEED = 2**31 - 1


class Member(NamedTuple):
    """One group member to run: its group and how its episode starts."""

    group_id: int
    seed: int
    options: dict[str, Any]


def new_trajectory() -> dict[str, list[Any]]:
    """An empty per-episode record (the algorithm fills it step by step)."""
    return {"observations": [], "actions": [], "log_probs": [], "rewards": [], "action_masks": [], "anchor_keys": []}


@dataclass
class EnvSlot:
    """What one env of the VecEnv is doing during a rollout."""

    #: The member whose episode the env is running (None: idle, its steps are not recorded)
    member: Member | None = None
    trajectory: dict[str, list[Any]] = field(default_factory=new_trajectory)
    steps: int = 0
    #: Key of the current state (``info["anchor_key"]`` of the last reset / step), for GiGPO
    anchor_key: Any = None
    #: Members whose starts are queued in the env's GroupStartWrapper, in order (queued-start mode only)
    queued: deque[Member] = field(default_factory=deque)


@dataclass
class RolloutState:
    """Bookkeeping of the groups of one rollout."""

    #: Groups to collect (informative groups with dynamic sampling)
    target: int
    #: Most groups drawn (``target`` without dynamic sampling)
    cap: int
    pending: deque[Member] = field(default_factory=deque)
    claimed: int = 0
    finished_members: list[int] = field(default_factory=list)
    complete: int = 0
    informative: int = 0


def get_num_tasks(env: VecEnv) -> int:
    """
    Read the ``num_tasks`` attribute of the (first) env, for ``group_mode="task_id"``.

    :param env: The VecEnv
    :return: The number of tasks (>= 1)
    """
    if not env.has_attr("num_tasks"):
        raise ValueError(
            "group_mode='task_id' needs an env exposing an integer attribute `num_tasks` "
            "and accepting reset(options={'task_id': k}); use group_mode='seed' otherwise"
        )
    num_tasks = int(env.get_attr("num_tasks", indices=[0])[0])
    if num_tasks < 1:
        raise ValueError(f"env.num_tasks must be >= 1, got {num_tasks}")
    return num_tasks


def plan_group_members(
    rng: np.random.Generator, env: VecEnv, group_mode: str, group_size: int, n_groups: int, first_group_id: int = 0
) -> list[Member]:
    """
    Draw the start of every member of ``n_groups`` new groups from ``rng``.

    :param rng: The algorithm's group RNG (saved with the model)
    :param env: The VecEnv (read for ``num_tasks`` in task_id mode)
    :param group_mode: ``"seed"`` (members share a seed) or ``"task_id"`` (members share a task, seeds differ)
    :param group_size: Members per group
    :param n_groups: Number of groups
    :param first_group_id: Id of the first new group (ids are consecutive)
    :return: The members, groups in order
    """
    members: list[Member] = []
    if group_mode == "seed":
        for group_id in range(first_group_id, first_group_id + n_groups):
            group_seed = int(rng.integers(MAX_SEED))
            members += [Member(group_id, group_seed, {}) for _ in range(group_size)]
    else:
        num_tasks = get_num_tasks(env)
        for group_id in range(first_group_id, first_group_id + n_groups):
            task_id = int(rng.integers(num_tasks))
            seeds = rng.integers(MAX_SEED, size=group_size)
            members += [Member(group_id, int(s), {"task_id": task_id}) for s in seeds]
    return members


def start_mode(env: VecEnv) -> str:
    """``"queue"`` (every env has a GroupStartWrapper) or ``"direct"`` (env_method resets, unwrapped VecEnvs)."""
    if all(env.env_is_wrapped(GroupStartWrapper)):
        return "queue"
    if env.unwrapped is not env:
        raise TypeError(
            f"{type(env).__name__} wraps a VecEnv: GRPO cannot start group members through it without bypassing "
            "it. Wrap each env in baselines.grpo.GroupStartWrapper "
            "(make_vec_env(..., wrapper_class=GroupStartWrapper)), then wrap the VecEnv"
        )
    return "direct"


def idle_envs_can_wait(env: VecEnv) -> bool:
    """
    Whether ``env`` can leave the envs idle at the end of a rollout where they are: a VecEnv (not a VecEnvWrapper)
    with ``step_some(actions, indices, hold)``, which steps only the envs in ``indices`` and skips the auto-reset of
    those in ``hold`` whose episode ends (see :class:`~baselines.training.vec_env.FreshInfoDummyVecEnv`).
    """
    return env.unwrapped is env and callable(getattr(env, "step_some", None))


class GroupScheduler:
    """
    Runs the members of one rollout's groups on the envs of a VecEnv (see the module docstring).

    The algorithm's collection loop asks for the observations to act on (:meth:`next_wave`), steps the envs through
    :meth:`step`, records the steps of the envs in :meth:`recorded_envs`, and reports every env's step back
    (:meth:`idle_env_stepped`, :meth:`episode_ended`), then :meth:`refill` hands out newly drawn members.

    :param env: The training VecEnv
    :param draw_members: ``draw_members(n_groups, first_group_id)``: the members of new groups, in order
    :param group_size: Members per group
    :param target: Groups to collect (informative groups with dynamic sampling)
    :param cap: Most groups drawn
    :param refill_envs: Start the next member on an env as soon as its episode ends; False = synchronous waves
    :param dynamic_sampling: Draw more groups until ``target`` are informative (or ``cap`` were drawn)
    :param informative_rate: Expected fraction of informative groups (dynamic sampling draws ``target / rate``)
    :param is_informative: ``is_informative(group_id)`` of a complete group (read with dynamic sampling only)
    :param records_anchor_keys: Keep ``info["anchor_key"]`` of each episode's reset in its slot (GiGPO)
    """

    def __init__(
        self,
        env: VecEnv,
        draw_members: Callable[[int, int], list[Member]],
        group_size: int,
        target: int,
        cap: int,
        refill_envs: bool,
        dynamic_sampling: bool,
        informative_rate: float,
        is_informative: Callable[[int], bool],
        records_anchor_keys: bool = False,
    ):
        self.env = env
        self.mode = start_mode(env)
        self.draw_members = draw_members
        self.group_size = group_size
        self.refill_envs = refill_envs
        self.dynamic_sampling = dynamic_sampling
        self.informative_rate = informative_rate
        self.is_informative = is_informative
        self.records_anchor_keys = records_anchor_keys
        self.state = RolloutState(target=target, cap=cap)
        self.slots = [EnvSlot() for _ in range(env.num_envs)]
        #: the VecEnv can reset one of its envs at once (env_method); behind a VecEnvWrapper only queued starts work
        self.can_reset_one = env.unwrapped is env
        self._step_some = env.step_some if idle_envs_can_wait(env) else None  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ groups
    def claim_groups(self, n_groups: int) -> None:
        """Add ``n_groups`` new groups to the rollout (their members wait in ``state.pending``)."""
        if n_groups <= 0:  # (called after every vector step) nothing to draw, and no need to read env.num_tasks
            return
        state = self.state
        state.pending.extend(self.draw_members(n_groups, state.claimed))
        state.claimed += n_groups
        state.finished_members += [0] * n_groups

    def groups_to_claim(self) -> int:
        """
        How many more groups the rollout needs now.

        Without dynamic sampling: up to ``target``. With it: while the informative groups found plus the expected
        informative share of the unfinished ones fall short of ``target`` (and the cap allows).
        """
        state = self.state
        if not self.dynamic_sampling:
            return max(state.target - state.claimed, 0)
        n = 0
        unfinished = state.claimed - state.complete
        while state.claimed + n < state.cap and state.informative + (unfinished + n) * self.informative_rate < state.target:
            n += 1
        return n

    def _member_finished(self, group_id: int) -> None:
        state = self.state
        state.finished_members[group_id] += 1
        if state.finished_members[group_id] == self.group_size:
            state.complete += 1
            if self.dynamic_sampling and self.is_informative(group_id):
                state.informative += 1

    # ------------------------------------------------------------------ starts
    def _begin_episode(self, slot: EnvSlot, member: Member, reset_info: dict) -> None:
        slot.member = member
        slot.trajectory = new_trajectory()
        slot.steps = 0
        slot.anchor_key = reset_info.get("anchor_key") if self.records_anchor_keys else None

    def _start_member_now(self, env_idx: int, member: Member) -> Any:
        """
        Reset one env into ``member`` at once (``env_method``; never through a VecEnvWrapper).

        In queued-start mode ``member`` is either the env's first queued start (which the wrapper pops, with the same
        seed and options) or the env has none queued (the explicit seed and options apply).

        :return: The env's first observation of the episode
        """
        obs, info = self.env.env_method("reset", seed=member.seed, options=dict(member.options), indices=[env_idx])[0]
        self._begin_episode(self.slots[env_idx], member, info)
        return obs

    def _queue_next(self, env_idx: int, n: int = 1) -> None:
        """Queue up to ``n`` pending members as the next starts of env ``env_idx`` (queued-start mode)."""
        pending = self.state.pending
        members = [pending.popleft() for _ in range(min(n, len(pending)))]
        if members:
            self._send_starts(env_idx, members)

    def _send_starts(self, env_idx: int, members: list[Member]) -> None:
        """Queue ``members``' starts in env ``env_idx``'s GroupStartWrapper."""
        self.env.env_method("queue_starts", [(m.seed, dict(m.options)) for m in members], indices=[env_idx])
        self.slots[env_idx].queued.extend(members)

    def start_idle_envs(self, obs: Any) -> Any:
        """
        Start pending members on every env (all envs are idle): a wave start.

        Queued-start mode: queue each env's member (and the next one, when refilling) and call ``VecEnv.reset()``,
        which goes through any VecEnv wrapper. Direct mode: ``env_method("reset", ...)`` per env; envs left
        without a member keep their current observation.

        :param obs: The envs' current observations (direct mode keeps those of envs left idle)
        :return: The observations of all envs
        """
        env, slots, pending = self.env, self.slots, self.state.pending
        if self.mode == "queue":
            # one start per env, then (refilling) a second one per env, handed out in env order
            idle = [env_idx for env_idx, slot in enumerate(slots) if not slot.queued]
            starts: dict[int, list[Member]] = {env_idx: [] for env_idx in idle}
            for _ in range(2 if self.refill_envs else 1):
                for env_idx in idle:
                    if pending:
                        starts[env_idx].append(pending.popleft())
            for env_idx, members in starts.items():
                if members:
                    self._send_starts(env_idx, members)
            obs = env.reset()
            for env_idx, slot in enumerate(slots):
                if slot.queued:
                    self._begin_episode(slot, slot.queued.popleft(), env.reset_infos[env_idx])
                    if self.refill_envs and not slot.queued:
                        self._queue_next(env_idx)
            return obs
        obs = _copy_obs(obs)
        for env_idx in range(len(slots)):
            if pending:
                _set_obs(obs, env_idx, self._start_member_now(env_idx, pending.popleft()))
        return obs

    def start(self, last_obs: Any) -> Any:
        """Draw the rollout's first groups and start them: the observations to act on first."""
        self.claim_groups(self.groups_to_claim())
        return self.start_idle_envs(last_obs)

    def next_wave(self, obs: Any) -> tuple[bool, Any]:
        """
        Whether the rollout goes on, and the observations to act on next: ``obs`` while some env runs a member; when
        every env is idle, the start of the next wave (drawing more groups if the rollout needs them). ``(False,
        obs)`` when every claimed member's episode is done: the rollout is complete.
        """
        while not any(slot.member is not None for slot in self.slots):
            if not self.state.pending and not any(slot.queued for slot in self.slots):
                self.claim_groups(self.groups_to_claim())
                if not self.state.pending:
                    return False, obs
            obs = self.start_idle_envs(obs)
        return True, obs

    # ------------------------------------------------------------------ steps
    def recorded_envs(self) -> np.ndarray:
        """Indices of the envs that run a member now (their next step is recorded), in env order."""
        return np.flatnonzero([slot.member is not None for slot in self.slots])

    def step(self, actions: np.ndarray) -> tuple[Any, np.ndarray, np.ndarray, list[dict]]:
        """
        Step the VecEnv: every env, or (:func:`idle_envs_can_wait`) only the envs that run or wait to start a member,
        holding those with nothing queued at their episode's end.

        :param actions: One action per env (idle envs' are ignored when they do not step)
        :return: ``(observations, rewards, dones, infos)`` as ``VecEnv.step`` returns them
        """
        if self._step_some is None:
            return self.env.step(actions)
        slots = self.slots
        moving = [i for i, slot in enumerate(slots) if slot.member is not None or slot.queued]
        return self._step_some(actions, moving, hold=[i for i in moving if not slots[i].queued])

    def idle_env_stepped(self, env_idx: int, done: bool) -> None:
        """An idle env took a step: if that ended an episode, its auto-reset may have started a queued member."""
        slot = self.slots[env_idx]
        if done and slot.queued:
            self._begin_episode(slot, slot.queued.popleft(), self.env.reset_infos[env_idx])
            if self.refill_envs:
                self._queue_next(env_idx)

    def episode_ended(self, env_idx: int, done: bool, obs: Any) -> None:
        """
        Env ``env_idx``'s member's episode is stored: count it, and (refilling) start the env's next member.

        :param env_idx: The env
        :param done: The VecEnv ended the episode (False: the algorithm cut it, ``max_episode_steps``)
        :param obs: The step's observations of all envs; a direct start writes the new episode's first one in place
        """
        slot = self.slots[env_idx]
        assert slot.member is not None
        self._member_finished(slot.member.group_id)
        slot.member = None
        if not self.refill_envs:
            return  # synchronous waves: the next wave starts when every env is idle
        if self.mode == "queue" and done and slot.queued:
            # the VecEnv's auto-reset already started the queued member
            self._begin_episode(slot, slot.queued.popleft(), self.env.reset_infos[env_idx])
            self._queue_next(env_idx)
        elif self.can_reset_one and (slot.queued or self.state.pending):
            member = slot.queued.popleft() if slot.queued else self.state.pending.popleft()
            _set_obs(obs, env_idx, self._start_member_now(env_idx, member))
            if self.mode == "queue":
                self._queue_next(env_idx)
        # else (a cut episode behind a VecEnvWrapper): the queued start waits for the env's auto-reset

    def refill(self, obs: Any) -> Any:
        """After a vector step (refilling): draw the groups the rollout needs now and hand new members to envs that
        have nothing queued (dynamic sampling draws them as groups finish)."""
        if not self.refill_envs:
            return obs
        self.claim_groups(self.groups_to_claim())
        state = self.state
        if not state.pending:
            return obs
        for env_idx, slot in enumerate(self.slots):
            if not state.pending:
                break
            if slot.member is not None or slot.queued:
                if self.mode == "queue" and not slot.queued:
                    self._queue_next(env_idx)
                continue
            if self.mode == "queue":
                self._queue_next(env_idx, n=2 if self.can_reset_one else 1)
                if not self.can_reset_one:
                    continue  # starts at the env's next auto-reset
                start_obs = self._start_member_now(env_idx, self.slots[env_idx].queued.popleft())
            else:
                start_obs = self._start_member_now(env_idx, state.pending.popleft())
            _set_obs(obs, env_idx, start_obs)
        return obs

    def close(self) -> None:
        """End the rollout: queued starts no member will use are dropped from the envs."""
        if self.mode == "queue":
            self.env.env_method("clear_starts")


def _copy_obs(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {key: np.array(value) for key, value in obs.items()}
    return np.array(obs)


def _set_obs(obs: Any, env_idx: int, value: Any) -> None:
    if isinstance(obs, dict):
        for key in obs:
            obs[key][env_idx] = value[key]
    else:
        obs[env_idx] = value


__all__ = [
    "GROUP_MODES",
    "MAX_SEED",
    "EnvSlot",
    "GroupScheduler",
    "Member",
    "RolloutState",
    "get_num_tasks",
    "idle_envs_can_wait",
    "plan_group_members",
    "start_mode",
]

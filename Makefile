# EDO-Gym. `make demo` and `make test` bootstrap .venv with the pinned dependencies on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo train test test-all lint format bench bench-quick throughput clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)  ## build the default world, run the heuristic policies on EDO-v0, print their table
	$(BIN)/edo demo

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

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache

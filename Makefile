PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RAY_STAMP := $(VENV)/.installed-ray

.PHONY: install test demo bench bench-learning reproduce clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# torch first, then the project and its dev extra (pytest, hypothesis, stable-baselines3 and
# sb3-contrib for tests/test_sb3.py).
# TORCH: the torch requirement (default: the CPU build of this machine's disk);
# TORCH_INDEX: a package index for it, e.g. https://download.pytorch.org/whl/cu128 for a CUDA build.
# Ray (~240 MB) is not installed here: only `--vector ray` and its test need it (`make test`).
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
TORCH_PIP_ARGS = $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),)
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet $(TORCH_PIP_ARGS) '$(TORCH)'
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# the optional ray extra, for the test suite's local-Ray rollout test
$(RAY_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,ray]'
	touch $(RAY_STAMP)

install: $(STAMP)

test: $(RAY_STAMP)
	$(BIN)/python -m pytest -q

DEMO_CKPT := checkpoints/synthetic-3.pt
DEMO_RUN := runs/demo-synthetic-3
# the demo's evaluation; every `make demo` replaces the previous one (--overwrite)
DEMO_OUT := results/synthetic-3/demo

# Evaluate the shipped synthetic-3 checkpoint against every baseline; without one, train the
# scenario's quick recipe first (train.py --quick: minutes on 2 CPU cores) and evaluate that.
demo: $(STAMP)
	@ckpt=$(DEMO_CKPT); \
	if [ ! -f $$ckpt ]; then \
	  ckpt=$(DEMO_RUN)/best.pt; \
	  if [ ! -f $$ckpt ]; then \
	    echo "no shipped checkpoint: training the quick recipe (train.py --quick) into $(DEMO_RUN)"; \
	    $(BIN)/python train.py --config synthetic-3 --quick --logdir runs train.run_name=demo-synthetic-3 \
	      || exit $$?; \
	  fi; \
	fi; \
	echo "evaluating $$ckpt on workloads 100000..100009 (evaluate.py's default --seed-offset); the results"; \
	echo "pages report the held-out range 500000..500029 over three seeds, so their numbers differ from these"; \
	$(BIN)/python evaluate.py --scenario synthetic-3 --checkpoint $$ckpt --schedulers all --seeds 10 \
	  --out $(DEMO_OUT) --overwrite

bench: $(STAMP)
	$(BIN)/python benchmarks/env_speed.py --json

bench-learning: $(STAMP)
	$(BIN)/python benchmarks/learning.py

# Train SEEDS seeds of a scenario's recipe (configs/$(SCENARIO).yaml) and write docs/results/:
#   make reproduce SCENARIO=synthetic-3 SEEDS=3
SCENARIO ?= synthetic-3
SEEDS ?= 3
reproduce: $(STAMP)
	$(BIN)/python benchmarks/reproduce.py --config $(SCENARIO) --seeds $(SEEDS)

clean:
	rm -rf $(VENV) runs results .pytest_cache

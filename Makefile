# allday: `make demo` and `make test` each set up .venv (idempotently) and run.
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.stamp-setup
export MUJOCO_GL ?= egl
export PYOPENGL_PLATFORM ?= egl
export HF_HUB_OFFLINE := 1

.PHONY: setup demo test test-slow bench lint clean help

help:
	@echo "make demo | test | test-slow | bench | lint | setup | clean"

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	@touch $@

demo: setup
	$(BIN)/allday demo --episodes 6 --out runs/demo

test: setup
	$(BIN)/python -m pytest -q

test-slow: setup
	$(BIN)/python -m pytest -q -m slow

bench: setup
	$(BIN)/python benchmarks/sim_fps.py --quick

lint: setup
	$(BIN)/ruff check .
	$(BIN)/lint-imports

clean:
	rm -rf runs .pytest_cache

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

# commands that talk ROS 2 see the colcon workspace (ros2_ws/install) through scripts/ros_env.sh
ROSENV := source scripts/ros_env.sh >/dev/null 2>&1 || true;

setup: $(STAMP)
	@if $(BIN)/python -c 'import rclpy' 2>/dev/null; then bash scripts/build_ros.sh; \
	else echo "setup: rclpy not installed (the ros extra): skipping the ROS 2 workspace build"; fi

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	@touch $@

demo: setup
	bash -c '$(ROSENV) exec $(BIN)/allday demo --episodes 6 --out runs/demo'

test: setup
	bash -c '$(ROSENV) exec $(BIN)/python -m pytest -q'

test-slow: setup
	bash -c '$(ROSENV) exec $(BIN)/python -m pytest -q -m slow'

bench: setup
	bash -c '$(ROSENV) for b in sim_fps sim_conditions ros_loop quant_quality quant_speed fed_plora fedpte vlm2vla vlm2vla_frontier vlm_spatial_probe vln_first_action lifelong_vln; do $(BIN)/python benchmarks/$$b.py --quick || exit 1; done'

lint: setup
	$(BIN)/ruff check .
	$(BIN)/lint-imports

clean:
	rm -rf runs .pytest_cache

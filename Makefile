# The README's two commands. Both create (or reuse) the virtual environment .venv/ in the repository root.
#   make demo   install perfpredict and predict BERT-base and ResNet-50 on H100 and A100 (no GPU needed)
#   make test   install the test extras, lint, check the import contracts, run the test suite (CPU only) and build
#               the docs strictly
#   make bench  run the CPU benchmark suite (python -m benchmarks all); results in benchmarks/results/

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# torch 2.13.0 is pinned so a CPU-only machine gets the CPU build that lies on its disk; override on a GPU host
# (make TORCH_SPEC="torch==2.13.0 --index-url ...").
TORCH_SPEC ?= torch==2.13.0
# two workers (pytest-xdist), each test module on one of them so its module fixtures are built once; the 20
# slowest tests are listed at the end (docs/development.md keeps a recent list)
PYTEST_ARGS ?= -n 2 --dist loadfile --durations=20

.PHONY: demo test bench install install-dev clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -e ".[hf]"
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

demo: install
	$(VENV)/bin/perfpredict demo

test: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	PYTHONPATH=tests $(VENV)/bin/lint-imports --no-cache  # the layers and no cycles (pyproject's [tool.importlinter])
	$(PY) -m pytest -q $(PYTEST_ARGS)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -q

bench: install-dev
	$(PY) -m benchmarks all

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache

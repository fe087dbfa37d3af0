# Both entry points create .venv and install what they need (torch 2.13.0 CPU first).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast typecheck lint bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet torch==2.13.0
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/distro-node swarm --peers 4

# Two pytest workers (pytest-xdist), each taking the next test when it is free: most tests wait on daemons,
# sockets or timeouts, so one process left a core idle and the suite took 22 min here; with two, 13 min.
PYTEST_WORKERS ?= 2
PYTEST := $(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) --dist worksteal

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(PYTEST)

# The tests that need no network, no root and no long runs: the quick loop while editing.
test-fast: $(STAMP)
	$(PYTEST) -m "not network and not slow and not root"

# Files, strictness per package and the .typecheck/ link tree are set in pyproject.toml's [tool.mypy].
typecheck: $(STAMP)
	$(VENV)/bin/mypy

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP)
	$(PY) bench/payload.py
	$(PY) bench/overhead.py
	$(PY) bench/convergence.py

clean:
	rm -rf $(VENV) build *.egg-info

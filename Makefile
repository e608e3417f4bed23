# The README names these targets; CI runs `make test` through .ci/run.
VENV ?= .venv
PY := $(VENV)/bin/python
# A pinned torch: on a CPU machine this is a local CPU build; an unpinned torch pulls a multi-GB CUDA build.
TORCH ?= torch==2.13.0

.PHONY: train test lint clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

train: $(VENV)/.installed
	$(PY) -m offpolicy.train

test: $(VENV)/.installed
	$(PY) -m pytest -q

lint: $(VENV)/.installed
	$(PY) -m ruff check offpolicy envs tests benchmark

clean:
	rm -rf $(VENV) outputs multirun

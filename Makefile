# The README names these targets; CI runs `make test` through .ci/run.
#
# torch: a torch the venv's python already imports within pyproject.toml's range is kept (for
# example a venv made with VENV_ARGS=--system-site-packages over a CUDA build). Otherwise
# $(TORCH) is installed from pip's default index, which on Linux x86-64 (PyPI) is the CUDA build
# (several GB, needs an NVIDIA driver to use the GPU); on a CPU-only machine set
# TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu for the CPU build (~200 MB).
PYTHON ?= python3
VENV ?= .venv
VENV_ARGS ?=
PY := $(VENV)/bin/python
TORCH ?= torch==2.13.0
TORCH_INDEX_URL ?=
# arguments of `make train`, e.g. make train ARGS="algo=flashsac env=hopper"
ARGS ?=

# exits 0 when the venv's python imports a torch inside pyproject.toml's torch range
TORCH_FITS = $(PY) -c 'import sys, tomllib, torch; from pip._vendor.packaging.requirements import Requirement; \
	deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]; \
	req = next(Requirement(d) for d in deps if Requirement(d).name == "torch"); \
	sys.exit(not req.specifier.contains(torch.__version__.split("+")[0], prereleases=True))' 2>/dev/null

define install_torch
	@if $(TORCH_FITS); then \
		echo "using the installed torch $$($(PY) -c 'import torch; print(torch.__version__)')"; \
	else \
		echo "$(PY) -m pip install -q $(TORCH)$(if $(TORCH_INDEX_URL), --index-url $(TORCH_INDEX_URL))"; \
		$(PY) -m pip install -q "$(TORCH)" $(if $(TORCH_INDEX_URL),--index-url "$(TORCH_INDEX_URL)"); \
	fi
endef

.PHONY: train test lint clean torch tables

# (re)makes $(VENV) unless its python runs pip: a setup stopped part-way (Ctrl-C while venv
# installs pip, or while pip upgrades itself) leaves a venv without, which the next make starts over
MAKE_VENV = $(strip $(PYTHON) -m venv --clear $(VENV_ARGS) $(VENV))
define make_venv
	@$(PY) -m pip --version >/dev/null 2>&1 || { echo "$(MAKE_VENV)"; $(MAKE_VENV); }
endef

$(VENV)/.installed: pyproject.toml
	$(make_venv)
	$(PY) -m pip install -q --upgrade pip
	$(install_torch)
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

# the venv step alone (a venv with pip, nothing installed yet)
.PHONY: venv
venv:
	$(make_venv)

# the torch step alone, on an existing venv
torch:
	$(install_torch)

# make reports a failed run as `make: *** [Makefile:..: train] Error N` (N: the run's exit
# status, README "Exit status") and exits with 2 itself; scripts call the CLI directly.
train: $(VENV)/.installed
	$(PY) -m offpolicy.train $(ARGS)

# two workers (pytest-xdist): the CLI tests pin their processes to CPUs 0 and 1, so more would only
# contend; the tests that time things (marker `serial`) then run alone
test: $(VENV)/.installed
	$(PY) -m pytest -q -n 2 -m "not gpu and not serial"
	$(PY) -m pytest -q -m serial

lint: $(VENV)/.installed
	$(PY) -m ruff check offpolicy envs tests benchmark

# the results pages' tables and curves (docs/results/) from the committed run folders (after adding a run)
tables: $(VENV)/.installed
	$(PY) -m benchmark.results_pages

clean:
	rm -rf $(VENV) outputs multirun

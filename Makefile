# Tempo developer tasks. On a fresh machine: `make demo`, then `make test`.

PYTHON ?= python3
VENV   := .venv
STAMP  := $(VENV)/.installed
PYTEST := $(VENV)/bin/python -m pytest -n 2

export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help venv demo test test-all clean

help:
	@echo "make demo      train REINFORCE on CartPole-v1 (examples/reinforce.py)"
	@echo "make test      run the fast tests (not marked slow)"
	@echo "make test-all  run every test, slow ones included"
	@echo "make venv      create .venv and install tempo-dl[all] in editable mode"
	@echo "make clean     remove .venv and caches"

# The venv is keyed on a stamp file, so it is created when missing and
# re-installed whenever pyproject.toml changes.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -e '.[all]'
	touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tempo run examples/reinforce.py

test: $(STAMP)
	$(PYTEST)

test-all: $(STAMP)
	$(PYTEST) -m ''

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

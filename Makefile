# The two commands of the README: `make dev` and `make test`. Both build .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: dev test lint typecheck bench clean

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "ADE Tasks needs Python >= 3.11; run: make PYTHON=python3.11 ...")'
	@echo "creating $(VENV) and installing ADE Tasks with the pinned versions in constraints.txt ..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

# The venv's bin comes first on PATH, so rule commands such as `python3 -m pytest` use it.
dev: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/ade-tasks dev

test: $(STAMP)
	$(BIN)/ruff check ade_tasks ade_workers ade_api tests bench
	$(BIN)/mypy
	$(BIN)/pytest

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/dispatch.py

clean:
	rm -rf $(VENV) .ade .pytest_cache .ruff_cache .mypy_cache

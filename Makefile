# The two commands of the README: `make dev` and `make test`. Both build .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CHROMIUM := /usr/bin/chromium

.PHONY: dev test lint typecheck bench clean

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "ADE Tasks needs Python >= 3.11; run: make PYTHON=python3.11 ...")'
	@echo "creating $(VENV) and installing ADE Tasks with the pinned versions in constraints.txt ..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

# tests/e2e/test_web_ui.py drives Debian's Chromium (never a browser Playwright downloads).
$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "install Chromium at $(CHROMIUM) (Debian: apt-get install chromium)"; exit 1; }
	@echo "installing Debian's chromium for the browser tests ..."
	$(if $(filter 0,$(shell id -u)),,sudo) sh -c 'apt-get install -y -qq --no-install-recommends chromium || { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium; }'

# The venv's bin comes first on PATH, so rule commands such as `python3 -m pytest` use it.
dev: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/ade-tasks dev

test: $(STAMP) $(CHROMIUM)
	$(BIN)/ruff check ade_tasks ade_workers ade_api tests bench
	$(BIN)/mypy
	$(BIN)/pytest

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/dispatch.py

clean:
	rm -rf $(VENV) .ade .pytest_cache .ruff_cache .mypy_cache

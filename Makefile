# The two commands of the README: `make dev` and `make test`. Both build .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CHROMIUM := /usr/bin/chromium
# The real agent CLIs (pinned in tests/agent_clis) that the agent tests drive. Install scripts
# stay off except claude-code's own, which only links the platform binary npm already fetched.
AGENT_CLIS := $(VENV)/agent-clis
CLIS_STAMP := $(AGENT_CLIS)/.installed
# The docs build outside the tree; Material's notice about MkDocs 2 is not ours to act on.
SITE := $(VENV)/site
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs
# The suite runs in this many pytest processes (pytest-xdist, at most 2: tests/support.py gives
# each its own Redis DBs and RabbitMQ vhost; a test file stays in one process). Two is the
# default since three full two-process runs came back without a parallelism fault
# (docs/development.md); TEST_WORKERS=1 runs it in one. Every run prints its 20 slowest tests.
TEST_WORKERS ?= 2
PYTEST_ARGS := --durations=20 $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)

.PHONY: dev test test-fast docs lint typecheck bench clean

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "ADE Tasks needs Python >= 3.11; run: make PYTHON=python3.11 ...")'
	@echo "creating $(VENV) and installing ADE Tasks with the pinned versions in constraints.txt ..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

# Debian packages, installed with apt when one of their programs is missing: bubblewrap (the
# sandbox every agent process and command step runs in; `make dev` needs it too), and for the
# tests chromium (tests/e2e/test_web_ui.py drives it, never a browser Playwright downloads),
# faketime (beats whose clocks are off) and prometheus for its promtool (tests/unit/deploy/test_monitoring.py
# checks and unit-tests deploy/prometheus/ade-alerts.yml).
SANDBOX := /usr/bin/bwrap
DEBIAN_PACKAGES := chromium faketime prometheus
DEBIAN_PROGRAMS := $(CHROMIUM) /usr/bin/faketime /usr/bin/promtool
# $(call apt_install,PACKAGES,WHY)
define apt_install
	@command -v apt-get >/dev/null || { echo "install $(1) (Debian: apt-get install $(1))"; exit 1; }
	@echo "installing Debian's $(1) $(2) ..."
	$(if $(filter 0,$(shell id -u)),,sudo) sh -c 'apt-get install -y -qq --no-install-recommends $(1) || { apt-get update -qq && apt-get install -y -qq --no-install-recommends $(1); }'
endef

$(SANDBOX):
	$(call apt_install,bubblewrap,for the sandbox commands and agents run in)

$(DEBIAN_PROGRAMS) &:
	$(call apt_install,$(DEBIAN_PACKAGES),for the tests)

# Without npm the real-CLI tests skip locally and fail under CI (tests/real_clis.py says why).
$(CLIS_STAMP): tests/agent_clis/package.json tests/agent_clis/package-lock.json $(STAMP)
	@if command -v npm >/dev/null; then \
	  echo "installing the pinned agent CLIs (claude-code, codex) with npm ci into $(AGENT_CLIS) ..."; \
	  mkdir -p $(AGENT_CLIS) && cp tests/agent_clis/package.json tests/agent_clis/package-lock.json $(AGENT_CLIS)/ && \
	  cd $(AGENT_CLIS) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error && \
	  node node_modules/@anthropic-ai/claude-code/install.cjs && touch .installed; \
	else echo "npm not found: the tests that drive the real claude and codex CLIs will skip"; fi

# The venv's bin comes first on PATH, so rule commands such as `python3 -m pytest` use it (the
# sandbox shows the virtualenv to a rule author's commands read-only).
dev: $(STAMP) $(SANDBOX)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/ade-tasks dev

test: $(STAMP) $(SANDBOX) $(DEBIAN_PROGRAMS) $(CLIS_STAMP)
	$(BIN)/ruff check ade_tasks ade_workers ade_api tests bench
	$(BIN)/mypy
	$(MKDOCS) build --strict --site-dir $(SITE)
	$(BIN)/pytest $(PYTEST_ARGS)

# The inner loop: the unit tests only (no services, about 2 minutes in two processes).
test-fast: $(STAMP) $(SANDBOX) $(DEBIAN_PROGRAMS)
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

# The docs site (mkdocs.yml): --strict fails on any broken link, page or anchor. Serve it with
# `.venv/bin/mkdocs serve`.
docs: $(STAMP)
	$(MKDOCS) build --strict --site-dir $(SITE)

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/dispatch.py

clean:
	rm -rf $(VENV) .ade .pytest_cache .ruff_cache .mypy_cache

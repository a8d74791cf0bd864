# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates its own virtual environment and installs from pyproject.toml.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast lint typecheck unit bench bench-learn bench-learn-keys bench-push clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/pollwarden demo

lint: $(BIN)/.installed
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(BIN)/.installed
	$(BIN)/mypy

# Four workers on two cores: the suite is mostly subprocesses and loopback servers waiting on each other, so two
# workers left the cores idle a third of the time. Measured 2026-12-07 on the 2-core development machine, quiet:
# `-n 2` 12m43s (user+sys CPU 15.4 min), `-n 4` 9m29s (CPU 15.3 min, 1.6 cores busy). On a busy machine the time
# grows with the load, not the tests. docs/install.md has the figures.
# The suite runs the real command in hundreds of subprocesses: with PYTHONDONTWRITEBYTECODE set (as on the CI
# machine) each would compile pollwarden from source again, so its bytecode is written once, first.
unit: $(BIN)/.installed
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m compileall -q src
	$(BIN)/pytest -q -n 4

# Lint and types run beside the suite, not before it: the suite keeps ~1.4 of the 2 cores busy (its tests wait on
# processes and servers), and a cold mypy (~30 s of one core) fits in the rest. Any failure fails `make test`. No
# output sync: make's `-O` holds each command's output until it ends, the suite's too (minutes of nothing, and all
# of it lost to a kill); their few lines may land among the suite's dots.
test: $(BIN)/.installed
	$(MAKE) --no-print-directory -j 3 lint typecheck unit

# The inner loop, no lint or typecheck: the tests tests/conftest.py's FAST names by directory (the core, events,
# audit, stores, engine in-process, layout and words), none of which may start a process (the conftest fails
# one that does, so a test of whole commands cannot join it unnoticed); the rest runs in `make test` only.
# Measured 2026-12-06: 46 s quiet (2,126 tests), 2m22s at load average 7-10 (2,010 tests).
test-fast: $(BIN)/.installed
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m compileall -q src
	$(BIN)/pytest -q -n 2 -m fast

# The conformance-and-pressure benchmark against azure-core, botocore, google-api-core, tenacity, stamina and a
# fixed loop (the `bench` extra): writes docs/benchmarks.md and docs/bench-*.png in 3-4 minutes.
$(BIN)/.installed-bench: $(BIN)/.installed pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $@

# Learnt schedules (issue 26): on the sans-I/O core with a simulated clock, 10,000 jobs per workload, learning on
# against the plain backoff (as shipped and tuned to the target), a fixed delay and the oracle; then the 50-caller
# fleet on loopback with real enqueue and worker processes. Their sections of docs/benchmarks.md (about 10 minutes).
bench-learn: $(BIN)/.installed
	$(BIN)/python -m bench.learn --out docs/benchmarks.md
	$(BIN)/python -m bench.learn_fleet --out docs/benchmarks.md

# Learnt schedules per [schedule] learn_key (issue 26): jobs of several kinds through the engine on SQLite, one
# distribution for all against each kind's own against the plain backoff; its section of docs/schedules.md (~2 min).
bench-learn-keys: $(BIN)/.installed
	$(BIN)/python -m bench.learn_keys --out docs/schedules.md

bench: $(BIN)/.installed-bench
	$(BIN)/python -m bench.conformance

# Woken by the provider (issue 27): 50 callers with polling only, with signed pushes (none, 10 %, 50 % lost) and
# hostile pushes; writes its section of docs/benchmarks.md in about two minutes.
bench-push: $(BIN)/.installed
	$(BIN)/python -m bench.push

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .mypy_cache .ruff_cache

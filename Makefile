# tierscope — `make help` lists the targets.
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin

.PHONY: help demo test bench soak lint install rust-test clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

install: $(PY) ## Build the Rust extension and install tierscope (editable) with dev tools
	$(PY) -m pip install --quiet -e ".[dev]"

demo: install ## Sweep the embedded three-tier system and name where and why it saturates
	$(BIN)/tierscope demo

rust-test: ## Unit tests of the pure-Rust modules
	cargo test --quiet --manifest-path native/Cargo.toml --no-default-features

test: install rust-test lint ## Build, install and run the whole test suite
	$(BIN)/pytest -q --durations=25

bench: install ## Benchmarks vs the anchors (numpy baseline, LINE, SimPy, wrk); results in benchmarks/results/
	$(PY) -m pip install --quiet -e ".[dev,bench]"
	$(BIN)/pytest -q -p no:cacheprovider benchmarks -s

soak: install ## Timing and real-system tests 20 times in a row beside a CPU hog: pass rates
	$(PY) -m tests.soak --runs $(or $(RUNS),20) --cargo

lint: $(PY) ## ruff, cargo fmt --check, clippy
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	cargo fmt --manifest-path native/Cargo.toml --check
	cargo clippy --quiet --manifest-path native/Cargo.toml --no-default-features -- -D warnings

clean: ## Remove build products and the virtualenv
	rm -rf $(VENV) native/target build dist

# The two commands of the README: `make run` serves, `make test` tests.
# Both create .venv and install turngate into it on a new machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/turngate serve

lint: $(STAMP)
	$(BIN)/ruff check turngate tests bench
	$(BIN)/ruff format --check turngate tests bench

typecheck: $(STAMP)
	$(BIN)/mypy --strict

# One worker per core (pytest-xdist): most of the suite's time is CPU or waiting on
# deadlines, and both overlap. The workers' printed counts are added up in tests/conftest.py.
pytest: $(STAMP)
	$(BIN)/python -m pytest -n auto

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# Two commands on a fresh machine: `make run` (the daily job on embedded
# defaults) and `make test` (the whole suite: ruff, mypy, pytest).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: run test lint install samples demo clean

$(BIN)/digest: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	@touch $@

install: $(BIN)/digest

run: install
	$(BIN)/digest run

samples: install
	$(BIN)/digest samples --out var/samples

demo: samples
	DIGEST_SOURCES=var/samples/sources.toml $(BIN)/digest run

lint: install
	$(BIN)/ruff check digest bot tests bench alembic
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache

# Two entry points (README): `make app` runs the dashboard, `make test` runs the whole suite.
# Both create .venv and install what they need on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8501

.PHONY: app test bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.app-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[export]'
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test,trace,export,finetune,validation]'
	touch $@

app: $(VENV)/.app-installed
	$(BIN)/streamlit run app.py --server.headless true --browser.gatherUsageStats false --server.port $(PORT)

test: $(VENV)/.test-installed
	$(BIN)/python -m pytest

bench: $(VENV)/.test-installed
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

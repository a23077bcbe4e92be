# Attend's entry points. `make test` is what CI runs (through .ci/run).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: test bench clean

# Re-install only when the project's metadata changed; the stamp records the last install.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[test,bench]"
	touch $@

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q

bench: $(VENV)/.installed-bench
	$(BIN)/python -m benchmarks.attention_bench

clean:
	rm -rf $(VENV) .pytest_cache

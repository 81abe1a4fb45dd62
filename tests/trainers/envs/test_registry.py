"""The kind registries the dashboard renders forms from: complete schemas, cheap imports."""

import json
import subprocess
import sys

import pytest
from jsonschema import Draft202012Validator

from tests.kind_examples import SAMPLES
from trainers.registry import config_with_defaults, criterion_kinds, environment_kinds, validate_config

ALL_KINDS = [*environment_kinds().values(), *criterion_kinds().values()]


def test_it_lists_the_builtin_kinds():
    assert {"arithmetic_calculator", "countdown", "frozen_lake", "python_tool", "from_dataset"} <= set(
        environment_kinds()
    )
    assert {
        "exact_match",
        "numeric_match",
        "regex",
        "format",
        "length",
        "overlong_penalty",
        "tool_calls",
        "env_reward",
        "llm_judge",
        "learned_reward",
        "custom_python",
    } <= set(criterion_kinds())
    assert criterion_kinds()["llm_judge"].needs_model and criterion_kinds()["learned_reward"].needs_model
    assert not criterion_kinds()["exact_match"].needs_model


@pytest.mark.parametrize("spec", ALL_KINDS, ids=lambda s: s.name)
def test_every_schema_is_a_complete_form(spec):
    schema = spec.config_schema
    Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert spec.title and spec.description and ":" in spec.target
    for key, prop in schema["properties"].items():
        assert prop.get("title") and prop.get("description"), key
        assert "default" in prop, key
        if prop.get("type") in ("integer", "number") and key not in (
            "min_score",
            "max_score",
            "on_parse_failure",
        ):
            assert "minimum" in prop, key
    json.dumps(schema)  # the dashboard stores and ships it as JSON


@pytest.mark.parametrize("spec", environment_kinds().values(), ids=lambda s: s.name)
def test_environment_defaults_are_valid_configs(spec):
    # SAMPLES: what a kind cannot default (where its tasks or tools come from)
    config = config_with_defaults(spec.config_schema, SAMPLES.get(spec.name, {}))
    assert validate_config(spec.config_schema, config) == {}


def test_it_reports_field_errors():
    schema = environment_kinds()["arithmetic_calculator"].config_schema
    errors = validate_config(schema, {"max_digits": 0, "operations": ["^"], "bogus": 1})
    assert set(errors) == {"max_digits", "operations.0", ""}


def test_listing_kinds_does_not_import_torch():
    code = (
        "import sys\n"
        "from trainers.registry import environment_kinds, criterion_kinds\n"
        "environment_kinds(); criterion_kinds()\n"
        "import trainers.rubrics, trainers.rollout.toolcalls, trainers.envs.sandbox\n"
        "import trainers.envs.base, trainers.envs.arithmetic, trainers.envs.countdown\n"
        "import trainers.envs.frozen_lake, trainers.envs.python_tool, trainers.envs.from_dataset\n"
        "import trainers.rubrics.criteria, trainers.rubrics.judge, trainers.rubrics.reward_model\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'ray', 'django'))\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout

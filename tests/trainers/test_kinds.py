"""Schema errors in plain words naming the field's title (trainers.kinds.validate_config)."""

from trainers.config import resolve_run_config, validate_run_config
from trainers.kinds import field_title, validate_config

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["path"],
    "properties": {
        "path": {"type": "string", "title": "Tasks file", "minLength": 1},
        "rate": {"type": "number", "title": "Learning rate", "exclusiveMinimum": 0, "maximum": 1},
        "steps": {"type": "integer", "title": "Max steps", "minimum": 1},
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "device": {"type": "string", "title": "Device", "pattern": "^(cpu|cuda)$"},
        "tags": {
            "type": "array",
            "title": "Tags",
            "maxItems": 2,
            "items": {"type": "string", "maxLength": 3},
        },
        "name": {"type": "string", "title": "Name", "maxLength": 4},
    },
}


def test_every_problem_comes_back_at_once_in_plain_words():
    errors = validate_config(
        SCHEMA,
        {
            "rate": -1.0,
            "steps": 0,
            "mode": "medium",
            "device": "gpu",
            "tags": ["a", "b", "long"],
            "name": "too long",
            "mystery": 1,
        },
    )
    assert errors == {
        "path": ["Tasks file is required."],
        "rate": ["Learning rate must be more than 0 (got -1.0)."],
        "steps": ["Max steps must be 1 or more (got 0)."],
        "mode": ["Mode must be one of: 'fast', 'slow' (got 'medium')."],
        "device": ["Device is not in the expected form (got 'gpu'); it must match ^(cpu|cuda)$."],
        "tags": ["Tags takes at most 2 items (it has 3)."],
        "tags.2": ["Tags, item 3 must be at most 3 characters long (it has 4)."],
        "name": ["Name must be at most 4 characters long (it has 8)."],
        "": ["Unknown field(s): 'mystery'"],
    }


def test_no_json_schema_wording_reaches_people():
    errors = validate_config(SCHEMA, {"path": "", "rate": 2, "steps": "ten"})
    text = " ".join(m for ms in errors.values() for m in ms)
    assert "less than" not in text and "is not of type" not in text
    assert errors["path"] == ["Tasks file cannot be empty."]
    assert errors["rate"] == ["Learning rate must be 1 or less (got 2)."]
    assert errors["steps"] == ["Max steps must be a whole number (got 'ten')."]


def test_run_config_errors_name_the_knob_titles():
    config = resolve_run_config(
        "grpo", {"learning_rate": -1, "lora": {"r": 0}, "max_turns_schedule": [[1, "a"]]}
    )
    errors = validate_run_config(config)
    assert errors["learning_rate"] == ["Learning rate must be more than 0 (got -1)."]
    assert errors["lora.r"] == ["Rank must be 1 or more (got 0)."]
    assert errors["max_turns_schedule.0.1"] == [
        "Max turns schedule, item 1, entry 2 must be a whole number (got 'a')."
    ]


def test_a_field_without_a_title_is_named_by_its_key():
    assert field_title({"properties": {"max_turns": {}}}, ["max_turns"]) == "Max turns"


def test_each_built_in_kinds_constructor_defaults_are_its_schemas():
    # The schema is where a kind's defaults are declared (the form shows them, `KindSpec.build` fills
    # them in); a class built directly (tests, notebooks) must not run with other ones. A mutable default
    # is None in the signature and the schema's empty list or object.
    import inspect

    from trainers import envs
    from trainers.kinds import config_with_defaults
    from trainers.registry import criterion_kinds, environment_kinds
    from trainers.rubrics import kinds as rubric_kinds

    FALLBACKS = {
        ("arithmetic_calculator", "operations"): envs.ARITHMETIC_OPERATIONS,
        ("python_tool", "task_types"): envs.PYTHON_TASK_TYPES,
        ("format", "checks"): rubric_kinds.FORMAT_CHECKS,
    }

    drift = {}
    for spec in [*environment_kinds().values(), *criterion_kinds().values()]:
        if not spec.target.startswith("trainers."):
            continue
        try:
            parameters = inspect.signature(spec.target_class().__init__).parameters
        except ImportError:  # an ecosystem kind whose package this machine lacks
            continue
        for name, default in config_with_defaults(spec.config_schema, {}).items():
            given = parameters.get(name)
            if given is None or given.default is inspect.Parameter.empty:
                continue
            if given.default is None and default in ([], {}):
                continue
            if given.default is None and (spec.name, name) in FALLBACKS:  # the class's `x or DEFAULT`
                assert list(FALLBACKS[spec.name, name]) == default
                continue
            if given.default != default:
                drift[f"{spec.name}.{name}"] = (given.default, default)
    assert drift == {}

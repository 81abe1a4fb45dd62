"""Forms generated from JSON schemas: every built-in kind renders, and what it shows comes back intact."""

from __future__ import annotations

import pytest
from django import forms
from django.utils.datastructures import MultiValueDict

from tests.kind_examples import LIST_SAMPLES, REQUIRED_SAMPLES
from tests.webapp.html_forms import form_data
from trainers.config import KNOB_GROUPS, RUN_CONFIG_SCHEMA, resolve_run_config, validate_run_config
from trainers.registry import config_with_defaults, criterion_kinds, environment_kinds, validate_config
from webapp.experiments.forms import RUN_FORM_EXCLUDED_KNOBS
from webapp.experiments.schema_forms import SchemaForm


def submit(form: SchemaForm) -> SchemaForm:
    """Render the form, read it back as a browser would post it, and bind a fresh form to that."""
    posted = MultiValueDict(form_data(f"<form>{form.as_div()}</form>"))
    return SchemaForm(form.schema, posted, prefix=form.prefix, exclude=[*_excluded(form)])


def _excluded(form: SchemaForm) -> list[str]:
    shown = {spec.path[0] for spec in form.schema_fields}
    return [key for key in form.schema.get("properties", {}) if key not in shown]


ALL_KINDS = [("environment", name) for name in environment_kinds()] + [
    ("criterion", name) for name in criterion_kinds()
]


@pytest.mark.parametrize(("family", "name"), ALL_KINDS, ids=[f"{f}:{n}" for f, n in ALL_KINDS])
def test_it_renders_every_builtin_kind_and_round_trips_its_defaults(family, name):
    spec = (environment_kinds() if family == "environment" else criterion_kinds())[name]
    sample = {**REQUIRED_SAMPLES, **LIST_SAMPLES}.get(name, {})
    form = SchemaForm(spec.config_schema, values=sample, prefix="config")

    assert set(form.fields) >= {key for key in spec.config_schema["properties"] if key != "args"} - {""}
    bound = submit(form)

    assert bound.is_valid(), bound.errors
    config = bound.values()
    assert validate_config(spec.config_schema, config) == {}
    assert config_with_defaults(spec.config_schema, config) == config_with_defaults(
        spec.config_schema, sample
    )


@pytest.mark.parametrize("name", sorted(REQUIRED_SAMPLES))
def test_it_reports_an_empty_required_field_next_to_that_field(name):
    spec = {**environment_kinds(), **criterion_kinds()}[name]
    bound = submit(SchemaForm(spec.config_schema, prefix="config"))
    assert bound.is_valid()

    bound.add_schema_errors(validate_config(spec.config_schema, bound.values()))

    (field,) = REQUIRED_SAMPLES[name]
    (message,) = bound.errors[field]
    assert list(bound.errors) == [field] and message.endswith(" is required.") and "This field" not in message


def test_it_round_trips_every_run_knob_of_each_preset():
    for preset in ("grpo", "dr_grpo", "dapo"):
        knobs = resolve_run_config(
            preset, {"lora": {"enabled": True, "r": 8}, "max_turns_schedule": [[0, 1], [10, 3]]}
        )
        form = SchemaForm(RUN_CONFIG_SCHEMA, values=knobs, prefix="knob", exclude=RUN_FORM_EXCLUDED_KNOBS)
        bound = submit(form)
        assert bound.is_valid(), bound.errors
        typed = bound.values()
        # A blank text knob comes back as absent: the schema's default ("") fills it again.
        blank = {name for name, value in knobs.items() if value == ""}
        assert set(typed) - blank == set(knobs) - set(RUN_FORM_EXCLUDED_KNOBS) - blank
        assert {**knobs, **typed} == knobs
        assert validate_run_config({**knobs, **typed}) == {}


def test_it_chooses_a_widget_by_type():
    schema = {
        "type": "object",
        "properties": {
            "turns": {
                "type": "integer",
                "title": "Turns",
                "description": "How many.",
                "minimum": 1,
                "maximum": 8,
                "default": 4,
            },
            "rate": {"type": "number", "exclusiveMinimum": 0, "default": 0.5},
            "mode": {"type": "string", "enum": ["a", "b"], "default": "b"},
            "label": {"type": "string", "default": "hi"},
            "on": {"type": "boolean", "default": True},
            "ops": {"type": "array", "items": {"type": "string", "enum": ["+", "-", "*"]}, "default": ["-"]},
            "lora": {"type": "object", "properties": {"r": {"type": "integer", "default": 16}}},
            "args": {"type": "object", "default": {"k": 1}},
            "limit": {"type": ["integer", "null"], "default": None},
        },
    }
    form = SchemaForm(schema)

    turns = form.fields["turns"]
    assert isinstance(turns, forms.IntegerField)
    assert (turns.label, turns.help_text) == ("Turns", "How many.")
    assert turns.widget.attrs == {"step": "1", "min": 1, "max": 8}
    assert form["turns"].value() == 4
    assert (
        isinstance(form.fields["rate"], forms.FloatField)
        and form.fields["rate"].widget.attrs["step"] == "any"
    )
    assert isinstance(form.fields["mode"], forms.ChoiceField) and form["mode"].value() == "b"
    assert isinstance(form.fields["label"].widget, forms.TextInput)
    assert isinstance(form.fields["on"], forms.BooleanField)
    assert isinstance(form.fields["ops"].widget, forms.CheckboxSelectMultiple) and form["ops"].value() == [
        "-"
    ]
    assert "lora__r" in form.fields and form["lora__r"].value() == 16
    assert isinstance(form.fields["args"], forms.JSONField)
    assert form.fields["limit"].label == "Limit"


def test_it_leaves_an_empty_input_out_and_turns_an_empty_nullable_one_into_null():
    schema = {
        "type": "object",
        "properties": {"turns": {"type": "integer"}, "limit": {"type": ["integer", "null"]}},
    }
    form = SchemaForm(schema, {"turns": "", "limit": ""})
    assert form.is_valid()
    assert form.values() == {"limit": None}


def test_it_explains_json_that_does_not_parse():
    schema = {"type": "object", "properties": {"args": {"type": "object"}}}
    form = SchemaForm(schema, {"args": '{"k": 1'})
    assert not form.is_valid()
    assert form.errors["args"][0].startswith("Not valid JSON:")


def test_it_shows_schema_errors_next_to_the_field_they_concern():
    form = SchemaForm(RUN_CONFIG_SCHEMA, {}, exclude=RUN_FORM_EXCLUDED_KNOBS)
    assert form.is_valid()
    form.add_schema_errors(
        {
            "clip_high": ["-1 is less than the minimum of 0"],
            "lora.r": ["0 is less than the minimum of 1"],
            "max_turns_schedule.1": ["Steps must be strictly increasing."],
            "mystery": ["Unknown field(s): 'mystery'"],
        }
    )
    assert form.errors["clip_high"] == ["-1 is less than the minimum of 0"]
    assert form.errors["lora__r"] == ["0 is less than the minimum of 1"]
    assert form.errors["max_turns_schedule"] == ["Steps must be strictly increasing."]
    assert form.non_field_errors() == ["mystery: Unknown field(s): 'mystery'"]


def test_it_groups_run_knobs_in_the_order_the_config_declares():
    form = SchemaForm(RUN_CONFIG_SCHEMA, exclude=RUN_FORM_EXCLUDED_KNOBS)
    groups = form.groups(KNOB_GROUPS)
    titles = [title for title, _fields in groups]
    assert titles == [t for key, t in KNOB_GROUPS.items() if key != "task"]
    algorithm = dict(groups)["Algorithm"]
    assert "group_size" in [bound.name for bound in algorithm]
    assert [bound.name for bound in dict(groups)["LoRA"]] == [
        "lora__enabled",
        "lora__r",
        "lora__alpha",
        "lora__dropout",
        "lora__target_modules",
    ]

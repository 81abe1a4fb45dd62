"""What a registered kind is: `KindSpec` (name, form schema, cross-field rules, lazily built class),
and the schema validation every kind's config goes through.

A leaf module: the built-in environment and criterion kinds (`trainers.envs`, `trainers.rubrics.kinds`)
declare their specs with it, and `trainers.registry` collects them. Importing it stays cheap (no torch,
no environment code). The JSON-schema fragments those declarations are written with (`integer_field`,
`number_field`, `boolean_field`, `text_field`, `choice_field`, `object_schema`) live here too, once.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

Errors = dict[str, list[str]]


# ---- schema fragments the kinds are declared with ---------------------------------------------------


def integer_field(title: str, description: str, default: int, minimum: int, maximum: int) -> dict[str, Any]:
    return {
        "type": "integer",
        "title": title,
        "description": description,
        "default": default,
        "minimum": minimum,
        "maximum": maximum,
    }


def number_field(
    title: str, description: str, default: float, minimum: float | None = None, maximum: float | None = None
) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "number",
        "title": title,
        "description": description,
        "default": default,
    }
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


def boolean_field(title: str, description: str, default: bool) -> dict[str, Any]:
    return {"type": "boolean", "title": title, "description": description, "default": default}


def text_field(
    title: str, description: str, default: str = "", max_length: int = 2000, **extra: Any
) -> dict[str, Any]:
    return {
        "type": "string",
        "title": title,
        "description": description,
        "default": default,
        "maxLength": max_length,
        **extra,
    }


def choice_field(title: str, description: str, options: list[str], default: str) -> dict[str, Any]:
    return {"type": "string", "title": title, "description": description, "enum": options, "default": default}


def object_schema(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """A form's object: exactly these properties (unknown keys are an error), `required` among them."""
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


@dataclass(frozen=True)
class KindSpec:
    name: str
    title: str
    description: str
    config_schema: dict[str, Any]
    target: str  # "package.module:ClassName", imported lazily by build()
    # Criterion kinds that need a model (LLM judge, learned reward) cannot score in the web process.
    needs_model: bool = False
    # What a criterion's explanation is, as the trajectory page labels it ("judge says" only for a judge).
    explanation_label: str = "details"
    # Criterion kinds: the values a criterion of this kind typically takes, in words ("0 or 1",
    # "−1 to 1"), shown by the rubric builder so no one weighs a criterion blind to its scale.
    typical_range: str = ""
    # Criterion kinds: "verifiable" (checked against the task: correctness, format, truncation) or
    # "learned" (a model's opinion: LLM judge, learned reward); the reward-hacking alarm
    # (trainers.rubrics.alarms) compares the two. "" for neither.
    signal: str = ""
    # The package extra (pyproject's optional-dependencies) that brings what the kind imports when it is
    # built or scores, beyond the trainer's own install (`all`); "" for nothing more. The image installs
    # every extra a kind declares (tests/deploy/test_image_extras.py), so a kind added with a new package
    # says so here once.
    extra: str = ""

    def validate(self, config: Any) -> Errors:
        """Every problem with `config` as {dotted field path: [messages]}; {} when it is valid. The form,
        the API, the CLI and build() all ask this, so they refuse the same configs.

        First the JSON schema, then the rules across fields ("min digits ≤ max digits", "the pattern
        compiles"), which the kind's class declares as a classmethod `check_config(config) -> errors`
        taking the config with its defaults filled in. Built-in classes are cheap to import; a plugin's
        class may not be, so only its schema is checked before it is built.
        """
        errors = validate_config(self.config_schema, config)
        if errors or not self.target.startswith("trainers."):
            return errors
        try:
            check = getattr(self.target_class(), "check_config", None)
        except ImportError as exc:  # an ecosystem kind whose package this machine lacks
            return {"": [f"The {self.name} kind needs a package that is not installed here: {exc}"]}
        return check(config_with_defaults(self.config_schema, config)) if check else {}

    def target_class(self) -> Any:
        module_name, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module_name), attr)

    def build(self, config: dict[str, Any]) -> Any:
        errors = self.validate(config)
        if errors:
            raise ValueError(f"invalid {self.name} config: {format_errors(errors)}")
        return self.target_class()(**config_with_defaults(self.config_schema, config))


class UnknownKind(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; we want it readable
        return self.args[0]


def validate_config(schema: dict[str, Any], config: Any) -> Errors:
    """Validate `config` against `schema`; return {dotted field path: [messages]} ({} when valid).

    Every problem is reported in one pass, in plain words that name the field by its schema title
    ("Learning rate must be more than 0 (got -1).", not jsonschema's "-1 is less than or equal to the
    minimum of 0"): the forms, the API and the CLI all show these. Errors on the whole object (a missing
    required property, say) are reported under the name of the property concerned where one can be
    found, else under "".
    """
    errors: Errors = {}
    for error in sorted(
        Draft202012Validator(schema).iter_errors(config), key=lambda e: list(e.absolute_path)
    ):
        path = ".".join(str(p) for p in error.absolute_path)
        if error.validator == "required" and not path.endswith(tuple("0123456789")):
            missing = error.message.split("'")[1] if "'" in error.message else ""
            if missing:
                path = f"{path}.{missing}" if path else missing
        errors.setdefault(path, []).append(plain_message(schema, error))
    return errors


_TYPE_WORDS = {
    "integer": "a whole number",
    "number": "a number",
    "string": "text",
    "boolean": "true or false",
    "array": "a list",
    "object": "an object (a mapping of names to values)",
    "null": "empty",
}


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "…"


def _number(value: Any) -> str:
    """1e-06 rather than 1e-06 as repr gives it, and 2 rather than 2.0."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def field_title(schema: dict[str, Any], path: Sequence[Any]) -> str:
    """The title people know a field by: the schema's `title` of the property at `path` (its key in
    words when it has none), with "item N" (1-based) for a position in a list."""
    title = ""
    positions: list[str] = []
    node: Any = schema
    for part in path:
        if isinstance(part, int):
            positions.append(f"{'item' if not positions else 'entry'} {part + 1}")
            items = node.get("items") if isinstance(node, dict) else None
            prefix = node.get("prefixItems") if isinstance(node, dict) else None
            if isinstance(prefix, list) and part < len(prefix):
                node = prefix[part]
            else:
                node = items if isinstance(items, dict) else {}
            continue
        props = node.get("properties", {}) if isinstance(node, dict) else {}
        node = props.get(part, {})
        named = node.get("title") if isinstance(node, dict) else None
        title = named or str(part).replace("_", " ").capitalize()
        positions = []
    if positions:
        return f"{title or 'The value'}, {', '.join(positions)}"
    return title or "The value"


def plain_message(schema: dict[str, Any], error: Any) -> str:
    """One jsonschema error as a sentence naming the field's title."""
    path = list(error.absolute_path)
    kind, bound, value = error.validator, error.validator_value, error.instance
    if kind == "required":
        missing = error.message.split("'")[1] if "'" in error.message else ""
        return f"{field_title(schema, [*path, missing]) if missing else 'A field'} is required."
    if kind == "additionalProperties":
        known = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        extra = [k for k in value if k not in known] if isinstance(value, dict) else []
        return f"Unknown field(s): {', '.join(repr(k) for k in extra)}"
    title = field_title(schema, path)
    got = f" (got {_shown(value)})"
    if kind == "minimum":
        return f"{title} must be {_number(bound)} or more{got}."
    if kind == "exclusiveMinimum":
        return f"{title} must be more than {_number(bound)}{got}."
    if kind == "maximum":
        return f"{title} must be {_number(bound)} or less{got}."
    if kind == "exclusiveMaximum":
        return f"{title} must be less than {_number(bound)}{got}."
    if kind == "type":
        types = [bound] if isinstance(bound, str) else list(bound)
        words = " or ".join(_TYPE_WORDS.get(t, t) for t in types)
        return f"{title} must be {words}{got}."
    if kind in ("enum", "const"):
        options = bound if kind == "enum" else [bound]
        close = (
            difflib.get_close_matches(value, [o for o in options if isinstance(o, str)], n=3, cutoff=0.6)
            if isinstance(value, str)
            else []
        )
        hint = f" Did you mean {' or '.join(_shown(c) for c in close)}?" if close else ""
        # Every valid name, so a typo can be fixed from the message alone.
        listed = ", ".join(_shown(o) for o in options)
        return f"{title} must be one of: {listed}{got}.{hint}"
    if kind == "pattern":
        return f"{title} is not in the expected form{got}; it must match {bound}."
    if kind == "minLength":
        if bound == 1:
            return f"{title} cannot be empty."
        return f"{title} must be at least {bound} characters long."
    if kind == "maxLength":
        return f"{title} must be at most {bound} characters long (it has {len(value)})."
    if kind == "minItems":
        return f"{title} needs at least {bound} item{'s' if bound != 1 else ''}."
    if kind == "maxItems":
        return f"{title} takes at most {bound} item{'s' if bound != 1 else ''} (it has {len(value)})."
    if kind == "uniqueItems":
        return f"{title} lists the same item twice."
    if kind == "multipleOf":
        return f"{title} must be a multiple of {_number(bound)}{got}."
    return f"{title}: {error.message}"


def format_errors(errors: Errors) -> str:
    return "; ".join(f"{path or 'config'}: {', '.join(messages)}" for path, messages in errors.items())


def config_with_defaults(schema: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """Fill top-level defaults declared in the schema for keys the config leaves out."""
    filled = dict(config)
    for key, prop in schema.get("properties", {}).items():
        if key not in filled and "default" in prop:
            filled[key] = prop["default"]
    return filled


# ---- run kinds whose loop is a recipe of its own -------------------------------------------------------
# A preset here runs its recipe's `train(config, **the Trainer's keyword arguments)` instead of the
# GRPO-family loop (trainers.recipes.grpo.train dispatches); every other preset is that loop.
RECIPE_PRESETS: dict[str, str] = {
    "training_free_grpo": "trainers.recipes.training_free_grpo:train",
}


def recipe_train(preset: str | None) -> Any:
    """The `train` function of `preset`'s recipe, or None for the GRPO-family loop."""
    target = RECIPE_PRESETS.get(preset or "")
    if target is None:
        return None
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)

"""What a registered kind is: `KindSpec` (name, form schema, cross-field rules, lazily built class),
and the schema validation every kind's config goes through.

A leaf module: the built-in environment and criterion kinds (`trainers.envs`, `trainers.rubrics.kinds`)
declare their specs with it, and `trainers.registry` collects them. Importing it stays cheap (no torch,
no environment code).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

Errors = dict[str, list[str]]


@dataclass(frozen=True)
class KindSpec:
    name: str
    title: str
    description: str
    config_schema: dict[str, Any]
    target: str  # "package.module:ClassName", imported lazily by build()
    # Criterion kinds that need a model (LLM judge, learned reward) cannot score in the web process.
    needs_model: bool = False
    # Criterion kinds: the values a criterion of this kind typically takes, in words ("0 or 1",
    # "−1 to 1"), shown by the rubric builder so no one weighs a criterion blind to its scale.
    typical_range: str = ""
    # Criterion kinds: "verifiable" (checked against the task: correctness, format, truncation) or
    # "learned" (a model's opinion: LLM judge, learned reward); the reward-hacking alarm
    # (trainers.rubrics.alarms) compares the two. "" for neither.
    signal: str = ""

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

    Errors on the whole object (a missing required property, say) are reported under the name of the
    property concerned where one can be found, else under "".
    """
    errors: Errors = {}
    for error in Draft202012Validator(schema).iter_errors(config):
        path = ".".join(str(p) for p in error.absolute_path)
        message = error.message
        if error.validator == "required" and not path:
            missing = error.message.split("'")[1] if "'" in error.message else ""
            path, message = missing, "This field is required."
        elif error.validator == "additionalProperties":
            message = f"Unknown field(s): {error.message.split('(')[-1].rstrip(')')}"
        errors.setdefault(path, []).append(message)
    return errors


def format_errors(errors: Errors) -> str:
    return "; ".join(f"{path or 'config'}: {', '.join(messages)}" for path, messages in errors.items())


def config_with_defaults(schema: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """Fill top-level defaults declared in the schema for keys the config leaves out."""
    filled = dict(config)
    for key, prop in schema.get("properties", {}).items():
        if key not in filled and "default" in prop:
            filled[key] = prop["default"]
    return filled

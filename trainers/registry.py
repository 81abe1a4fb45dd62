"""Registries of environment kinds and rubric criterion kinds, each with a JSON schema.

The dashboard renders config forms from these schemas and validates with them; the trainer builds
environments and criteria from the same entries. Importing this module must stay cheap and must not
import torch: kinds are described by data and their classes are imported only when built.

Custom kinds plug in through the entry point groups `rollout_studio.environments` and
`rollout_studio.criteria`: each entry point loads a `KindSpec`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from jsonschema import Draft202012Validator

ENVIRONMENT_ENTRY_POINTS = "rollout_studio.environments"
CRITERION_ENTRY_POINTS = "rollout_studio.criteria"


@dataclass(frozen=True)
class KindSpec:
    name: str
    title: str
    description: str
    config_schema: dict[str, Any]
    target: str  # "package.module:ClassName", imported lazily by build()
    # Criterion kinds that need a model (LLM judge, learned reward) cannot score in the web process.
    needs_model: bool = False

    def build(self, config: dict[str, Any]) -> Any:
        module_name, _, attr = self.target.partition(":")
        cls = getattr(importlib.import_module(module_name), attr)
        return cls(**config_with_defaults(self.config_schema, config))


class UnknownKind(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; we want it readable
        return self.args[0]


def _plugins(group: str) -> dict[str, KindSpec]:
    found = {}
    for ep in entry_points(group=group):
        spec = ep.load()
        found[spec.name] = spec
    return found


@cache
def environment_kinds() -> dict[str, KindSpec]:
    from trainers.envs import BUILTIN_ENVIRONMENTS

    return {**{s.name: s for s in BUILTIN_ENVIRONMENTS}, **_plugins(ENVIRONMENT_ENTRY_POINTS)}


@cache
def criterion_kinds() -> dict[str, KindSpec]:
    from trainers.rubrics import BUILTIN_CRITERIA

    return {**{s.name: s for s in BUILTIN_CRITERIA}, **_plugins(CRITERION_ENTRY_POINTS)}


def environment_kind(name: str) -> KindSpec:
    try:
        return environment_kinds()[name]
    except KeyError:
        raise UnknownKind(f"unknown environment kind {name!r}; known: {', '.join(sorted(environment_kinds()))}") from None


def criterion_kind(name: str) -> KindSpec:
    try:
        return criterion_kinds()[name]
    except KeyError:
        raise UnknownKind(f"unknown criterion kind {name!r}; known: {', '.join(sorted(criterion_kinds()))}") from None


def validate_config(schema: dict[str, Any], config: Any) -> dict[str, list[str]]:
    """Validate `config` against `schema`; return {dotted field path: [messages]} ({} when valid).

    Errors on the whole object (a missing required property, say) are reported under the name of the
    property concerned where one can be found, else under "".
    """
    errors: dict[str, list[str]] = {}
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


def config_with_defaults(schema: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """Fill top-level defaults declared in the schema for keys the config leaves out."""
    filled = dict(config)
    for key, prop in schema.get("properties", {}).items():
        if key not in filled and "default" in prop:
            filled[key] = prop["default"]
    return filled

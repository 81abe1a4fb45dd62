"""Registries of environment kinds and rubric criterion kinds, each with a JSON schema.

The dashboard renders config forms from these schemas and validates with them; the trainer builds
environments and criteria from the same entries. Importing this module must stay cheap and must not
import torch: kinds are described by data and their classes are imported only when built.

`KindSpec` itself lives in `trainers.kinds`, which the kind modules import: they never import this
module, so the registry depends on them and not the other way round.

Custom kinds plug in through the entry point groups `rollout_studio.environments` and
`rollout_studio.criteria`: each entry point loads a `KindSpec`.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points

from trainers.envs import BUILTIN_ENVIRONMENTS
from trainers.kinds import KindSpec, UnknownKind, config_with_defaults, validate_config
from trainers.rubrics.kinds import BUILTIN_CRITERIA

ENVIRONMENT_ENTRY_POINTS = "rollout_studio.environments"
CRITERION_ENTRY_POINTS = "rollout_studio.criteria"


def _plugins(group: str) -> dict[str, KindSpec]:
    found = {}
    for ep in entry_points(group=group):
        spec = ep.load()
        found[spec.name] = spec
    return found


@cache
def environment_kinds() -> dict[str, KindSpec]:
    return {**{s.name: s for s in BUILTIN_ENVIRONMENTS}, **_plugins(ENVIRONMENT_ENTRY_POINTS)}


@cache
def criterion_kinds() -> dict[str, KindSpec]:
    return {**{s.name: s for s in BUILTIN_CRITERIA}, **_plugins(CRITERION_ENTRY_POINTS)}


def environment_kind(name: str) -> KindSpec:
    try:
        return environment_kinds()[name]
    except KeyError:
        raise UnknownKind(
            f"unknown environment kind {name!r}; known: {', '.join(sorted(environment_kinds()))}"
        ) from None


def criterion_kind(name: str) -> KindSpec:
    try:
        return criterion_kinds()[name]
    except KeyError:
        raise UnknownKind(
            f"unknown criterion kind {name!r}; known: {', '.join(sorted(criterion_kinds()))}"
        ) from None


def explanation_label(kind: str | None) -> str:
    """How the pages label a criterion's explanation: by its kind ("judge says" for an LLM judge, "what the
    pattern matched" for a regex); "details" for a kind this machine does not know."""
    spec = criterion_kinds().get(kind or "")
    return spec.explanation_label if spec is not None else KindSpec.explanation_label


__all__ = [
    "KindSpec",
    "UnknownKind",
    "config_with_defaults",
    "criterion_kind",
    "criterion_kinds",
    "environment_kind",
    "environment_kinds",
    "explanation_label",
    "validate_config",
]

"""Writes for environments: create, and edit (a changed config makes a new version; runs keep theirs)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from trainers.registry import UnknownKind, environment_kind
from webapp.experiments.models import (
    Environment,
    EnvironmentVersion,
)
from webapp.experiments.services.definitions import (
    definition_create,
    definition_update,
    prefixed_errors,
    raise_definition_errors,
)
from webapp.projects.models import Project


def validate_environment_config(kind: str, config: Any) -> dict[str, Any]:
    try:
        spec = environment_kind(kind)
    except UnknownKind as exc:
        raise ValidationError({"kind": [str(exc)]}) from None
    if not isinstance(config, dict):
        raise ValidationError({"config": ["Must be a JSON object."]})
    errors = spec.validate(config)
    if errors:
        raise ValidationError(prefixed_errors(errors, "config"))
    return config


@transaction.atomic
def environment_create(
    *, project: Project, name: str, kind: str, config: dict[str, Any], user, description: str = ""
) -> Environment:
    raise_definition_errors(
        name=name, description=description, check=lambda: validate_environment_config(kind, config)
    )
    return definition_create(
        Environment,
        project=project,
        name=name,
        user=user,
        description=description,
        content={"kind": kind, "config": config},
    )


@transaction.atomic
def environment_update(
    *,
    environment: Environment,
    user,
    kind: str,
    config: dict[str, Any],
    name: str | None = None,
    description: str | None = None,
    note: str = "",
) -> EnvironmentVersion:
    """Edit an environment. A changed kind or config makes a new version; runs keep theirs."""
    raise_definition_errors(
        name=name, description=description, check=lambda: validate_environment_config(kind, config)
    )
    return definition_update(
        environment,
        user=user,
        content={"kind": kind, "config": config},
        name=name,
        description=description,
        note=note,
    )

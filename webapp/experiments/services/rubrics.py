"""Writes for rubrics: create, and edit (a changed spec makes a new version; runs keep theirs)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from trainers.rubrics import validate_rubric
from webapp.experiments.judges import judge_errors
from webapp.experiments.models import (
    Rubric,
    RubricVersion,
)
from webapp.experiments.services.definitions import (
    definition_create,
    definition_update,
    raise_definition_errors,
)
from webapp.projects.models import Project


def validate_rubric_spec(spec: Any, project: Project | None = None) -> dict[str, Any]:
    """The spec, or ValidationError by field path: the spec itself, then (with `project`) whether its LLM
    judges can run — a model the workers serve, a secret the project has."""
    if not isinstance(spec, dict):
        raise ValidationError({"spec": ["Must be a JSON object with 'aggregation' and 'criteria'."]})
    errors = validate_rubric(spec)
    if not errors and project is not None:
        errors = judge_errors(project=project, spec=spec)
    if errors:
        raise ValidationError(errors)
    return spec


@transaction.atomic
def rubric_create(
    *, project: Project, name: str, spec: dict[str, Any], user, description: str = ""
) -> Rubric:
    raise_definition_errors(
        name=name, description=description, check=lambda: validate_rubric_spec(spec, project)
    )
    return definition_create(
        Rubric, project=project, name=name, user=user, description=description, content={"spec": spec}
    )


@transaction.atomic
def rubric_update(
    *,
    rubric: Rubric,
    user,
    spec: dict[str, Any],
    name: str | None = None,
    description: str | None = None,
    note: str = "",
) -> RubricVersion:
    """Edit a rubric. A changed spec makes a new version; runs keep theirs."""
    raise_definition_errors(
        name=name, description=description, check=lambda: validate_rubric_spec(spec, rubric.project)
    )
    return definition_update(
        rubric, user=user, content={"spec": spec}, name=name, description=description, note=note
    )

"""Rules every versioned definition (environment, rubric) and every run shares: a required name, a
description's limit, field errors under a prefix; creating a definition with its version 1 and
versioning it on change, announced to the activity log."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.core.exceptions import ValidationError

from webapp.core.limits import DESCRIPTION_MAX_CHARS
from webapp.experiments.models import (
    VersionedDefinition,
)
from webapp.experiments.signals import definition_versioned
from webapp.projects.models import Project

Definition = TypeVar("Definition", bound=VersionedDefinition)


def prefixed_errors(errors: dict[str, list[str]], prefix: str) -> dict[str, list[str]]:
    return {(f"{prefix}.{path}" if path else prefix): messages for path, messages in errors.items()}


def require_name(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": ["Name is required."]})
    if len(name) > 120:
        raise ValidationError({"name": ["At most 120 characters."]})
    return name


def check_description(description: str | None) -> None:
    if description is not None and len(description) > DESCRIPTION_MAX_CHARS:
        raise ValidationError({"description": [f"At most {DESCRIPTION_MAX_CHARS} characters."]})


def _name_taken(model: type[VersionedDefinition], name: str) -> ValidationError:
    noun = str(model._meta.verbose_name)
    article = "An" if noun[:1] in "aeiou" else "A"
    return ValidationError({"name": [f"{article} {noun} named {name!r} already exists in this project."]})


def definition_create(
    model: type[Definition],
    *,
    project: Project,
    name: str,
    user,
    description: str,
    content: dict[str, Any],
) -> Definition:
    """A new environment or rubric with its version 1 holding `content` (the version's fields)."""
    name = require_name(name)
    check_description(description)
    if model._default_manager.filter(project=project, name=name).exists():
        raise _name_taken(model, name)
    definition = model._default_manager.create(
        project=project, name=name, description=description, created_by=user
    )
    version = definition.versions.create(number=1, created_by=user, **content)
    _log_version(definition, version, user)
    return definition


def definition_update(
    definition: Definition,
    *,
    user,
    content: dict[str, Any],
    name: str | None,
    description: str | None,
    note: str,
):
    """Rename / redescribe in place; changed `content` makes a new version (runs keep theirs).

    The row lock serialises concurrent edits so two of them cannot both take the next number.
    """
    model = type(definition)
    check_description(description)
    locked = model._default_manager.select_for_update().get(pk=definition.pk)
    if name is not None:
        name = require_name(name)
        if model._default_manager.filter(project=locked.project, name=name).exclude(pk=locked.pk).exists():
            raise _name_taken(model, name)
        locked.name = name
    if description is not None:
        locked.description = description
    locked.save()
    latest = locked.latest_version
    if all(getattr(latest, field) == value for field, value in content.items()):
        return latest
    version = locked.versions.create(number=latest.number + 1, note=note, created_by=user, **content)
    _log_version(locked, version, user)
    return version


def _log_version(definition: VersionedDefinition, version, user) -> None:
    """A new environment or rubric version is announced (the project's activity log records it)."""
    definition_versioned.send(sender=type(definition), definition=definition, version=version, user=user)


def definition_errors(
    *, name: str | None, description: str | None, check: Callable[[], Any]
) -> dict[str, list[str]]:
    """Every problem with a definition's name, description and content (`check` raises the content's
    ValidationError), in one pass: create and update refuse with all of them, and the pages ask this
    too while some fields do not parse yet."""
    errors: dict[str, list[str]] = {}
    for step in (
        lambda: name is not None and require_name(name),
        lambda: check_description(description),
        check,
    ):
        try:
            step()
        except ValidationError as error:
            for path, messages in error.message_dict.items():
                errors.setdefault(path, []).extend(messages)
    return errors


def raise_definition_errors(*, name: str | None, description: str | None, check: Callable[[], Any]) -> None:
    errors = definition_errors(name=name, description=description, check=check)
    if errors:
        raise ValidationError(errors)

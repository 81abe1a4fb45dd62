"""Writes for environments, rubrics and runs. Views, API endpoints and tasks call these.

Validation uses the registries in `trainers/` (JSON schemas), so the browser, the API and the trainer
agree on what a valid config is. Every write is atomic: a validation error writes nothing.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, FloatField, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from trainers.config import resolve_run_config, validate_run_config
from trainers.registry import UnknownKind, environment_kind, validate_config
from trainers.rubrics import validate_rubric
from webapp.accounts.models import hash_token
from webapp.experiments.models import (
    ALLOWED_TRANSITIONS,
    FINAL_STATUSES,
    Checkpoint,
    Environment,
    EnvironmentVersion,
    Queue,
    Rubric,
    RubricVersion,
    Run,
    RunStatus,
    VersionedDefinition,
)
from webapp.live.broadcast import broadcast_run_on_commit
from webapp.projects.models import Project


def _prefixed(errors: dict[str, list[str]], prefix: str) -> dict[str, list[str]]:
    return {(f"{prefix}.{path}" if path else prefix): messages for path, messages in errors.items()}


def _require_name(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": ["This field is required."]})
    if len(name) > 120:
        raise ValidationError({"name": ["At most 120 characters."]})
    return name


# --- environments and rubrics: versioned definitions --------------------------------------------


def _name_taken(model: type[VersionedDefinition], name: str) -> ValidationError:
    noun = model._meta.verbose_name
    article = "An" if noun[:1] in "aeiou" else "A"
    return ValidationError({"name": [f"{article} {noun} named {name!r} already exists in this project."]})


def _definition_create(
    model: type[VersionedDefinition], *, project: Project, name: str, user, description: str, content: dict[str, Any]
) -> VersionedDefinition:
    """A new environment or rubric with its version 1 holding `content` (the version's fields)."""
    name = _require_name(name)
    if model.objects.filter(project=project, name=name).exists():
        raise _name_taken(model, name)
    definition = model.objects.create(project=project, name=name, description=description, created_by=user)
    definition.versions.create(number=1, created_by=user, **content)
    return definition


def _definition_update(
    definition: VersionedDefinition, *, user, content: dict[str, Any], name: str | None, description: str | None,
    note: str,
):
    """Rename / redescribe in place; changed `content` makes a new version (runs keep theirs).

    The row lock serialises concurrent edits so two of them cannot both take the next number.
    """
    model = type(definition)
    locked = model.objects.select_for_update().get(pk=definition.pk)
    if name is not None:
        name = _require_name(name)
        if model.objects.filter(project=locked.project, name=name).exclude(pk=locked.pk).exists():
            raise _name_taken(model, name)
        locked.name = name
    if description is not None:
        locked.description = description
    locked.save()
    latest = locked.versions.order_by("-number").first()
    if all(getattr(latest, field) == value for field, value in content.items()):
        return latest
    return locked.versions.create(number=latest.number + 1, note=note, created_by=user, **content)


def validate_environment_config(kind: str, config: Any) -> dict[str, Any]:
    try:
        spec = environment_kind(kind)
    except UnknownKind as exc:
        raise ValidationError({"kind": [str(exc)]}) from None
    if not isinstance(config, dict):
        raise ValidationError({"config": ["Must be a JSON object."]})
    errors = validate_config(spec.config_schema, config)
    if errors:
        raise ValidationError(_prefixed(errors, "config"))
    return config


@transaction.atomic
def environment_create(
    *, project: Project, name: str, kind: str, config: dict[str, Any], user, description: str = ""
) -> Environment:
    config = validate_environment_config(kind, config)
    return _definition_create(Environment, project=project, name=name, user=user, description=description,
                              content={"kind": kind, "config": config})


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
    config = validate_environment_config(kind, config)
    return _definition_update(environment, user=user, content={"kind": kind, "config": config}, name=name,
                              description=description, note=note)


def validate_rubric_spec(spec: Any) -> dict[str, Any]:
    if not isinstance(spec, dict):
        raise ValidationError({"spec": ["Must be a JSON object with 'aggregation' and 'criteria'."]})
    errors = validate_rubric(spec)
    if errors:
        raise ValidationError(errors)
    return spec


@transaction.atomic
def rubric_create(*, project: Project, name: str, spec: dict[str, Any], user, description: str = "") -> Rubric:
    spec = validate_rubric_spec(spec)
    return _definition_create(Rubric, project=project, name=name, user=user, description=description,
                              content={"spec": spec})


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
    spec = validate_rubric_spec(spec)
    return _definition_update(rubric, user=user, content={"spec": spec}, name=name, description=description,
                              note=note)


# --- runs -------------------------------------------------------------------------------------------


def new_ingest_token() -> str:
    return "rsr_" + secrets.token_urlsafe(32)


@transaction.atomic
def run_create(
    *,
    project: Project,
    name: str,
    environment: Environment,
    rubric: Rubric,
    preset: str,
    overrides: dict[str, Any],
    user,
    queue: str = Queue.CPU,
    parent: Run | None = None,
    parent_checkpoint: Checkpoint | None = None,
    lineage: str = "",
    dispatch: bool = True,
    environment_version: EnvironmentVersion | None = None,
    rubric_version: RubricVersion | None = None,
) -> tuple[Run, str]:
    """Create a run pinned to the latest environment and rubric versions (or the given ones, for
    resume and fork) and queue it after commit.

    Returns the run and its raw ingestion token (only its hash is stored).
    """
    name = _require_name(name)
    errors: dict[str, list[str]] = {}
    if environment.project_id != project.pk:
        errors["environment"] = ["Choose an environment of this project."]
    if rubric.project_id != project.pk:
        errors["rubric"] = ["Choose a rubric of this project."]
    if queue not in Queue.values:
        errors["queue"] = [f"Unknown queue {queue!r}; choose one of {', '.join(Queue.values)}."]
    if not isinstance(overrides, dict):
        errors["overrides"] = ["Must be a JSON object of knob values."]
    if errors:
        raise ValidationError(errors)
    try:
        knobs = resolve_run_config(preset, overrides)
    except (KeyError, ValueError) as exc:
        raise ValidationError({"preset": [str(exc).strip("'\"")]}) from None
    knob_errors = validate_run_config(knobs)
    if knob_errors:
        raise ValidationError(_prefixed(knob_errors, "config"))

    environment_version = environment_version or environment.versions.order_by("-number").first()
    rubric_version = rubric_version or rubric.versions.order_by("-number").first()
    if environment_version.environment_id != environment.pk or rubric_version.rubric_id != rubric.pk:
        raise ValidationError({"environment": ["The pinned versions must belong to the chosen environment and rubric."]})
    resolved = {
        **knobs,
        "environment": environment_version.snapshot(),
        "rubric": rubric_version.snapshot(),
    }
    token = new_ingest_token()
    run = Run.objects.create(
        project=project,
        name=name,
        created_by=user,
        environment_version=environment_version,
        rubric_version=rubric_version,
        preset=preset,
        overrides=overrides,
        resolved_config=resolved,
        queue=queue,
        parent=parent,
        parent_checkpoint=parent_checkpoint,
        lineage=lineage,
        max_steps=int(knobs.get("max_steps", 0)),
        ingest_token_hash=hash_token(token),
    )
    if dispatch:
        from webapp.experiments.dispatch import enqueue_run_on_commit

        enqueue_run_on_commit(run)
    broadcast_run_on_commit(run, {"type": "status", "status": run.status})
    return run, token


def _resume_point(run: Run, checkpoint: Checkpoint | None) -> Checkpoint:
    if run.is_external:
        raise ValidationError({"origin": ["This run was trained outside the dashboard: resume it with its own trainer."]})
    if run.is_active:
        raise ValidationError({"status": ["This run is still active: cancel it (or wait for it) first."]})
    if checkpoint is None:
        checkpoint = run.checkpoints.filter(deleted=False).order_by("-step").first()
        if checkpoint is None:
            raise ValidationError({"checkpoint": ["This run has no checkpoint to start from."]})
    elif checkpoint.run_id != run.pk or checkpoint.deleted:
        raise ValidationError({"checkpoint": ["Choose a kept checkpoint of this run."]})
    return checkpoint


def run_resume(*, run: Run, user, checkpoint: Checkpoint | None = None, dispatch: bool = True) -> tuple[Run, str]:
    """Continue a stopped run from a checkpoint (the latest by default) as a new, linked run with
    exactly the same config: the trainer restores weights, optimizer, RNG and data position, and
    starts at the step after the checkpoint."""
    checkpoint = _resume_point(run, checkpoint)
    return run_create(
        project=run.project, name=f"{run.name} · resumed @{checkpoint.step}",
        environment=run.environment_version.environment, rubric=run.rubric_version.rubric,
        environment_version=run.environment_version, rubric_version=run.rubric_version,
        preset=run.preset, overrides=run.overrides, user=user, queue=run.queue,
        parent=run, parent_checkpoint=checkpoint, lineage="resume", dispatch=dispatch,
    )


def run_fork(
    *, run: Run, user, overrides: dict[str, Any], name: str = "", checkpoint: Checkpoint | None = None,
    dispatch: bool = True,
) -> tuple[Run, str]:
    """A new run from a checkpoint's weights with its own knobs (same environment and rubric versions).
    `overrides` are the fork's complete overrides of its preset (start from the parent's and change
    some). Its step count starts at the checkpoint's step."""
    checkpoint = _resume_point(run, checkpoint)
    if not isinstance(overrides, dict):
        raise ValidationError({"overrides": ["Must be a JSON object of knob values."]})
    return run_create(
        project=run.project, name=name or f"{run.name} · fork @{checkpoint.step}",
        environment=run.environment_version.environment, rubric=run.rubric_version.rubric,
        environment_version=run.environment_version, rubric_version=run.rubric_version,
        preset=run.preset, overrides=overrides, user=user, queue=run.queue,
        parent=run, parent_checkpoint=checkpoint, lineage="fork", dispatch=dispatch,
    )


def run_transition(run_id: int, to: str, *, only_from: tuple[str, ...] | None = None, **fields: Any) -> bool:
    """Move a run to status `to` if the status machine allows it from its current status (and, with
    `only_from`, only from those statuses).

    A conditional UPDATE, so two racing writers (worker, reaper, cancel button) can never both win.
    Returns whether this call made the change.
    """
    allowed_from = [status for status, targets in ALLOWED_TRANSITIONS.items() if to in targets]
    if only_from is not None:
        allowed_from = [status for status in allowed_from if status in only_from]
    now = timezone.now()
    values: dict[str, Any] = {"status": to, "status_changed_at": now, **fields}
    if to == RunStatus.RUNNING:
        values.setdefault("started_at", now)
        values.setdefault("heartbeat_at", now)
    if to in FINAL_STATUSES:
        values.setdefault("finished_at", now)
    with transaction.atomic():
        changed = Run.objects.filter(pk=run_id, status__in=allowed_from).update(**values)
        if changed:
            run = Run.objects.get(pk=run_id)
            summary = {"type": "status", "status": to, **run.iso_times()}
            if fields.get("error_message"):
                summary["error"] = fields["error_message"]
            broadcast_run_on_commit(run, summary)
    return bool(changed)


def run_request_cancel(*, run: Run) -> str:
    """Cancel a run: a queued run is cancelled at once (and its task revoked); a running one is asked
    to stop cooperatively — the trainer learns it from its next ingestion reply."""
    # Conditional updates against the row, not `run.status`: if a worker claimed the run since `run`
    # was read, it must be asked to stop rather than be marked cancelled under the trainer's feet.
    if run_transition(
        run.pk, RunStatus.CANCELLED, only_from=(RunStatus.QUEUED,), cancel_requested=True
    ):
        from webapp.experiments.dispatch import revoke_run_task

        transaction.on_commit(lambda: revoke_run_task(run))
        return RunStatus.CANCELLED
    if Run.objects.filter(pk=run.pk, status__in=[RunStatus.STARTING, RunStatus.RUNNING]).update(
        cancel_requested=True
    ):
        broadcast_run_on_commit(run, {"type": "cancel_requested"})
        return "cancel_requested"
    current = Run.objects.get(pk=run.pk)
    raise ValidationError({"status": [f"A {current.get_status_display().lower()} run cannot be cancelled."]})


def run_progress_fields(*, step: int, last_reward: float | None, best_reward: float | None) -> dict[str, Any]:
    """The UPDATE expressions that keep a run's denormalised progress in step with ingested metrics:
    the step only moves forward, the best reward is a maximum. Ingestion folds them into its own
    update of the run (one row version per batch instead of three)."""
    fields: dict[str, Any] = {"current_step": Greatest(F("current_step"), Value(step))}
    if last_reward is not None:
        fields["last_reward"] = last_reward
    if best_reward is not None:
        best = Value(best_reward, output_field=FloatField())
        # Greatest ignores NULL on Postgres but returns NULL on SQLite: Coalesce covers a first reward.
        fields["best_reward"] = Coalesce(Greatest(F("best_reward"), best), best)
    return fields


def run_record_progress(*, run_id: int, step: int, last_reward: float | None, best_reward: float | None) -> None:
    """Keep the list pages' denormalised progress in step with ingested metrics."""
    Run.objects.filter(pk=run_id).update(
        **run_progress_fields(step=step, last_reward=last_reward, best_reward=best_reward)
    )


def run_heartbeat(run_id: int) -> None:
    Run.objects.filter(pk=run_id).update(heartbeat_at=timezone.now())


__all__ = [
    "environment_create",
    "environment_update",
    "rubric_create",
    "rubric_update",
    "run_create",
    "run_transition",
    "run_resume",
    "run_fork",
    "run_request_cancel",
    "run_record_progress",
    "run_heartbeat",
]

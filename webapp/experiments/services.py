"""Writes for environments, rubrics and runs. Views, API endpoints and tasks call these.

Validation uses the registries in `trainers/` (JSON schemas), so the browser, the API and the trainer
agree on what a valid config is. Every write is atomic: a validation error writes nothing.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from trainers.config import resolve_run_config, validate_run_config
from trainers.dpo import DPO_SCHEMA
from trainers.kinds import config_with_defaults
from trainers.registry import UnknownKind, environment_kind, validate_config
from trainers.rubrics import validate_rubric
from webapp.accounts.models import hash_token
from webapp.core.dispatch import Queue, Task, queue_refusal, revoke, send_on_commit
from webapp.core.limits import DESCRIPTION_MAX_CHARS
from webapp.experiments.models import (
    ALLOWED_TRANSITIONS,
    FINAL_STATUSES,
    Checkpoint,
    Environment,
    EnvironmentVersion,
    Rubric,
    RubricVersion,
    Run,
    RunKind,
    RunStatus,
    VersionedDefinition,
)
from webapp.live.broadcast import broadcast_on_commit
from webapp.projects.models import Project
from webapp.review.models import ActivityVerb
from webapp.review.services.activity import log_activity

Definition = TypeVar("Definition", bound=VersionedDefinition)


def _prefixed(errors: dict[str, list[str]], prefix: str) -> dict[str, list[str]]:
    return {(f"{prefix}.{path}" if path else prefix): messages for path, messages in errors.items()}


def _require_name(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": ["Name is required."]})
    if len(name) > 120:
        raise ValidationError({"name": ["At most 120 characters."]})
    return name


def _check_description(description: str | None) -> None:
    if description is not None and len(description) > DESCRIPTION_MAX_CHARS:
        raise ValidationError({"description": [f"At most {DESCRIPTION_MAX_CHARS} characters."]})


# --- environments and rubrics: versioned definitions --------------------------------------------


def _name_taken(model: type[VersionedDefinition], name: str) -> ValidationError:
    noun = str(model._meta.verbose_name)
    article = "An" if noun[:1] in "aeiou" else "A"
    return ValidationError({"name": [f"{article} {noun} named {name!r} already exists in this project."]})


def _definition_create(
    model: type[Definition],
    *,
    project: Project,
    name: str,
    user,
    description: str,
    content: dict[str, Any],
) -> Definition:
    """A new environment or rubric with its version 1 holding `content` (the version's fields)."""
    name = _require_name(name)
    _check_description(description)
    if model._default_manager.filter(project=project, name=name).exists():
        raise _name_taken(model, name)
    definition = model._default_manager.create(
        project=project, name=name, description=description, created_by=user
    )
    version = definition.versions.create(number=1, created_by=user, **content)
    _log_version(definition, version, user)
    return definition


def _definition_update(
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
    _check_description(description)
    locked = model._default_manager.select_for_update().get(pk=definition.pk)
    if name is not None:
        name = _require_name(name)
        if model._default_manager.filter(project=locked.project, name=name).exclude(pk=locked.pk).exists():
            raise _name_taken(model, name)
        locked.name = name
    if description is not None:
        locked.description = description
    locked.save()
    latest = locked.versions.order_by("-number").first()
    if all(getattr(latest, field) == value for field, value in content.items()):
        return latest
    version = locked.versions.create(number=latest.number + 1, note=note, created_by=user, **content)
    _log_version(locked, version, user)
    return version


def _log_version(definition: VersionedDefinition, version, user) -> None:
    """A new environment or rubric version goes into the project's activity log."""
    is_environment = isinstance(definition, Environment)
    log_activity(
        definition.project,
        user,
        ActivityVerb.ENVIRONMENT_VERSIONED if is_environment else ActivityVerb.RUBRIC_VERSIONED,
        **{"environment_id" if is_environment else "rubric_id": definition.pk},
        name=definition.name,
        version=version.number,
    )


def definition_errors(
    *, name: str | None, description: str | None, check: Callable[[], Any]
) -> dict[str, list[str]]:
    """Every problem with a definition's name, description and content (`check` raises the content's
    ValidationError), in one pass: create and update refuse with all of them, and the pages ask this
    too while some fields do not parse yet."""
    errors: dict[str, list[str]] = {}
    for step in (
        lambda: name is not None and _require_name(name),
        lambda: _check_description(description),
        check,
    ):
        try:
            step()
        except ValidationError as error:
            for path, messages in error.message_dict.items():
                errors.setdefault(path, []).extend(messages)
    return errors


def _raise_definition_errors(*, name: str | None, description: str | None, check: Callable[[], Any]) -> None:
    errors = definition_errors(name=name, description=description, check=check)
    if errors:
        raise ValidationError(errors)


def validate_environment_config(kind: str, config: Any) -> dict[str, Any]:
    try:
        spec = environment_kind(kind)
    except UnknownKind as exc:
        raise ValidationError({"kind": [str(exc)]}) from None
    if not isinstance(config, dict):
        raise ValidationError({"config": ["Must be a JSON object."]})
    errors = spec.validate(config)
    if errors:
        raise ValidationError(_prefixed(errors, "config"))
    return config


@transaction.atomic
def environment_create(
    *, project: Project, name: str, kind: str, config: dict[str, Any], user, description: str = ""
) -> Environment:
    _raise_definition_errors(
        name=name, description=description, check=lambda: validate_environment_config(kind, config)
    )
    return _definition_create(
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
    _raise_definition_errors(
        name=name, description=description, check=lambda: validate_environment_config(kind, config)
    )
    return _definition_update(
        environment,
        user=user,
        content={"kind": kind, "config": config},
        name=name,
        description=description,
        note=note,
    )


def validate_rubric_spec(spec: Any) -> dict[str, Any]:
    if not isinstance(spec, dict):
        raise ValidationError({"spec": ["Must be a JSON object with 'aggregation' and 'criteria'."]})
    errors = validate_rubric(spec)
    if errors:
        raise ValidationError(errors)
    return spec


@transaction.atomic
def rubric_create(
    *, project: Project, name: str, spec: dict[str, Any], user, description: str = ""
) -> Rubric:
    _raise_definition_errors(name=name, description=description, check=lambda: validate_rubric_spec(spec))
    return _definition_create(
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
    _raise_definition_errors(name=name, description=description, check=lambda: validate_rubric_spec(spec))
    return _definition_update(
        rubric, user=user, content={"spec": spec}, name=name, description=description, note=note
    )


# --- runs -------------------------------------------------------------------------------------------


def run_issue_ingest_token(run: Run) -> str:
    """Give a new run its ingestion token (only the hash is stored) and return it."""
    run.ingest_token_nonce = secrets.token_hex(16)
    token = run.ingest_token()
    run.ingest_token_hash = hash_token(token)
    Run.objects.filter(pk=run.pk).update(
        ingest_token_nonce=run.ingest_token_nonce, ingest_token_hash=run.ingest_token_hash
    )
    return token


def run_config_errors(
    *, name: str, preset: str, overrides: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The resolved knobs of `preset` ← `overrides` and what is wrong with them and the name, as
    {"name" | "preset" | "config.<knob>": [messages]} ({} when valid). run_create refuses with these,
    and the run form asks it too while other fields are still wrong, so a person sees every error in
    one pass."""
    errors: dict[str, list[str]] = {}
    try:
        _require_name(name)
    except ValidationError as error:
        errors.update(error.message_dict)
    try:
        knobs = resolve_run_config(preset, overrides)
    except (KeyError, ValueError) as exc:
        return {}, {**errors, "preset": [str(exc).strip("'\"")]}
    return knobs, {**errors, **_prefixed(validate_run_config(knobs), "config")}


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
    auto_resume_count: int = 0,
) -> tuple[Run, str]:
    """Create a run pinned to the latest environment and rubric versions (or the given ones, for
    resume and fork) and queue it after commit.

    Returns the run and its raw ingestion token (only its hash is stored).
    """
    errors: dict[str, list[str]] = {}
    if environment.project_id != project.pk:
        errors["environment"] = ["Choose an environment of this project."]
    if rubric.project_id != project.pk:
        errors["rubric"] = ["Choose a rubric of this project."]
    if refusal := queue_refusal(queue):
        errors["queue"] = [refusal]
    if not isinstance(overrides, dict):
        errors["overrides"] = ["Must be a JSON object of knob values."]
        overrides = {}
    knobs, knob_errors = run_config_errors(name=name, preset=preset, overrides=overrides)
    errors.update(knob_errors)
    if errors:  # every problem at once: the name, the choices and every knob
        raise ValidationError(errors)
    name = name.strip()

    environment_version = environment_version or environment.versions.order_by("-number").first()
    rubric_version = rubric_version or rubric.versions.order_by("-number").first()
    # Every environment and rubric is created with its version 1, so both exist.
    assert environment_version is not None and rubric_version is not None
    if environment_version.environment_id != environment.pk or rubric_version.rubric_id != rubric.pk:
        raise ValidationError(
            {"environment": ["The pinned versions must belong to the chosen environment and rubric."]}
        )
    resolved = {
        **knobs,
        "environment": environment_version.snapshot(),
        "rubric": rubric_version.snapshot(),
    }
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
        auto_resume_count=auto_resume_count,
    )
    return run, _launched(run, user=user, dispatch=dispatch)


def _launched(run: Run, *, user, dispatch: bool) -> str:
    """What every new run gets, whatever its kind: its ingestion token (returned raw, once), a line in
    the project's activity, its task queued after commit, and its status pushed to open pages."""
    token = run_issue_ingest_token(run)
    log_activity(run.project, user, ActivityVerb.RUN_LAUNCHED, run_id=run.pk, name=run.name)
    if dispatch:
        _dispatch(run)
    broadcast_on_commit(run, [run.status_event()])
    return token


def _dispatch(run: Run) -> None:
    run_id = run.pk
    send_on_commit(
        Task.EXECUTE_RUN,
        args=[run_id],
        queue=run.queue,
        on_sent=lambda task_id: Run.objects.filter(pk=run_id).update(task_id=task_id),
    )


def dpo_params(params: Any) -> dict[str, Any]:
    """A DPO run's knobs with defaults filled in (trainers.dpo.DPO_SCHEMA); field errors as config.*."""
    if not isinstance(params, dict):
        raise ValidationError({"config": ["Must be a JSON object of knob values."]})
    errors = validate_config(DPO_SCHEMA, params)
    if errors:
        raise ValidationError(_prefixed(errors, "config"))
    return config_with_defaults(DPO_SCHEMA, params)


@transaction.atomic
def run_create_dpo(
    *,
    project: Project,
    snapshot: Any,
    name: str,
    params: dict[str, Any],
    user,
    queue: str = Queue.CPU,
    parent: Run | None = None,
    parent_checkpoint: Checkpoint | None = None,
    lineage: str = "",
    dispatch: bool = True,
) -> tuple[Run, str]:
    """A DPO run: the policy trained on `snapshot`'s preference pairs with TRL's DPOTrainer, on the same
    worker queues and reporting through the same event API as every run. Returns the run and its token."""
    name = _require_name(name)
    if snapshot is None or snapshot.project_id != project.pk:
        raise ValidationError({"snapshot": ["Choose a preference dataset of this project."]})
    if refusal := queue_refusal(queue):
        raise ValidationError({"queue": [refusal]})
    knobs = dpo_params(params)
    pairs = snapshot.pairs.count()
    if pairs == 0:
        raise ValidationError(
            {"snapshot": ["This preference dataset has no pairs: judge some and snapshot again."]}
        )
    run = Run.objects.create(
        project=project,
        name=name,
        created_by=user,
        kind=RunKind.DPO,
        preference_snapshot=snapshot,
        preset="dpo",
        overrides=dict(params),
        resolved_config={
            **knobs,
            "kind": RunKind.DPO,
            "snapshot": {
                "id": snapshot.pk,
                "version": snapshot.version,
                "queue": snapshot.queue_id,
                "pairs": pairs,
            },
        },
        queue=queue,
        parent=parent,
        parent_checkpoint=parent_checkpoint,
        lineage=lineage,
        max_steps=int(knobs["max_steps"]),
    )
    return run, _launched(run, user=user, dispatch=dispatch)


def run_create_from_checkpoint(
    *,
    checkpoint: Checkpoint,
    name: str,
    environment: Environment,
    rubric: Rubric,
    preset: str,
    overrides: dict[str, Any],
    user,
    queue: str = Queue.CPU,
    dispatch: bool = True,
) -> tuple[Run, str]:
    """A new GRPO-family run whose policy starts from `checkpoint`'s weights (a DPO run's, say): its
    `model` knob is the checkpoint directory, its lineage `init` under the checkpoint's run. Optimizer
    and step count start fresh (unlike resume and fork, which continue the same run kind)."""
    if checkpoint.deleted:
        raise ValidationError({"checkpoint": ["This checkpoint was pruned: choose a kept one."]})
    if checkpoint.run.project_id != environment.project_id:
        raise ValidationError({"checkpoint": ["Choose a checkpoint of this project."]})
    if not isinstance(overrides, dict):
        raise ValidationError({"overrides": ["Must be a JSON object of knob values."]})
    return run_create(
        project=checkpoint.run.project,
        name=name,
        environment=environment,
        rubric=rubric,
        preset=preset,
        overrides={**overrides, "model": checkpoint.path},
        user=user,
        queue=queue,
        parent=checkpoint.run,
        parent_checkpoint=checkpoint,
        lineage="init",
        dispatch=dispatch,
    )


def _resume_point(run: Run, checkpoint: Checkpoint | None) -> Checkpoint:
    refusal = run.resume_refusal()
    if refusal is not None:
        field, message = refusal
        raise ValidationError({field: [message]})
    if checkpoint is None:
        checkpoint = run.checkpoints.filter(deleted=False).order_by("-step").first()
        if checkpoint is None:  # resume_refusal() already says so; kept for a concurrent deletion
            raise ValidationError({"checkpoint": ["This run has no kept checkpoint to resume from."]})
    elif checkpoint.run_id != run.pk or checkpoint.deleted:
        raise ValidationError({"checkpoint": ["Choose a kept checkpoint of this run."]})
    return checkpoint


def _child_run(
    *,
    run: Run,
    checkpoint: Checkpoint,
    name: str,
    overrides: dict[str, Any],
    lineage: str,
    user,
    dispatch: bool,
    auto_resume_count: int = 0,
) -> tuple[Run, str]:
    """A run that starts from `checkpoint` of `run`, of the same kind, on the same pinned environment and
    rubric versions (or the same snapshot for DPO), linked to it as its `lineage` ("resume" or "fork")."""
    if run.is_dpo:
        return run_create_dpo(
            project=run.project,
            snapshot=run.preference_snapshot,
            name=name,
            params=overrides,
            user=user,
            queue=run.queue,
            parent=run,
            parent_checkpoint=checkpoint,
            lineage=lineage,
            dispatch=dispatch,
        )
    # resume_refusal() refuses external runs; DPO runs train on a snapshot. The rest have pinned versions.
    assert run.environment_version is not None and run.rubric_version is not None
    return run_create(
        project=run.project,
        name=name,
        auto_resume_count=auto_resume_count,
        environment=run.environment_version.environment,
        rubric=run.rubric_version.rubric,
        environment_version=run.environment_version,
        rubric_version=run.rubric_version,
        preset=run.preset,
        overrides=overrides,
        user=user,
        queue=run.queue,
        parent=run,
        parent_checkpoint=checkpoint,
        lineage=lineage,
        dispatch=dispatch,
    )


def run_resume(
    *, run: Run, user, checkpoint: Checkpoint | None = None, dispatch: bool = True, automatic: bool = False
) -> tuple[Run, str]:
    """Continue a stopped run from a checkpoint (the latest by default) as a new, linked run with
    exactly the same config: the trainer restores weights, optimizer, RNG and data position, and
    starts at the step after the checkpoint. `automatic`: the reaper resumes a LOST run by itself."""
    checkpoint = _resume_point(run, checkpoint)
    return _child_run(
        run=run,
        checkpoint=checkpoint,
        name=f"{run.name} · {'auto-resumed' if automatic else 'resumed'} @{checkpoint.step}",
        overrides=run.overrides,
        lineage="resume",
        user=user,
        dispatch=dispatch,
        auto_resume_count=run.auto_resume_count + 1 if automatic else 0,
    )


def run_auto_resume(*, run_id: int) -> Run | None:
    """Resume a run the reaper just marked LOST, if its `auto_resume` knob allows one more attempt in a row
    and it has a checkpoint. Returns the new run (None when it is left to a person); the lost run's error
    says which run took over."""
    run = Run.objects.select_related(
        "project", "environment_version__environment", "rubric_version__rubric"
    ).get(pk=run_id)
    allowed = int((run.resolved_config or {}).get("auto_resume") or 0)
    if run.status != RunStatus.LOST or run.auto_resume_count >= allowed or run.resume_refusal() is not None:
        return None
    resumed, _token = run_resume(run=run, user=run.created_by, automatic=True)
    step = resumed.parent_checkpoint.step if resumed.parent_checkpoint else 0
    note = (
        f" Resumed automatically as run #{resumed.pk} (attempt {resumed.auto_resume_count} of {allowed}) "
        f"from step {step}."
    )
    Run.objects.filter(pk=run.pk).update(error_message=run.error_message + note)
    return resumed


def run_fork(
    *,
    run: Run,
    user,
    overrides: dict[str, Any],
    name: str = "",
    checkpoint: Checkpoint | None = None,
    dispatch: bool = True,
) -> tuple[Run, str]:
    """A new run from a checkpoint's weights with its own knobs (same environment and rubric versions).
    `overrides` are the fork's complete overrides of its preset (start from the parent's and change
    some). Its step count starts at the checkpoint's step."""
    checkpoint = _resume_point(run, checkpoint)
    if not isinstance(overrides, dict):
        raise ValidationError({"overrides": ["Must be a JSON object of knob values."]})
    return _child_run(
        run=run,
        checkpoint=checkpoint,
        name=name or f"{run.name} · fork @{checkpoint.step}",
        overrides=overrides,
        lineage="fork",
        user=user,
        dispatch=dispatch,
    )


RUN_TAG_MAX_CHARS = 40
RUN_TAGS_MAX = 12
RUN_NOTE_MAX_CHARS = 5000


def _clean_tags(tags: Any) -> list[str]:
    """Tags as stored: stripped, without repeats (case aside), in the order given."""
    if isinstance(tags, str):  # "baseline, lr sweep" as typed in a form
        tags = tags.split(",")
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ValidationError({"tags": ["Tags must be a list of short texts."]})
    cleaned: list[str] = []
    for tag in (t.strip() for t in tags):
        if tag and tag.lower() not in {c.lower() for c in cleaned}:
            cleaned.append(tag)
    too_long = [t for t in cleaned if len(t) > RUN_TAG_MAX_CHARS or "," in t]
    if too_long:
        raise ValidationError(
            {
                "tags": [
                    f"Each tag is at most {RUN_TAG_MAX_CHARS} characters, without commas: {too_long[0]!r}."
                ]
            }
        )
    if len(cleaned) > RUN_TAGS_MAX:
        raise ValidationError({"tags": [f"At most {RUN_TAGS_MAX} tags (got {len(cleaned)})."]})
    return cleaned


def run_annotate(*, run: Run, tags: Any = None, note: str | None = None) -> Run:
    """Set a run's tags and/or note (None leaves one as it is). Both are checked before either is
    written; the run's status and progress are not touched (one UPDATE of these two columns)."""
    errors: dict[str, list[str]] = {}
    changes: dict[str, Any] = {}
    if tags is not None:
        try:
            changes["tags"] = _clean_tags(tags)
        except ValidationError as error:
            errors.update(error.message_dict)
    if note is not None:
        if not isinstance(note, str):
            errors["note"] = ["The note must be text."]
        elif len(note) > RUN_NOTE_MAX_CHARS:
            errors["note"] = [f"The note is at most {RUN_NOTE_MAX_CHARS} characters (it has {len(note)})."]
        else:
            changes["note"] = note.strip()
    if errors:
        raise ValidationError(errors)
    if changes:
        Run.objects.filter(pk=run.pk).update(**changes)
        for key, value in changes.items():
            setattr(run, key, value)
    return run


def run_transition(
    run_id: int, to: str, *, only_from: tuple[str, ...] | None = None, announce: bool = True, **fields: Any
) -> bool:
    """Move a run to status `to` if the status machine allows it from its current status (and, with
    `only_from`, only from those statuses).

    A conditional UPDATE, so two racing writers (worker, reaper, cancel button) can never both win.
    Returns whether this call made the change. The change is broadcast after the commit unless
    `announce` is off: ingestion sends the trainer's status event itself, with its sequence number.
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
        if changed and announce:
            broadcast_on_commit(Run(pk=run_id), [Run.objects.get(pk=run_id).status_event()])
    return bool(changed)


def run_request_cancel(*, run: Run, user=None) -> str:
    """Cancel a run: a queued run is cancelled at once (and its task revoked); a running one is asked
    to stop cooperatively — the trainer learns it from its next ingestion reply."""
    # Conditional updates against the row, not `run.status`: if a worker claimed the run since `run`
    # was read, it must be asked to stop rather than be marked cancelled under the trainer's feet.
    if run_transition(run.pk, RunStatus.CANCELLED, only_from=(RunStatus.QUEUED,), cancel_requested=True):
        task_id = Run.objects.filter(pk=run.pk).values_list("task_id", flat=True).first() or ""
        transaction.on_commit(lambda: revoke(task_id))
        log_activity(run.project, user, ActivityVerb.RUN_CANCELLED, run_id=run.pk, name=run.name)
        return RunStatus.CANCELLED
    if Run.objects.filter(pk=run.pk, status__in=[RunStatus.STARTING, RunStatus.RUNNING]).update(
        cancel_requested=True
    ):
        broadcast_on_commit(run, [{"type": "cancel_requested"}])
        log_activity(run.project, user, ActivityVerb.RUN_CANCELLED, run_id=run.pk, name=run.name)
        return "cancel_requested"
    current = Run.objects.get(pk=run.pk)
    raise ValidationError({"status": [f"A {current.get_status_display().lower()} run cannot be cancelled."]})


def run_record_progress(
    *, run_id: int, step: int, last_reward: float | None, best_reward: float | None
) -> None:
    """Keep the list pages' denormalised progress in step with ingested metrics (Run.progress_after,
    under the run's row lock)."""
    with transaction.atomic():
        run = Run.objects.select_for_update().only("pk", "current_step", "best_reward").get(pk=run_id)
        Run.objects.filter(pk=run_id).update(
            **run.progress_after(step=step, last_reward=last_reward, best_reward=best_reward)
        )


def run_heartbeat(run_id: int) -> None:
    Run.objects.filter(pk=run_id).update(heartbeat_at=timezone.now())


__all__ = [
    "environment_create",
    "environment_update",
    "rubric_create",
    "rubric_update",
    "run_create",
    "run_create_dpo",
    "run_create_from_checkpoint",
    "run_transition",
    "run_resume",
    "run_fork",
    "run_request_cancel",
    "run_record_progress",
    "run_heartbeat",
]

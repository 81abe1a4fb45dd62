"""Writes that make a run: its config checked, its versions pinned, its ingestion token issued, its task
queued after commit; and a run's tags and note."""

from __future__ import annotations

import secrets
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from trainers.config import resolve_run_config, validate_run_config
from webapp.accounts.models import hash_token
from webapp.core.broadcast import broadcast_on_commit
from webapp.core.dispatch import Queue, Task, queue_refusal, send_on_commit, send_pending
from webapp.experiments.capacity import ray_capacity_errors
from webapp.experiments.judges import generator_errors, judge_launch_errors
from webapp.experiments.models import (
    Checkpoint,
    Environment,
    EnvironmentVersion,
    Rubric,
    RubricVersion,
    Run,
    RunStatus,
)
from webapp.experiments.parts import worker_parts
from webapp.experiments.services.definitions import prefixed_errors, require_name
from webapp.experiments.signals import run_launched
from webapp.projects.models import Project


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
    *, name: str, preset: str, overrides: dict[str, Any], queue: str | None = None
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The resolved knobs of `preset` ← `overrides` and what is wrong with them and the name, as
    {"name" | "preset" | "config.<knob>": [messages]} ({} when valid). run_create refuses with these,
    and the run form asks it too while other fields are still wrong, so a person sees every error in
    one pass. The parts the knobs name (advantage estimator, loss, rollout strategy, task source) must be
    ones an online worker of `queue` has (None: of any queue; `webapp.experiments.parts`)."""
    errors: dict[str, list[str]] = {}
    try:
        require_name(name)
    except ValidationError as error:
        errors.update(error.message_dict)
    try:
        knobs = resolve_run_config(preset, overrides)
    except (KeyError, ValueError) as exc:
        return {}, {**errors, "preset": [str(exc).strip("'\"")]}
    catalogue, where = worker_parts(queue)
    knob_errors = validate_run_config(knobs, parts=catalogue, parts_where=where)
    return knobs, {**errors, **prefixed_errors(knob_errors, "config")}


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
    knobs, knob_errors = run_config_errors(name=name, preset=preset, overrides=overrides, queue=queue)
    errors.update(knob_errors)
    if errors:  # every problem at once: the name, the choices and every knob
        raise ValidationError(errors)
    # Before anything is queued: Ray actors no worker's cluster can hold would wait forever. An automatic
    # resume is not refused here (the reaper makes it; the trainer still refuses a cluster that shrank).
    if auto_resume_count == 0 and (capacity := ray_capacity_errors(queue=queue, config=knobs)):
        raise ValidationError(capacity)
    name = name.strip()

    environment_version = environment_version or environment.latest_version
    rubric_version = rubric_version or rubric.latest_version
    # Every environment and rubric is created with its version 1, so both exist.
    assert environment_version is not None and rubric_version is not None
    if environment_version.environment_id != environment.pk or rubric_version.rubric_id != rubric.pk:
        raise ValidationError(
            {"environment": ["The pinned versions must belong to the chosen environment and rubric."]}
        )
    # Before anything is queued: a judge the run cannot reach (an endpoint down, a model no worker serves)
    # would fail the run minutes later. An automatic resume does not ask the endpoint again.
    judge_problems = judge_launch_errors(
        project=project, spec=rubric_version.spec, reach=auto_resume_count == 0
    )
    if judge_problems:
        raise ValidationError({"rubric": judge_problems})
    # The curriculum's LLM generator, likewise (a model no worker serves, an endpoint down).
    if generator_problems := generator_errors(project=project, knobs=knobs, reach=auto_resume_count == 0):
        raise ValidationError(generator_problems)
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
    return run, launched(run, user=user, dispatch=dispatch)


def launched(run: Run, *, user, dispatch: bool) -> str:
    """What every new run gets, whatever its kind: its ingestion token (returned raw, once), a line in
    the project's activity, its task queued after commit, and its status pushed to open pages."""
    token = run_issue_ingest_token(run)
    run_launched.send(sender=Run, run=run, user=user)
    if dispatch:
        dispatch_run(run)
    broadcast_on_commit(run, [run.status_event()])
    return token


def dispatch_run(run: Run) -> None:
    """Queue the run's task after commit. Its task id is recorded, or `UNSENT` when the broker could not
    take it: the launch still succeeds, and `run_dispatch_pending` sends the task once the broker is back."""
    run_id = run.pk
    send_on_commit(
        Task.EXECUTE_RUN,
        args=[run_id],
        queue=run.queue,
        on_sent=lambda task_id: Run.objects.filter(pk=run_id).update(task_id=task_id),
    )


def run_dispatch_pending() -> list[int]:
    """Send the task of every queued run whose launch found the broker unreachable (`Run.dispatch_pending`);
    the ids of those sent now (`send_pending`: a worker claims a run with a conditional update, QUEUED →
    STARTING, so sending one twice is harmless)."""
    return send_pending(Run.objects.filter(status=RunStatus.QUEUED), task=Task.EXECUTE_RUN)


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

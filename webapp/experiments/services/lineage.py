"""Runs that start from another run's checkpoint: resume (the same config, continued), fork (new knobs),
the reaper's automatic resume, and a new run initialised from any checkpoint's weights."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from webapp.core.dispatch import Queue
from webapp.experiments.models import (
    Checkpoint,
    Environment,
    Rubric,
    Run,
    RunStatus,
)
from webapp.experiments.services.dpo import run_create_dpo
from webapp.experiments.services.runs import run_create


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
            # The parent's policy, as it resolved (an older run's may differ from today's default).
            params={"model": run.resolved_config["model"], **overrides}
            if "model" in run.resolved_config
            else overrides,
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

"""DPO runs: the policy trained on a preference snapshot (trainers/recipes/dpo.py)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from trainers.kinds import config_with_defaults
from trainers.recipes.dpo import DPO_SCHEMA
from trainers.registry import validate_config
from webapp.core.dispatch import Queue, queue_refusal
from webapp.experiments.models import (
    Checkpoint,
    Run,
    RunKind,
)
from webapp.experiments.services.definitions import prefixed_errors, require_name
from webapp.experiments.services.runs import launched
from webapp.projects.models import Project


def dpo_base_model(queue: Any) -> str:
    """The policy a DPO run on `queue`'s judgements trains when neither a `model` nor a checkpoint is given:
    the model the judged runs started from (`PreferenceQueue.base_model`), else the DPO default (the
    bundled model). The queue page names it beside the one-click button."""
    return (queue.base_model() if queue is not None else None) or DPO_SCHEMA["properties"]["model"]["default"]


def dpo_params(params: Any) -> dict[str, Any]:
    """A DPO run's knobs with defaults filled in (trainers.recipes.dpo.DPO_SCHEMA); field errors as config.*."""
    if not isinstance(params, dict):
        raise ValidationError({"config": ["Must be a JSON object of knob values."]})
    errors = validate_config(DPO_SCHEMA, params)
    if errors:
        raise ValidationError(prefixed_errors(errors, "config"))
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
    start_from: Checkpoint | None = None,
    start_from_given: bool = False,
) -> tuple[Run, str]:
    """A DPO run: the policy trained on `snapshot`'s preference pairs (trainers.recipes.dpo), on the same
    worker queues and reporting through the same event API as every run. Returns the run and its token.

    Without a `model` in `params` the policy is the judged runs' base model (`dpo_base_model`).
    `start_from`: a kept checkpoint of the project (a GRPO run's policy, say) whose weights the policy
    starts from instead of the base model; the run is linked under it as lineage `init`.
    `start_from_given`: the caller asked for a checkpoint, so None means it was not found."""
    name = require_name(name)
    if start_from is not None or start_from_given:
        if start_from is None or start_from.deleted or start_from.run.project_id != project.pk:
            raise ValidationError(
                {"from_checkpoint": ["Choose a kept checkpoint of this project to start from."]}
            )
        params = {**params, "model": start_from.path}
        parent, parent_checkpoint, lineage = start_from.run, start_from, "init"
    if snapshot is None or snapshot.project_id != project.pk:
        raise ValidationError({"snapshot": ["Choose a preference dataset of this project."]})
    if refusal := queue_refusal(queue):
        raise ValidationError({"queue": [refusal]})
    knobs = dpo_params({"model": dpo_base_model(snapshot.queue if snapshot.queue_id else None), **params})
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
    return run, launched(run, user=user, dispatch=dispatch)

"""Writes for learned reward models: queue training from a preference snapshot, record what the worker
did, and register a ready model in a rubric (as a new rubric version; runs keep the version they pinned).

Status moves QUEUED → TRAINING → READY / FAILED, each step one conditional UPDATE so a redelivered
task cannot train twice and a late failure cannot overwrite a finished model.
"""

from __future__ import annotations

import functools
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from trainers.learn.reward_training import TRAINING_SCHEMA
from trainers.registry import config_with_defaults, validate_config
from webapp.core.dispatch import Queue, Task, queue_refusal, send_on_commit, send_pending
from webapp.core.jobs import job_request_cancel
from webapp.experiments.models import Checkpoint, Rubric, RubricVersion
from webapp.experiments.services.rubrics import rubric_update
from webapp.fleet.selectors import lost_jobs
from webapp.review.models import ActivityVerb, PreferenceSnapshot
from webapp.review.services.activity import log_activity
from webapp.rewards.models import DEFAULT_ACCURACY_THRESHOLD, LEARNED_REWARD, RewardModel, RewardModelStatus

# Fewer pairs cannot hold any out for an honest accuracy.
MIN_PAIRS = 4


def training_params(params: dict[str, Any] | None) -> dict[str, Any]:
    """The training knobs with defaults filled in; field errors as a ValidationError."""
    params = dict(params or {})
    errors = validate_config(TRAINING_SCHEMA, params)
    if errors:
        raise ValidationError(
            {(f"params.{path}" if path else "params"): messages for path, messages in errors.items()}
        )
    return config_with_defaults(TRAINING_SCHEMA, params)


def _clean_name(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": ["This field is required."]})
    if len(name) > 120:
        raise ValidationError({"name": ["At most 120 characters."]})
    return name


def _record_task_id(reward_model_id: int, task_id: str) -> None:
    RewardModel.objects.filter(pk=reward_model_id).update(task_id=task_id)


def reward_model_train(
    *,
    snapshot: PreferenceSnapshot,
    user,
    name: str,
    params: dict[str, Any] | None = None,
    queue: str = Queue.CPU,
    dispatch: bool = True,
    accuracy_threshold: float = DEFAULT_ACCURACY_THRESHOLD,
    base_checkpoint: Checkpoint | None = None,
) -> RewardModel:
    """Create the next version of reward model `name` from `snapshot` and queue its training on a
    worker after commit. `accuracy_threshold`: the lowest held-out accuracy that counts as reliable.
    `base_checkpoint`: a kept checkpoint of the project whose policy is the frozen base that embeds the
    pairs (every checkpoint is a model, LoRA included); None: the bundled model."""
    name = _clean_name(name)
    params = dict(params or {})
    # `model` is written here from the checkpoint, never taken as a path (a retrain passes its own back).
    if params.pop("model", None) is not None and base_checkpoint is None:
        raise ValidationError(
            {
                "base_checkpoint": [
                    "Choose the base model as a kept checkpoint of this project (it may have been deleted)."
                ]
            }
        )
    params = training_params(params)
    if base_checkpoint is not None:
        if base_checkpoint.deleted or base_checkpoint.run.project_id != snapshot.project_id:
            raise ValidationError({"base_checkpoint": ["Choose a kept checkpoint of this project."]})
        params["model"] = base_checkpoint.path
    try:
        accuracy_threshold = float(accuracy_threshold)
    except (TypeError, ValueError):
        raise ValidationError({"accuracy_threshold": ["Enter a number between 0 and 1."]}) from None
    if not 0.0 <= accuracy_threshold <= 1.0:
        raise ValidationError({"accuracy_threshold": ["Enter a number between 0 and 1."]})
    if refusal := queue_refusal(queue):
        raise ValidationError({"queue": [refusal]})
    pairs = snapshot.pairs.count()
    if pairs < MIN_PAIRS:
        raise ValidationError(
            {
                "snapshot": [
                    f"This snapshot has {pairs} preference pairs; training needs at least {MIN_PAIRS}."
                ]
            }
        )
    for _attempt in range(3):  # two people training the same name at once: the loser takes the next number
        try:
            with transaction.atomic():
                top = RewardModel.objects.filter(project=snapshot.project, name=name).aggregate(
                    top=Max("version")
                )["top"]
                reward_model = RewardModel.objects.create(
                    project=snapshot.project,
                    name=name,
                    version=(top or 0) + 1,
                    snapshot=snapshot,
                    params=params,
                    base_checkpoint=base_checkpoint,
                    queue=queue,
                    accuracy_threshold=accuracy_threshold,
                    metrics={"n_pairs": pairs},
                    created_by=user,
                )
        except IntegrityError:
            continue
        log_activity(
            snapshot.project,
            user,
            ActivityVerb.REWARD_MODEL_TRAINED,
            reward_model_id=reward_model.pk,
            name=reward_model.label,
        )
        if dispatch:
            send_on_commit(
                Task.TRAIN_REWARD_MODEL,
                args=[reward_model.pk],
                queue=reward_model.queue,
                on_sent=functools.partial(_record_task_id, reward_model.pk),
            )
        return reward_model
    raise ValidationError(
        {"name": ["Another reward model of this name was created at the same moment; try again."]}
    )


def reward_model_claim(reward_model_id: int, *, worker: str, task_id: str = "") -> bool:
    """QUEUED → TRAINING, once. False when another delivery of the task got there first (or it ended)."""
    return bool(
        RewardModel.objects.filter(pk=reward_model_id, status=RewardModelStatus.QUEUED).update(
            status=RewardModelStatus.TRAINING,
            worker=worker,
            task_id=task_id or "",
            started_at=timezone.now(),
            progress=0.0,
            phase="",
        )
    )


def reward_model_progress(reward_model_id: int, *, phase: str, progress: float) -> None:
    RewardModel.objects.filter(pk=reward_model_id, status=RewardModelStatus.TRAINING).update(
        phase=phase[:16], progress=max(0.0, min(1.0, progress))
    )


def reward_model_finish(
    reward_model_id: int, *, path: str, metrics: dict[str, Any], curve: list[dict[str, float]]
) -> bool:
    """TRAINING → READY with where the model lies and how well it did."""
    current = RewardModel.objects.filter(pk=reward_model_id).values_list("metrics", flat=True).first() or {}
    return bool(
        RewardModel.objects.filter(pk=reward_model_id, status=RewardModelStatus.TRAINING).update(
            status=RewardModelStatus.READY,
            path=path,
            metrics={**current, **metrics},
            curve=curve,
            progress=1.0,
            phase="",
            finished_at=timezone.now(),
        )
    )


def reward_model_fail(reward_model_id: int, *, error: str) -> bool:
    return bool(
        RewardModel.objects.filter(
            pk=reward_model_id, status__in=[RewardModelStatus.QUEUED, RewardModelStatus.TRAINING]
        ).update(
            status=RewardModelStatus.FAILED, error_message=error[:5000], phase="", finished_at=timezone.now()
        )
    )


def reward_model_cancel(*, reward_model: RewardModel) -> str:
    """Cancel a reward model's training: dropped at once while queued, else its worker stops it within
    seconds (`webapp.core.jobs`). Returns "cancelled" or "cancel_requested"."""
    return job_request_cancel(reward_model)


def reward_models_dispatch_pending() -> list[int]:
    """Send the training task of every queued model whose launch found the broker unreachable
    (`BackgroundJob.dispatch_pending`); the ids sent now. Sending one twice is harmless: the worker claims
    a model with a conditional update (`reward_model_claim`)."""
    return send_pending(
        RewardModel.objects.filter(status=RewardModelStatus.QUEUED), task=Task.TRAIN_REWARD_MODEL
    )


def reward_models_reap_lost(*, now=None, timeout_s: int | None = None) -> list[int]:
    """Fail TRAINING models whose worker stopped heartbeating (process killed, machine lost).

    Returns the ids it failed. The task is not redelivered (reject_on_worker_lost=False): without this
    the model would read "training" forever; now the page says what happened and Train again works.
    """
    lost = lost_jobs(
        RewardModel.objects.filter(status=RewardModelStatus.TRAINING),
        doing="training",
        now=now,
        timeout_s=timeout_s,
    )
    return [
        pk
        for pk, reason in lost
        if reward_model_fail(pk, error=f"{reason} Train again to start a new version.")
    ]


def _criterion_name(reward_model: RewardModel, taken: set[str]) -> str:
    stem = (
        "".join(c if c.isalnum() else "_" for c in reward_model.name.lower()).strip("_")[:40]
        or "reward_model"
    )
    name = f"{stem}_v{reward_model.version}"
    suffix = 2
    while name in taken:
        name, suffix = f"{stem}_v{reward_model.version}_{suffix}", suffix + 1
    return name


@transaction.atomic
def reward_model_register(
    *,
    reward_model: RewardModel,
    rubric: Rubric,
    weight: float,
    user,
    criterion_name: str = "",
    allow_unreliable: bool = False,
    only_when_checks_pass: bool = True,
) -> RubricVersion:
    """Add a `learned_reward` criterion scoring with `reward_model` to `rubric`, as its next version.

    By default it counts only on trajectories that pass the rubric's verifiable criteria
    (`only_when_checks_pass`, docs/rubrics.md): added to a rubric on every trajectory, a reward model that
    had learned "shorter is better" took the bundled model's held-out accuracy from 50 % to 12.5 % in six
    GRPO steps (bench/preference_loop.py).

    A model that is not reliable (RewardModel.reliability()) is refused unless `allow_unreliable`
    says the user saw why and wants it anyway. The criterion scores standardised and bounded
    (`bounded`), so its weight means the same as the other criteria's. Runs already pinned to earlier
    versions are unchanged; a new run launched with the rubric uses it."""
    if rubric.project_id != reward_model.project_id:
        raise ValidationError({"rubric": ["Choose a rubric of this project."]})
    if not reward_model.is_ready:
        raise ValidationError(
            {
                "reward_model": [
                    f"{reward_model.label} is {reward_model.get_status_display().lower()}, not ready."
                ]
            }
        )
    reliability = reward_model.reliability()
    if not reliability.reliable and not allow_unreliable:
        raise ValidationError(
            {
                "allow_unreliable": [
                    f"{reward_model.label} is not reliable: {reliability.reason}. Adding it to a rubric "
                    "needs an explicit override (allow_unreliable)."
                ]
            }
        )
    try:
        weight = float(weight)
    except (TypeError, ValueError):
        raise ValidationError({"weight": ["Enter a number."]}) from None
    latest = rubric.latest_version
    assert latest is not None  # a rubric is created with its version 1
    spec = {**latest.spec, "criteria": [dict(c) for c in latest.spec.get("criteria", [])]}
    if any(reward_model.scores_in(c) for c in spec["criteria"]):
        raise ValidationError(
            {"rubric": [f"{rubric.name} v{latest.number} already scores with {reward_model.label}."]}
        )
    taken = {c.get("name") for c in spec["criteria"]}
    name = (criterion_name or "").strip() or _criterion_name(reward_model, taken)
    if name in taken:
        raise ValidationError({"criterion_name": [f"{rubric.name} already has a criterion named {name!r}."]})
    spec["criteria"].append(
        {
            "name": name,
            "kind": LEARNED_REWARD,
            "weight": weight,
            "params": {
                "path": reward_model.path,
                "bounded": True,
                "only_when_checks_pass": bool(only_when_checks_pass),
            },
        }
    )
    note = f"added learned reward {reward_model.label}"
    if only_when_checks_pass:
        note += ", counted only when the checks pass"
    if not reliability.reliable:
        note += f" (not reliable, added anyway: {reliability.summary()})"
    version = rubric_update(rubric=rubric, user=user, spec=spec, note=note[:200])
    log_activity(
        rubric.project,
        user,
        ActivityVerb.REWARD_MODEL_REGISTERED,
        rubric_id=rubric.pk,
        name=rubric.name,
        version=version.number,
    )
    return version


__all__ = [
    "MIN_PAIRS",
    "reward_model_claim",
    "reward_model_fail",
    "reward_model_finish",
    "reward_model_progress",
    "reward_model_register",
    "reward_model_train",
    "training_params",
]

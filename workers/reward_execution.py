"""What a worker does with a queued reward model: claim it, read its snapshot, train, record the result.

Runs on a Celery worker (`workers.reward_tasks`), never in the web process: `trainers.recipes.reward_model`
and with it torch are imported inside `execute_reward_training` only. Unlike a policy run, the whole
job is one short function on the worker, so it writes its few status rows straight to the database
instead of streaming events over the ingestion API.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from django.conf import settings

from webapp.core.jobs import job_cancel_requested, job_cancelled
from webapp.review.services import snapshot_pairs
from webapp.rewards import services
from webapp.rewards.models import RewardModel
from workers.jobs import Job, run_job, worker_name

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 1.0
# How much of the progress bar each phase fills: embedding dominates on CPU.
PHASES = {"load": (0.0, 0.1), "embed": (0.1, 0.8), "fit": (0.8, 0.98), "save": (0.98, 1.0)}


def reward_models_root() -> Path:
    return Path(settings.REWARD_MODELS_DIR).resolve()


def reward_model_dir(reward_model: RewardModel) -> Path:
    """Absolute, so the rubric criterion that names it reads the same directory from any worker cwd."""
    return reward_models_root() / f"rm-{reward_model.pk}"


def training_pairs(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Snapshot rows as the reward model will see them when it scores a trajectory: the task prompt and
    the whole response — tool calls and results included (`trainers.texts`), the text the
    `learned_reward` criterion renders for a model saved with response_text="transcript"."""
    return [{"prompt": row["prompt"], "chosen": row["chosen"], "rejected": row["rejected"]} for row in rows]


def reward_training_job(reward_model_id: int, *, task_id: str = "", hostname: str = "") -> Job:
    """A reward model's training as a background job: claimed QUEUED → TRAINING by this worker, ended
    cancelled or failed with the reason."""
    worker = worker_name(hostname)
    return Job(
        label=f"reward model {reward_model_id}",
        claim=lambda: services.reward_model_claim(reward_model_id, worker=worker, task_id=task_id),
        status=lambda: (
            RewardModel.objects.filter(pk=reward_model_id).values_list("status", flat=True).first()
        ),
        cancel_requested=lambda: job_cancel_requested(RewardModel, reward_model_id),
        cancelled=lambda: job_cancelled(RewardModel, reward_model_id),
        failed=lambda failure: services.reward_model_fail(reward_model_id, error=failure.text),
    )


def execute_reward_training(reward_model_id: int, *, task_id: str = "", hostname: str = "") -> str:
    # Cancel within seconds: the job's watcher reads the request every second, the training loop checks it
    # between batches (trainers.sdk.cancel).
    job = reward_training_job(reward_model_id, task_id=task_id, hostname=hostname)
    return run_job(
        job,
        lambda _: _train(
            RewardModel.objects.select_related("snapshot", "snapshot__queue", "project", "created_by").get(
                pk=reward_model_id
            )
        ),
    )


def _train(reward_model: RewardModel) -> str:
    from trainers.recipes.reward_model import train_reward_model

    snapshot = reward_model.snapshot
    pairs = training_pairs(snapshot_pairs(snapshot))
    last_report = 0.0

    def progress(phase: str, fraction: float) -> None:
        nonlocal last_report
        now = time.monotonic()
        if now - last_report < PROGRESS_EVERY_S and fraction < 1.0:
            return
        last_report = now
        low, high = PHASES.get(phase, (0.0, 1.0))
        services.reward_model_progress(reward_model.pk, phase=phase, progress=low + (high - low) * fraction)

    provenance = {
        "reward_model": {"id": reward_model.pk, "name": reward_model.name, "version": reward_model.version},
        "project": reward_model.project.slug,
        "snapshot": {
            "id": snapshot.pk,
            "version": snapshot.version,
            "queue_id": snapshot.queue_id,
            "queue": snapshot.provenance.get("queue", {}).get("name"),
        },
        "created_by": getattr(reward_model.created_by, "username", None),
    }
    directory = reward_model_dir(reward_model)
    result = train_reward_model(
        pairs, out_dir=directory, provenance=provenance, progress=progress, **reward_model.params
    )
    metrics = result.metrics()
    metrics.pop("path")
    metrics["n_pairs"] = len(pairs)
    services.reward_model_finish(reward_model.pk, path=str(directory), metrics=metrics, curve=result.curve)
    log.info(
        "reward model %s ready: held-out accuracy %s over %s pairs",
        reward_model.pk,
        result.held_out_accuracy,
        result.n_eval,
    )
    return "ready"

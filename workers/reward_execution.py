"""What a worker does with a queued reward model: claim it, read its snapshot, train, record the result.

Runs on a Celery worker (`workers.reward_tasks`), never in the web process: `trainers.learn.reward_training`
and with it torch are imported inside `execute_reward_training` only. Unlike a policy run, the whole
job is one short function on the worker, so it writes its few status rows straight to the database
instead of streaming events over the ingestion API.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import traceback
from pathlib import Path
from typing import Any

from django.conf import settings

from trainers.sdk.cancel import Cancelled, cancellable
from webapp.core.jobs import job_cancel_requested, job_cancelled
from webapp.review.services import snapshot_pairs
from webapp.rewards import services
from webapp.rewards.models import RewardModel
from workers.cancel import watching

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


def execute_reward_training(reward_model_id: int, *, task_id: str = "", hostname: str = "") -> str:
    hostname = hostname or f"{socket.gethostname()}:{os.getpid()}"
    if not services.reward_model_claim(reward_model_id, worker=hostname, task_id=task_id):
        status = RewardModel.objects.filter(pk=reward_model_id).values_list("status", flat=True).first()
        log.info("reward model %s not trained: it is %s", reward_model_id, status)
        return f"skipped ({status})"
    try:
        # Cancel within seconds: the watcher reads the request every second, the training loop checks it
        # between batches (trainers.sdk.cancel).
        with (
            watching(
                lambda: job_cancel_requested(RewardModel, reward_model_id), name=f"rm-{reward_model_id}"
            ) as w,
            cancellable(w.requested),
        ):
            return _train(
                RewardModel.objects.select_related(
                    "snapshot", "snapshot__queue", "project", "created_by"
                ).get(pk=reward_model_id)
            )
    except Cancelled:
        job_cancelled(RewardModel, reward_model_id)
        log.info("reward model %s cancelled", reward_model_id)
        return "cancelled"
    except BaseException as exc:  # noqa: BLE001 — also soft time limits and KeyboardInterrupt
        log.exception("reward model %s failed", reward_model_id)
        services.reward_model_fail(
            reward_model_id, error=f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}"
        )
        if not isinstance(exc, Exception):
            raise
        return "failed"
    finally:
        from trainers.learn.memory import release_memory

        release_memory()  # the worker lives on: give back the encoder's freed heap


def _train(reward_model: RewardModel) -> str:
    from trainers.learn.reward_training import train_reward_model

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

"""Celery task that trains a learned reward model: thin — takes an id, calls one function."""

from __future__ import annotations

from webapp.core.dispatch import Task
from workers.celery import app


@app.task(name=Task.TRAIN_REWARD_MODEL, bind=True, acks_late=True, reject_on_worker_lost=False)
def train_reward_model(self, reward_model_id: int) -> str:
    # reject_on_worker_lost=False: a model whose worker died stays TRAINING until someone trains it
    # again; a blind redelivery would only find it claimed and skip it.
    from workers.reward_execution import execute_reward_training

    return execute_reward_training(
        reward_model_id, task_id=self.request.id or "", hostname=self.request.hostname or ""
    )

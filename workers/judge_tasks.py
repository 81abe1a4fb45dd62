"""Celery task that has an LLM judge annotate a preference queue: thin — takes an id, calls one function."""

from __future__ import annotations

from webapp.core.dispatch import Task
from workers.celery import app


@app.task(name=Task.JUDGE_QUEUE, bind=True, acks_late=True, reject_on_worker_lost=False)
def judge_queue(self, judge_id: int) -> str:
    # reject_on_worker_lost=False: a judge whose worker died is failed by the reaper, and asking it
    # again resumes from the pairs it answered; a blind redelivery would only find it claimed and skip.
    from workers.judge_execution import execute_queue_judge

    return execute_queue_judge(judge_id, task_id=self.request.id or "", hostname=self.request.hostname or "")

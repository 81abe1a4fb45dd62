"""Celery tasks: thin — take ids, call one service."""

from __future__ import annotations

from webapp.core.dispatch import Task
from workers.celery import app


@app.task(name=Task.EXECUTE_RUN, bind=True, acks_late=True, reject_on_worker_lost=False)
def execute_run(self, run_id: int) -> str:
    # reject_on_worker_lost=False: a run whose worker died is LOST (the reaper says so), and the
    # user resumes it from a checkpoint; silently re-running it from scratch would duplicate data.
    from workers.execution import execute_run as run_it

    return run_it(run_id, task_id=self.request.id or "", hostname=self.request.hostname or "")


@app.task(name=Task.REAP_LOST_RUNS, ignore_result=True)
def reap_lost_runs() -> list[int]:
    """Runs, reward-model trainings and queue judges whose worker stopped heartbeating: LOST / failed; the
    queued runs of a worker that went silent are told."""
    from webapp.fleet.services import (
        announce_silent_workers,
        heartbeats_could_be_written,
        ingestion_could_be_heard,
    )
    from webapp.fleet.services import reap_lost_runs as reap
    from webapp.review.services.judges import queue_judges_reap_lost
    from webapp.rewards.services import reward_models_reap_lost

    if not heartbeats_could_be_written():  # the database (or this scheduler) was away: silence means nothing
        return []
    reward_models_reap_lost()
    queue_judges_reap_lost()
    announce_silent_workers()  # the runs waiting on a dead worker's queues learn it (same 15 s period)
    # An external run reports only through the web server: its silence means nothing while that was away.
    return reap(include_external=ingestion_could_be_heard())


@app.task(name=Task.DISPATCH_PENDING, ignore_result=True)
def dispatch_pending() -> dict[str, list[int]]:
    """Runs, reward-model trainings and queue judges asked for while the broker was unreachable: their
    tasks sent now that it answers (each kind's service; `webapp.core.dispatch.send_pending`)."""
    from webapp.experiments.services import run_dispatch_pending
    from webapp.review.services.judges import queue_judges_dispatch_pending
    from webapp.rewards.services import reward_models_dispatch_pending

    return {
        "runs": run_dispatch_pending(),
        "reward_models": reward_models_dispatch_pending(),
        "judges": queue_judges_dispatch_pending(),
    }


@app.task(name=Task.PURGE_DELETED, ignore_result=True)
def purge_deleted() -> dict[str, list[int]]:
    """The rows of deleted runs and projects, purged in short batches for a few seconds a call; the beat
    comes back for what is left (webapp/experiments/services/deletion.py)."""
    from webapp.experiments.services.deletion import purge_deleted as purge

    return purge()

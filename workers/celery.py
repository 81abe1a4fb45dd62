"""The Celery app the workers run: the dashboard's own (`webapp.core.dispatch`), with its queues
consumed, its tasks registered under the names it sends, and the periodic jobs scheduled."""

from __future__ import annotations

import os

import django
from celery import signals
from kombu import Queue as KombuQueue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
django.setup()

from webapp.core.dispatch import (  # noqa: E402 — needs django.setup()
    CONTROL_QUEUE,
    DISPATCH_PENDING_PERIOD_S,
    PURGE_DELETED_PERIOD_S,
    QUEUES,
    Task,
    celery_app,
)
from webapp.fleet.services import REAP_PERIOD_S  # noqa: E402 — the reapers' gap rule reads the same period

app = celery_app
app.conf.task_queues = [KombuQueue(name) for name in QUEUES]
# CELERY_REDIRECT_STDOUTS=0 (the compose file): a task's prints go to the process's real stdout. Ray's
# ray.init(address=...) asks sys.stdout for its fileno, which Celery's LoggingProxy lacks: joining a Ray
# cluster from a task failed with "'LoggingProxy' object has no attribute 'fileno'".
app.conf.worker_redirect_stdouts = os.environ.get("CELERY_REDIRECT_STDOUTS", "1") != "0"
app.conf.task_default_queue = CONTROL_QUEUE
app.conf.task_routes = {
    Task.REAP_LOST_RUNS: {"queue": CONTROL_QUEUE},
    Task.DISPATCH_PENDING: {"queue": CONTROL_QUEUE},
    Task.PURGE_DELETED: {"queue": CONTROL_QUEUE},
}
app.conf.beat_schedule = {
    # With a 60 s heartbeat timeout and a 15 s period a dead worker's run is LOST within 75 s at worst;
    # RUN_HEARTBEAT_TIMEOUT_S defaults to 45 so the total stays within a minute.
    "reap-lost-runs": {"task": Task.REAP_LOST_RUNS, "schedule": REAP_PERIOD_S},
    # Runs, reward-model trainings and judges asked for while the broker was unreachable
    # (webapp.core.dispatch.UNSENT): sent once it is back.
    "dispatch-pending": {"task": Task.DISPATCH_PENDING, "schedule": float(DISPATCH_PENDING_PERIOD_S)},
    # Deleted runs and projects whose purge was cut short (or never sent): finished in batches.
    "purge-deleted": {"task": Task.PURGE_DELETED, "schedule": float(PURGE_DELETED_PERIOD_S)},
}
app.autodiscover_tasks(["workers"], related_name="tasks")
app.autodiscover_tasks(["workers"], related_name="reward_tasks")
app.autodiscover_tasks(["workers"], related_name="judge_tasks")


@signals.worker_ready.connect
def _worker_ready(sender, **kwargs) -> None:
    from workers import node

    queues = [q.name for q in sender.app.amqp.queues.consume_from.values()] if sender else []
    node.start(hostname=sender.hostname if sender else "", queues=queues)


@signals.worker_shutdown.connect
def _worker_shutdown(sender, **kwargs) -> None:
    from workers import node

    node.stop()

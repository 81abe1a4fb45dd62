"""The Celery app. Configuration comes from Django settings (every CELERY_* name there)."""

from __future__ import annotations

import os

import django
from celery import Celery, signals
from kombu import Queue as KombuQueue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
django.setup()

app = Celery("rollout_studio")
app.config_from_object("django.conf:settings", namespace="CELERY")

# Queues are declared here and nowhere else. Runs go to `cpu` or `gpu` (a run's queue field);
# `control` carries the small periodic jobs so they never wait behind a training run.
QUEUES = ("cpu", "gpu", "control")
app.conf.task_queues = [KombuQueue(name) for name in QUEUES]
app.conf.task_default_queue = "control"
app.conf.task_routes = {"workers.reap_lost_runs": {"queue": "control"}}
app.conf.beat_schedule = {
    # With a 60 s heartbeat timeout and a 15 s period a dead worker's run is LOST within 75 s at worst;
    # RUN_HEARTBEAT_TIMEOUT_S defaults to 45 so the total stays within a minute.
    "reap-lost-runs": {"task": "workers.reap_lost_runs", "schedule": 15.0},
}
app.autodiscover_tasks(["workers"], related_name="tasks")
app.autodiscover_tasks(["workers"], related_name="reward_tasks")


@signals.worker_ready.connect
def _worker_ready(sender, **kwargs) -> None:
    from workers import node

    queues = [q.name for q in sender.app.amqp.queues.consume_from.values()] if sender else []
    node.start(hostname=sender.hostname if sender else "", queues=queues)


@signals.worker_shutdown.connect
def _worker_shutdown(sender, **kwargs) -> None:
    from workers import node

    node.stop()

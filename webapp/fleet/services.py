from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from webapp.experiments.models import Run, RunStatus
from webapp.experiments.services import run_auto_resume, run_transition
from webapp.fleet.models import WorkerNode


def worker_report(
    *,
    hostname: str,
    queues: list[str],
    gpus: list[dict],
    cpus: int,
    ray_address: str,
    pid: int,
    current_run_id: int | None = None,
    stopped: bool = False,
    usage: dict | None = None,
) -> WorkerNode:
    """Record a worker's heartbeat: what it serves, what it has and (`usage`) how busy it is."""
    now = timezone.now()
    node, created = WorkerNode.objects.update_or_create(
        hostname=hostname,
        defaults={
            "queues": queues,
            "gpus": gpus,
            "cpus": cpus,
            "usage": usage or {},
            "ray_address": ray_address,
            "pid": pid,
            "last_seen": now,
            "current_run_id": current_run_id,
            "stopped": stopped,
        },
        create_defaults={
            "queues": queues,
            "gpus": gpus,
            "cpus": cpus,
            "usage": usage or {},
            "ray_address": ray_address,
            "pid": pid,
            "last_seen": now,
            "started_at": now,
            "current_run_id": current_run_id,
            "stopped": stopped,
        },
    )
    return node


def reap_lost_runs(*, now=None, timeout_s: int | None = None) -> list[int]:
    """Mark runs whose worker stopped heartbeating as LOST (and resume those whose `auto_resume` knob asks
    for it). Returns the ids it marked LOST.

    A run is heartbeated by every ingested batch (the trainer's sink sends a heartbeat event when it
    has nothing else to say); STARTING runs are heartbeated by the worker before the trainer starts.
    """
    now = now or timezone.now()
    timeout = timedelta(seconds=timeout_s if timeout_s is not None else settings.RUN_HEARTBEAT_TIMEOUT_S)
    stale = list(
        Run.objects.filter(
            status__in=[RunStatus.STARTING, RunStatus.RUNNING], heartbeat_at__lt=now - timeout
        ).values_list("pk", flat=True)
    )
    lost = []
    for run_id in stale:
        with transaction.atomic():
            if run_transition(
                run_id,
                RunStatus.LOST,
                error_message=f"The worker stopped reporting for more than {int(timeout.total_seconds())} s "
                "(process killed, machine lost or network cut). Resume it from its latest checkpoint.",
            ):
                lost.append(run_id)
                run_auto_resume(run_id=run_id)  # when the run asked for it (the auto_resume knob)
    return lost

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from webapp.fleet.models import WorkerNode

ONLINE_WITHIN = timedelta(seconds=45)


def worker_list() -> QuerySet[WorkerNode]:
    return WorkerNode.objects.select_related("current_run", "current_run__project").order_by("-last_seen")


def heartbeating_hostnames(*, since) -> QuerySet:
    """Hostnames of the workers that reported after `since` and have not said they stopped: a job whose
    worker is not among them was lost with it."""
    return WorkerNode.objects.filter(last_seen__gte=since, stopped=False).values_list("hostname", flat=True)


def lost_jobs(
    started: QuerySet, *, doing: str, now=None, timeout_s: int | None = None
) -> list[tuple[int, str]]:
    """Of `started` (background jobs a worker has taken: `webapp.core.models.BackgroundJob`, filtered by
    the caller to its "running" status), those started more than the heartbeat timeout ago on a worker
    that has not reported within it — lost with their process or machine — as (id, the reason in words,
    `doing` naming the work). The reward-model and judge reapers fail what this returns."""
    now = now or timezone.now()
    timeout = timedelta(seconds=timeout_s if timeout_s is not None else settings.RUN_HEARTBEAT_TIMEOUT_S)
    alive = heartbeating_hostnames(since=now - timeout)
    lost = started.filter(started_at__lt=now - timeout).exclude(worker__in=alive).values_list("pk", "worker")
    return [
        (
            pk,
            f"The worker {worker or '?'} stopped reporting for more than {int(timeout.total_seconds())} s "
            f"while {doing} (process killed or machine lost).",
        )
        for pk, worker in lost
    ]


def is_online(node: WorkerNode) -> bool:
    return not node.stopped and timezone.now() - node.last_seen < ONLINE_WITHIN


def gpu_rows(node: WorkerNode) -> list[dict]:
    """The worker's GPUs (as detected at start) with their last utilisation and memory, where reported."""
    usage = {gpu.get("index"): gpu for gpu in (node.usage or {}).get("gpus", [])}
    rows = []
    for gpu in node.gpus:
        now = usage.get(gpu.get("index"), {})
        rows.append(
            {
                **gpu,
                "utilization_percent": now.get("utilization_percent"),
                "memory_used_gb": (now.get("memory_used_mb") or 0) / 1024,
                "memory_total_gb": (now.get("memory_total_mb") or gpu.get("memory_mb") or 0) / 1024,
            }
        )
    return rows

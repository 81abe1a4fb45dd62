from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.urls import reverse
from django.utils import timezone

from webapp.experiments.models import ACTIVE_STATUSES, Run, RunOrigin, RunStatus
from webapp.fleet.models import ONLINE_WITHIN, WorkerNode


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


def lost_run_ids(*, now=None, timeout_s: int | None = None, include_external: bool = True) -> list[int]:
    """Active runs whose heartbeat is older than the timeout. A run is heartbeated by every batch its
    trainer reports (through the web server) and, while a dashboard worker trains it, by that worker's
    training process straight to the database (`workers.execution.beating`): a web restart does not lose
    a dashboard worker's healthy run, a killed worker does. An external run is heartbeated through the web
    server alone: `include_external=False` leaves those out while the web server may have been away."""
    now = now or timezone.now()
    since = now - timedelta(seconds=timeout_s if timeout_s is not None else settings.RUN_HEARTBEAT_TIMEOUT_S)
    silent = Run.objects.filter(status__in=[RunStatus.STARTING, RunStatus.RUNNING], heartbeat_at__lt=since)
    if not include_external:
        silent = silent.exclude(origin=RunOrigin.EXTERNAL)
    return list(silent.values_list("pk", flat=True))


def online_workers() -> QuerySet[WorkerNode]:
    """The workers that reported within ONLINE_WITHIN and have not said they stopped."""
    return WorkerNode.objects.online()


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


def queued_runs_by_queue(*, member_of: set[int]) -> list[dict]:
    """Per run queue: the runs waiting on it in the order they start, with each one's position and its
    queue's warning from the one queue rule (`webapp.experiments.selectors.queue_states`). Runs of
    projects the viewer is not a member of are counted, not named."""
    from webapp.core.dispatch import Queue

    waiting = list(
        Run.objects.filter(status=RunStatus.QUEUED)
        .exclude(origin="external")
        .select_related("project")
        .order_by("created_at", "pk")
    )
    states = queue_states(waiting)
    rows = []
    for queue in Queue.values:
        mine = [run for run in waiting if run.queue == queue]
        rows.append(
            {
                "queue": queue,
                "runs": [
                    {"run": run, "position": states[run.pk]["position"]}
                    for run in mine
                    if run.project_id in member_of
                ],
                "others": sum(run.project_id not in member_of for run in mine),
                "warning": states[mine[0].pk]["warning"] if mine else "",
            }
        )
    return rows


# --- the queue explained ------------------------------------------------------------------------------

# A queued run's state names at most this many of the runs ahead of it (the rest are counted).
QUEUE_AHEAD_SHOWN = 20


def queue_states(runs: list[Run]) -> dict[int, dict[str, Any]]:
    """Where each QUEUED dashboard run of `runs` stands in its Celery queue: the one rule the run page,
    the runs list, the API and the live updates read (`run_queue_state` for one run).

    Runs leave a queue in launch order, so what is ahead of a queued run is every active dashboard run on
    the same queue launched before it: the ones already with a worker (STARTING, RUNNING) and the
    QUEUED ones, whose count gives its position (1: next to start). Runs of other projects are counted,
    never named (everyone the state reaches is a member of the run's own project). The workers serving
    the queue are the ones whose last heartbeat names it (webapp.fleet); with none online the state
    says so (`warning`), at launch and while the run waits.

    {run id: {"queue", "position", "ahead": [{"id", "name", "status", "url"}], "ahead_count",
    "ahead_unnamed" (other projects' runs, and this project's past the first QUEUE_AHEAD_SHOWN), "workers": [{"hostname", "busy"}], "workers_offline", "warning"}}."""
    waiting = [run for run in runs if run.status == RunStatus.QUEUED and not run.is_external]
    if not waiting:
        return {}
    queues = {run.queue for run in waiting}
    active = list(
        Run.objects.filter(status__in=ACTIVE_STATUSES, queue__in=queues)
        .exclude(origin="external")
        .order_by("created_at", "pk")
        .values("pk", "name", "status", "queue", "project_id", "project__slug", "created_at")
    )
    nodes = [node for node in WorkerNode.objects.all() if set(node.queues) & queues]
    online_ids = set(
        WorkerNode.objects.online().filter(pk__in=[n.pk for n in nodes]).values_list("pk", flat=True)
    )
    states: dict[int, dict[str, Any]] = {}
    for run in waiting:
        ahead = [
            row
            for row in active
            if row["queue"] == run.queue and (row["created_at"], row["pk"]) < (run.created_at, run.pk)
        ]
        # A STARTING or RUNNING run is with a worker already, whenever it was launched.
        ahead += [
            row
            for row in active
            if row["queue"] == run.queue and row["status"] != RunStatus.QUEUED and row not in ahead
        ]
        mine = [row for row in ahead if row["project_id"] == run.project_id]
        serving = [node for node in nodes if run.queue in node.queues]
        online = [node for node in serving if node.pk in online_ids]
        warning = ""
        if not online:
            warning = (
                f"No live worker serves the {run.queue} queue"
                + (f" ({len(serving)} known, none reported in the last minute)" if serving else "")
                + f": this run waits until one starts (e.g. `celery -A workers worker -Q {run.queue}`)."
            )
        states[run.pk] = {
            "queue": run.queue,
            "position": 1 + sum(row["status"] == RunStatus.QUEUED for row in ahead),
            "ahead": [
                {
                    "id": row["pk"],
                    "name": row["name"],
                    "status": row["status"],
                    "url": reverse("experiments:run_detail", args=[row["project__slug"], row["pk"]]),
                }
                for row in mine[:QUEUE_AHEAD_SHOWN]
            ],
            "ahead_count": len(ahead),
            "ahead_unnamed": len(ahead) - len(mine[:QUEUE_AHEAD_SHOWN]),
            "workers": [
                {"hostname": node.hostname, "busy": node.current_run_id is not None} for node in online
            ],
            "workers_offline": len(serving) - len(online),
            "warning": warning,
        }
    return states


def run_queue_state(run: Run) -> dict[str, Any] | None:
    """`queue_states` of one run: None unless it is a queued dashboard run."""
    return queue_states([run]).get(run.pk)


def queued_run_ids(queue: str) -> list[int]:
    """The dashboard runs waiting on `queue`: whose queue state changes when a run ahead moves on or a
    worker of the queue comes or goes."""
    return list(
        Run.objects.filter(status=RunStatus.QUEUED, queue=queue)
        .exclude(origin="external")
        .values_list("pk", flat=True)
    )

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from webapp.core.broadcast import broadcast_on_commit
from webapp.experiments.models import Run, RunStatus
from webapp.experiments.services.lineage import run_auto_resume
from webapp.experiments.services.transitions import run_transition
from webapp.fleet.models import ONLINE_WITHIN, WorkerNode
from webapp.fleet.selectors import is_online, lost_run_ids, queue_states, queued_run_ids


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
    models: list[str] | None = None,
    ray_resources: dict[str, float] | None = None,
    parts: list[dict] | None = None,
) -> WorkerNode:
    """Record a worker's heartbeat: what it serves, what it has, the Ray cluster it runs on
    (`ray_resources`: Ray's totals, {} when unknown; None keeps what the worker reported before — a run's
    process reports without measuring) and (`usage`) how busy it is.

    Its current run is the one it names or, when it names none, the active run it claimed (`Run.worker`):
    under Celery's prefork pool a child process trains while the parent sends the heartbeats without
    knowing the child's run, and the Workers page showed the worker idle 10 s into every run.

    `parts`: the training parts it has (`trainers.parts.part_catalogue`, names, versions, docstrings and
    option schemas), which the run form, the API and the launch check read; None keeps what it reported."""
    now = timezone.now()
    if current_run_id is None and not stopped:
        current_run_id = (
            Run.objects.filter(worker=hostname, status__in=(RunStatus.STARTING, RunStatus.RUNNING))
            .order_by("-pk")
            .values_list("pk", flat=True)
            .first()
        )
    before = WorkerNode.objects.filter(hostname=hostname).first()
    node, created = WorkerNode.objects.update_or_create(
        hostname=hostname,
        defaults={
            "queues": queues,
            "gpus": gpus,
            "cpus": cpus,
            "usage": usage or {},
            "judge_models": models or [],
            "ray_address": ray_address,
            **({"ray_resources": ray_resources} if ray_resources is not None else {}),
            **({"parts": parts} if parts is not None else {}),
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
            "judge_models": models or [],
            "ray_address": ray_address,
            "ray_resources": ray_resources or {},
            "parts": parts or [],
            "pid": pid,
            "last_seen": now,
            "started_at": now,
            "current_run_id": current_run_id,
            "stopped": stopped,
        },
    )
    if before is None or is_online(before) != (not stopped):
        # The worker came (back) or said it stops: the runs waiting on its queues learn it at once.
        for queue in set(queues) | set(before.queues if before else []):
            run_queue_announce(queue)
    return node


def reap_lost_runs(*, now=None, timeout_s: int | None = None, include_external: bool = True) -> list[int]:
    """Mark runs whose worker stopped heartbeating as LOST (and resume those whose `auto_resume` knob asks
    for it). Returns the ids it marked LOST.

    A run is heartbeated by every ingested batch (the trainer's sink sends a heartbeat event when it
    has nothing else to say); STARTING runs are heartbeated by the worker before the trainer starts, and a
    worker's training process heartbeats its run directly (`lost_run_ids`). `include_external=False`
    spares the external runs (the beat's reaper passes it while the web server may have been away:
    `ingestion_could_be_heard`).
    """
    now = now or timezone.now()
    timeout = timedelta(seconds=timeout_s if timeout_s is not None else settings.RUN_HEARTBEAT_TIMEOUT_S)
    lost = []
    for run_id in lost_run_ids(
        now=now, timeout_s=int(timeout.total_seconds()), include_external=include_external
    ):
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


REAP_PERIOD_S = 15.0  # how often the beat runs the reapers (workers/celery.py schedules them with it)


class DatabaseWatch:
    """How long the database has answered this process's reaper without a gap. While the database is
    down nobody can write a heartbeat (the web's ingestion nor the worker's `beating`), so a run's
    silence then says nothing about its worker: a reaper that came back after a gap, or after a pass that
    found the database away, first waits a full heartbeat timeout (found by the deploy tier: Postgres
    stopped ~30 s made a healthy run LOST at the first reap after it returned, twice — the second time
    one failed pass left answers exactly two periods apart, which the first rule, "a gap longer than two
    periods", did not count). A reaper process that just started counts as having come back."""

    def __init__(self, gap_s: float = 1.5 * REAP_PERIOD_S) -> None:
        self.gap_s = gap_s
        self.last_answer: datetime | None = None
        self.answering_since: datetime | None = None

    def answered(self, now: datetime) -> float:
        """Record that the database answered at `now`; the seconds it has answered without a gap."""
        if self.last_answer is None or (now - self.last_answer).total_seconds() > self.gap_s:
            self.answering_since = now
        self.last_answer = now
        assert self.answering_since is not None
        return (now - self.answering_since).total_seconds()

    def failed(self) -> None:
        """The database did not answer: whatever answers come next start a new stretch."""
        self.last_answer = self.answering_since = None


_database_watch = DatabaseWatch()


def heartbeats_could_be_written(*, now=None, watch: DatabaseWatch | None = None) -> bool:
    """Whether the beat's reapers may judge heartbeats now: the database has answered them (a query, here)
    for a full heartbeat timeout without a gap (`DatabaseWatch`). A database that does not answer raises,
    as the reapers would, and counts as a gap."""
    now, watch = now or timezone.now(), watch or _database_watch
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        watch.failed()
        raise
    return watch.answered(now) >= settings.RUN_HEARTBEAT_TIMEOUT_S


_web_watch = DatabaseWatch()


def ingestion_could_be_heard(*, now=None, watch: DatabaseWatch | None = None, timeout_s: float = 5.0) -> bool:
    """Whether an external trainer could have reached the web server for a full heartbeat timeout: the
    beat's reaper asks the web server's /healthz (DASHBOARD_URL, as the workers report) on each pass, with
    `DatabaseWatch`'s rule for gaps. An external run is heartbeated only through the web server, and its
    SDK, refused during a restart, backs off up to 30 s before it tries again: found by bench/soak.py, a
    web restart that took 34 s under load made both healthy external runs LOST at the first reap after
    it (their final SUCCEEDED arrived and was ignored). A web server that does not answer counts as away."""
    import requests

    now, watch = now or timezone.now(), watch or _web_watch
    try:
        up = requests.get(f"{settings.DASHBOARD_URL.rstrip('/')}/healthz", timeout=timeout_s).ok
    except requests.RequestException:
        up = False
    if not up:
        watch.failed()
        return False
    return watch.answered(now) >= settings.RUN_HEARTBEAT_TIMEOUT_S


def run_queue_announce(queue: str) -> None:
    """After the commit, tell the page of every run waiting on `queue` where it stands now (a seq-less
    `queue` message carrying `queue_states`): a run ahead started or ended, a worker of the queue came
    or went."""

    def announce() -> None:
        waiting = list(Run.objects.filter(pk__in=queued_run_ids(queue)))
        states = queue_states(waiting)
        for run in waiting:
            broadcast_on_commit(run, [{"type": "queue", "queue": states.get(run.pk)}])

    transaction.on_commit(announce)


def on_run_moved(sender: Any, *, run_id: int, queue: str, **kwargs: Any) -> None:
    """`webapp.experiments.signals.run_moved`'s receiver (connected in FleetConfig.ready)."""
    run_queue_announce(queue)


def announce_silent_workers(*, now=None, period_s: float = 15.0) -> list[str]:
    """The workers that went silent within the last `period_s` (their last report just passed
    ONLINE_WITHIN, without saying they stop: killed, machine lost): tell the runs waiting on their queues,
    whose pages would otherwise show them online until a reload. The reaper calls this every period.
    Returns their hostnames."""
    now = now or timezone.now()
    silent = WorkerNode.objects.filter(
        stopped=False,
        last_seen__lt=now - ONLINE_WITHIN,
        last_seen__gte=now - ONLINE_WITHIN - timedelta(seconds=period_s),
    )
    queues: set[str] = set()
    hostnames = []
    for node in silent:
        queues.update(node.queues)
        hostnames.append(node.hostname)
    for queue in sorted(queues):
        run_queue_announce(queue)
    return hostnames

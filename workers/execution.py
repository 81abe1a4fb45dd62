"""What a worker does with a run: claim it, hand the resolved config to the trainer, report.

The trainer never touches the database: it reports through `trainers.sdk.reporting.HttpSink` to the
dashboard's ingestion API, exactly as an external trainer would. This module only says how a run is
claimed (QUEUED → STARTING, a conditional update so a redelivered task cannot run it twice), cancelled
and failed (`run_job_of`), gives the trainer its ingestion token and keeps the run's heartbeat; the
claim, the cancel watcher, turning an exception the trainer could not report into FAILED and giving the
memory back are the one job wrapper's (`workers.jobs.run_job`), as for every background job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone

from webapp.experiments.models import Run, RunKind, RunStatus
from webapp.experiments.selectors import run_cancel_requested
from webapp.experiments.services.heartbeats import run_heartbeat
from webapp.experiments.services.runs import run_issue_ingest_token
from webapp.experiments.services.transitions import run_transition
from webapp.projects.services import secret_values
from workers import node
from workers.cancel import watching
from workers.jobs import Job, run_job, worker_name

log = logging.getLogger(__name__)


def run_artifacts_dir(run: Run) -> Path:
    path = Run.artifacts_path(run.pk)
    path.mkdir(parents=True, exist_ok=True)
    return path


def trainer_config(run: Run) -> dict[str, Any]:
    """The resolved config as the trainer reads it: knobs, plus the pinned environment and rubric
    reduced to what the trainer builds them from (their names and versions stay on the Run)."""
    config = dict(run.resolved_config)
    environment = config.get("environment") or {}
    rubric = config.get("rubric") or {}
    config["environment"] = {"kind": environment.get("kind"), "config": environment.get("config", {})}
    config["rubric"] = {
        "aggregation": rubric.get("aggregation", "weighted_sum"),
        "criteria": rubric.get("criteria", []),
    }
    return config


def judge_secrets(run: Run, rubric: dict[str, Any]) -> dict[str, str]:
    """The project secrets the run's LLM judges name (their endpoints' keys), decrypted for the trainer in
    this process only: never written to the run's config, its events or its log."""
    from trainers.rubrics.judge_models import config_secret_names, secret_names

    # The rubric's judges, and the LLMs the run's own knobs name (Training-Free GRPO's experience model, the
    # curriculum's task generator).
    names = sorted({*secret_names(rubric), *config_secret_names(run.resolved_config or {})})
    return secret_values(project=run.project, names=names) if names else {}


def resume_path(run: Run) -> str | None:
    """Resume and fork start from the parent's checkpoint: weights, optimizer, RNG, data position."""
    if run.parent_checkpoint_id and run.lineage in ("resume", "fork"):
        return run.parent_checkpoint.path
    return None


HEARTBEAT_S = 10.0


@contextmanager
def beating(run_id: int, interval_s: float = HEARTBEAT_S) -> Iterator[None]:
    """While the run trains in this process, refresh its heartbeat from here too, straight to the
    database: the trainer's own heartbeats reach it only through the web server, and a web restart longer
    than RUN_HEARTBEAT_TIMEOUT_S would otherwise make the reaper mark a healthy run LOST (found by the deploy
    tier). The thread dies with the process, so a killed worker still loses its run. It is the cancel
    watcher's thread (own connection, a failed write logged and retried) with a write that never asks to stop."""

    def beat() -> bool:
        run_heartbeat(run_id)
        return False

    with watching(
        beat, name=f"heartbeat-{run_id}", poll_s=interval_s, doing=f"refresh run {run_id}'s heartbeat"
    ):
        yield


def run_job_of(run_id: int, *, task_id: str = "", hostname: str = "") -> Job:
    """A run as a background job: claimed QUEUED → STARTING by this worker; ended CANCELLED or FAILED
    (message and traceback) unless its trainer reported the end first."""
    worker = worker_name(hostname)
    return Job(
        label=f"run {run_id}",
        claim=lambda: run_transition(
            run_id, RunStatus.STARTING, task_id=task_id, worker=worker, heartbeat_at=timezone.now()
        ),
        status=lambda: Run.objects.filter(pk=run_id).values_list("status", flat=True).first(),
        cancel_requested=lambda: run_cancel_requested(run_id),
        cancelled=lambda: run_transition(run_id, RunStatus.CANCELLED),
        failed=lambda failure: run_transition(
            run_id, RunStatus.FAILED, error_message=failure.message, error_traceback=failure.traceback
        ),
    )


def execute_run(run_id: int, *, task_id: str = "", hostname: str = "") -> str:
    return run_job(
        run_job_of(run_id, task_id=task_id, hostname=hostname), lambda cancel: _run(run_id, cancel)
    )


def _run(run_id: int, cancel: Callable[[], bool]) -> str:
    """The claimed run on this worker: its token, its own peak memory, its heartbeat, then the trainer."""
    run = Run.objects.select_related("parent_checkpoint").get(pk=run_id)
    # The run's own token, the one its creator was given: both may report, with one sequence.
    token = run.ingest_token() if run.ingest_token_nonce else run_issue_ingest_token(run)
    node.set_current_run(run_id)
    from trainers.sdk.resources import reset_peaks

    reset_peaks()  # the run reports its own peak memory, not the worker's earlier runs'
    try:
        with beating(run_id):
            return _train(run, token, cancel)
    finally:
        node.set_current_run(None)


def _train(run: Run, token: str, cancel: Callable[[], bool]) -> str:
    """`cancel`: the worker's answer to "was this run asked to stop?" (workers.cancel), the trainer's one
    cancellation check (trainers.sdk.cancel) together with the ingestion replies."""
    if run.is_dpo:
        return _train_dpo(run, token, cancel)
    if run.kind == RunKind.TINKER:
        return _serve_tinker(run, token, cancel)
    from trainers.recipes.grpo import train
    from trainers.sdk.events import JsonlSink, MultiSink
    from trainers.sdk.reporting import HttpSink

    out_dir = run_artifacts_dir(run)
    http = HttpSink(settings.DASHBOARD_URL, run.pk, token, start_seq=run.last_seq + 1)
    sink = MultiSink(http, JsonlSink(out_dir / "events.jsonl"))
    config = trainer_config(run)
    try:
        result = train(
            config,
            sink=sink,
            out_dir=str(out_dir),
            resume_from=resume_path(run),
            secrets=judge_secrets(run, config["rubric"]),
            cancel=cancel,
        )
    finally:
        http.emit(http.heartbeat())  # the run's final peak memory
        if not http.close(timeout_s=120):
            log.error("run %s: some events could not be delivered: %s", run.pk, http.stats)
    return getattr(result, "status", "done")


def _train_dpo(run: Run, token: str, cancel: Callable[[], bool]) -> str:
    """A DPO run: `trainers.recipes.dpo.train_dpo` on the run's preference snapshot, reporting through the
    same ingestion API as a GRPO run (phases, metrics, checkpoints, status)."""
    from trainers.recipes.dpo import train_dpo
    from trainers.sdk.events import JsonlSink, MultiSink, make_event
    from trainers.sdk.reporting import HttpSink
    from webapp.review.exports import dpo_records

    out_dir = run_artifacts_dir(run)
    http = HttpSink(settings.DASHBOARD_URL, run.pk, token, start_seq=run.last_seq + 1)
    sink = MultiSink(http, JsonlSink(out_dir / "events.jsonl"))
    config = {k: v for k, v in run.resolved_config.items() if k not in ("kind", "snapshot")}
    snapshot = run.preference_snapshot
    assert snapshot is not None  # a DPO run is created on one (run_create_dpo)
    records = dpo_records(snapshot)
    sink.emit(
        make_event(
            "log",
            level="info",
            message=f"DPO on preference dataset #{snapshot.pk} (v{snapshot.version}): {len(records)} pairs",
        )
    )
    try:
        result = train_dpo(
            records, config, out_dir=out_dir, sink=sink, resume_from=resume_path(run), cancel=cancel
        )
    finally:
        http.emit(http.heartbeat())  # the run's final peak memory
        if not http.close(timeout_s=120):
            log.error("run %s: some events could not be delivered: %s", run.pk, http.stats)
    return "cancelled" if result.cancelled else f"done ({result.steps} steps)"


def _serve_tinker(run: Run, token: str, cancel: Callable[[], bool]) -> str:
    """A Tinker API training client (workers/tinker_execution.py), reporting as every run does."""
    from trainers.sdk.events import JsonlSink, MultiSink
    from trainers.sdk.reporting import HttpSink
    from workers.tinker_execution import serve_tinker_run

    out_dir = run_artifacts_dir(run)
    http = HttpSink(settings.DASHBOARD_URL, run.pk, token, start_seq=run.last_seq + 1)
    sink = MultiSink(http, JsonlSink(out_dir / "events.jsonl"))
    try:
        return serve_tinker_run(run, sink, out_dir, cancel)
    finally:
        http.emit(http.heartbeat())  # the run's final peak memory
        if not http.close(timeout_s=120):
            log.error("run %s: some events could not be delivered: %s", run.pk, http.stats)

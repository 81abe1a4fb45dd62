"""What a worker does with a run: claim it, hand the resolved config to the trainer, report.

The trainer never touches the database: it reports through `trainers.sdk.reporting.HttpSink` to the
dashboard's ingestion API, exactly as an external trainer would. This module only claims the run
(QUEUED → STARTING, a conditional update so a redelivered task cannot run it twice), gives the
trainer a fresh ingestion token, and turns an exception the trainer could not report into FAILED.
"""

from __future__ import annotations

import logging
import os
import socket
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone

from webapp.experiments.models import Run, RunStatus
from webapp.experiments.selectors import run_cancel_requested
from webapp.experiments.services.heartbeats import run_heartbeat
from webapp.experiments.services.runs import run_issue_ingest_token
from webapp.experiments.services.transitions import run_transition
from webapp.projects.services import secret_values
from workers import node
from workers.cancel import watching

log = logging.getLogger(__name__)


def run_artifacts_dir(run: Run) -> Path:
    path = Path(settings.RUN_ARTIFACTS_DIR) / f"run-{run.pk}"
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
    from trainers.rubrics.judge_models import secret_names

    names = secret_names(rubric)
    experience_key = (run.resolved_config or {}).get(
        "experience_api_key_secret"
    )  # Training-Free GRPO's endpoint
    if experience_key and experience_key not in names:
        names = [*names, experience_key]
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


def execute_run(run_id: int, *, task_id: str = "", hostname: str = "") -> str:
    hostname = hostname or f"{socket.gethostname()}:{os.getpid()}"
    claimed = run_transition(
        run_id, RunStatus.STARTING, task_id=task_id, worker=hostname, heartbeat_at=timezone.now()
    )
    if not claimed:
        status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
        log.info("run %s not started: it is %s", run_id, status)
        return f"skipped ({status})"
    run = Run.objects.select_related("parent_checkpoint").get(pk=run_id)
    # The run's own token, the one its creator was given: both may report, with one sequence.
    token = run.ingest_token() if run.ingest_token_nonce else run_issue_ingest_token(run)
    node.set_current_run(run_id)
    from trainers.sdk.resources import reset_peaks

    reset_peaks()  # the run reports its own peak memory, not the worker's earlier runs'
    try:
        with watching(lambda: run_cancel_requested(run_id), name=f"run-{run_id}") as cancel, beating(run_id):
            return _train(run, token, cancel.requested)
    except BaseException as exc:  # noqa: BLE001 — also soft time limits and KeyboardInterrupt
        from trainers.sdk.cancel import Cancelled

        if isinstance(exc, Cancelled):  # stopped on its Cancel: no failure (the trainer reported it, or now)
            run_transition(run_id, RunStatus.CANCELLED)
            return "cancelled"
        failed = run_transition(
            run_id,
            RunStatus.FAILED,
            error_message=f"{type(exc).__name__}: {exc}"[:5000],
            error_traceback=traceback.format_exc(),
        )
        if not failed:  # the run had already ended (its trainer reported it): the error still goes somewhere
            log.error("run %s raised after it had ended", run_id, exc_info=exc)
        if not isinstance(exc, Exception):
            raise
        return "failed"
    finally:
        node.set_current_run(None)
        # The worker lives on after the run: hand its freed heap back to the OS (GBs for a 135M model).
        from trainers.learn.memory import release_memory

        log.info("run %s: released %.1f GB after the run", run_id, release_memory() / 2**30)


def _train(run: Run, token: str, cancel: Callable[[], bool]) -> str:
    """`cancel`: the worker's answer to "was this run asked to stop?" (workers.cancel), the trainer's one
    cancellation check (trainers.sdk.cancel) together with the ingestion replies."""
    if run.is_dpo:
        return _train_dpo(run, token, cancel)
    from trainers.learn.trainer import train
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
    """A DPO run: TRL's DPOTrainer on the run's preference snapshot, reported by the TRL callback
    through the same ingestion API (metrics, checkpoints, cancel, final status)."""
    from trainers.integrations.trl import RolloutStudioCallback
    from trainers.learn.dpo import train_dpo
    from trainers.sdk.cancel import cancellable
    from trainers.sdk.client import Run as StudioRun
    from trainers.sdk.reporting import HttpSink
    from webapp.review.exports import dpo_records

    out_dir = run_artifacts_dir(run)
    http = HttpSink(settings.DASHBOARD_URL, run.pk, token, start_seq=run.last_seq + 1)
    reporter = StudioRun(run.pk, token, settings.DASHBOARD_URL, sink=http)
    http.emit({"type": "status", "status": "RUNNING"})
    config = {k: v for k, v in run.resolved_config.items() if k not in ("kind", "snapshot")}
    records = dpo_records(run.preference_snapshot)
    reporter.log(
        f"DPO on preference dataset #{run.preference_snapshot_id} (v{run.preference_snapshot.version}): "
        f"{len(records)} pairs, {config.get('max_steps')} steps"
    )
    callback = RolloutStudioCallback(reporter, algorithm="dpo", finish_on_end=True)
    try:
        with cancellable(cancel):  # the callback stops TRL at the end of the step under way
            result = train_dpo(
                records, config, out_dir=out_dir, callbacks=[callback], resume_from=resume_path(run)
            )
    finally:
        # The run's final peak memory, unless the callback has already finished the run (its final status
        # closed the sink: emitting then raised, and turned a SUCCEEDED run's task into 'failed').
        if not reporter.finished:
            http.emit(http.heartbeat())
        if not http.close(timeout_s=120):
            log.error("run %s: some events could not be delivered: %s", run.pk, http.stats)
    return "cancelled" if callback.cancelled else f"done ({result.steps} steps)"

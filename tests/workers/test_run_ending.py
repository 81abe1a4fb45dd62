"""How the worker ends a run whose training raised: a cancel is a cancel, not a failure; a failure is
recorded with its traceback; an error raised after the trainer had already reported the run's end is
logged, not lost, and does not rewrite that end."""

from __future__ import annotations

import logging

from webapp.experiments.models import Run, RunStatus
from webapp.experiments.services.transitions import run_transition
from workers import execution, jobs


def training_that(raises):
    def train(run, token, cancel):
        run_transition(run.pk, RunStatus.RUNNING)
        raises(run)

    return train


def test_training_stopped_by_its_cancel_ends_cancelled_not_failed(run, monkeypatch):
    from trainers.sdk.cancel import Cancelled

    def cancelled(run):
        raise Cancelled()

    monkeypatch.setattr(execution, "_train", training_that(cancelled))
    assert execution.execute_run(run.pk, hostname="test@host") == "cancelled"
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and not run.error_message


def test_a_failure_is_recorded_with_its_traceback(run, monkeypatch):
    def broken(run):
        raise ValueError("the environment exploded")

    monkeypatch.setattr(execution, "_train", training_that(broken))
    assert execution.execute_run(run.pk, hostname="test@host") == "failed"
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error_message == "ValueError: the environment exploded"
    assert "the environment exploded" in run.error_traceback


def test_an_error_after_the_run_ended_is_logged_and_keeps_its_end(run, monkeypatch, caplog):
    def ended_then_broke(run):
        run_transition(run.pk, RunStatus.CANCELLED)  # the trainer's own report: the run ended
        raise RuntimeError("closing the sink failed")

    monkeypatch.setattr(execution, "_train", training_that(ended_then_broke))
    with caplog.at_level(logging.ERROR, logger=jobs.log.name):
        assert execution.execute_run(run.pk, hostname="test@host") == "failed"
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED
    record = next(r for r in caplog.records if "raised after it had ended" in r.getMessage())
    assert record.exc_info and "closing the sink failed" in str(record.exc_info[1])

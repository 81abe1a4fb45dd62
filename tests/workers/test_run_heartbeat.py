"""The training process heartbeats its run straight to the database, so a web restart does not lose it."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from webapp.experiments.models import Run
from webapp.fleet.services import reap_lost_runs
from workers.execution import beating


@pytest.mark.django_db(transaction=True)
def test_a_run_trained_here_stays_alive_while_nothing_reaches_the_web_and_is_lost_once_its_process_stops(run):
    Run.objects.filter(pk=run.pk).update(
        status="RUNNING", heartbeat_at=timezone.now() - timedelta(seconds=300)
    )
    with beating(run.pk, interval_s=0.1):
        deadline = time.monotonic() + 10
        while Run.objects.get(pk=run.pk).heartbeat_at < timezone.now() - timedelta(seconds=5):
            assert time.monotonic() < deadline, "the training process never refreshed the heartbeat"
            time.sleep(0.05)
        assert reap_lost_runs(timeout_s=45) == []
    # The process stopped beating (killed): once the timeout passes, the run is lost.
    assert reap_lost_runs(timeout_s=45, now=timezone.now() + timedelta(seconds=60)) == [run.pk]

"""A run that heartbeats but makes no progress is flagged as stalled (Run.is_stalled), on its page and in the
runs list; a heartbeat alone never counts as progress, a metrics batch does."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from tests.webapp.rollouts.test_ingest import post, reporting_run  # noqa: F401  (the fixture)
from webapp.experiments.models import Run, RunStatus

NOW = timezone.now()


@pytest.mark.parametrize(
    "status, heartbeat_ago, progress_ago, stalled",
    [
        (RunStatus.RUNNING, 5, 11 * 60, True),
        (RunStatus.RUNNING, 5, 60, False),  # progressing
        (RunStatus.RUNNING, 300, 11 * 60, False),  # no heartbeat either: that is LOST, not stalled
        (RunStatus.SUCCEEDED, 5, 11 * 60, False),
        (RunStatus.STARTING, 5, 11 * 60, True),  # loading for ever
    ],
)
def test_stalled_is_heartbeats_without_progress(settings, status, heartbeat_ago, progress_ago, stalled):
    settings.RUN_STALL_AFTER_S, settings.RUN_HEARTBEAT_TIMEOUT_S = 600, 45
    run = Run(
        status=status,
        heartbeat_at=NOW - timedelta(seconds=heartbeat_ago),
        started_at=NOW - timedelta(hours=1),
        progress_at=NOW - timedelta(seconds=progress_ago),
    )
    assert run.is_stalled(NOW) is stalled
    # Without a progress report yet, the clock runs from the start.
    run.progress_at = None
    assert run.is_stalled(NOW) is (status != RunStatus.SUCCEEDED and heartbeat_ago < 45)


@pytest.mark.parametrize("stall_after_s, stalled", [(3600, False), (600, True), (300, True)])
def test_how_long_without_progress_counts_as_stalled_is_the_deployments_choice(
    settings, stall_after_s, stalled
):
    settings.RUN_STALL_AFTER_S, settings.RUN_HEARTBEAT_TIMEOUT_S = stall_after_s, 45
    quiet = NOW - timedelta(minutes=11)
    run = Run(status=RunStatus.RUNNING, heartbeat_at=NOW, started_at=quiet, progress_at=quiet)
    assert run.is_stalled(NOW) is stalled
    assert (run.stall(NOW) is not None) is stalled


def test_heartbeats_do_not_count_as_progress_and_the_pages_flag_the_run(client, reporting_run, signed_in):  # noqa: F811
    run, token = reporting_run
    Run.objects.filter(pk=run.pk).update(status=RunStatus.STARTING)
    post(client, run, token, {"events": [{"seq": 1, "type": "status", "status": "RUNNING"}]})
    run.refresh_from_db()
    first = run.progress_at
    assert first is not None and run.status == RunStatus.RUNNING
    Run.objects.filter(pk=run.pk).update(progress_at=timezone.now() - timedelta(hours=1))
    post(
        client,
        run,
        token,
        {"events": [{"seq": 2, "type": "heartbeat"}, {"seq": 3, "type": "log", "message": "waiting"}]},
    )
    run.refresh_from_db()
    assert run.is_stalled()

    bob = signed_in("bob")
    page = bob.get(reverse("experiments:run_detail", args=[run.project.slug, run.pk])).content.decode()
    assert "stalled: no progress for 1" in page and "data-run-stalled" in page
    listing = bob.get(reverse("experiments:run_list", args=[run.project.slug])).content.decode()
    assert "stalled: no progress for 1" in listing

    post(client, run, token, {"events": [{"seq": 4, "type": "metrics", "step": 1, "values": {"loss": 1.0}}]})
    run.refresh_from_db()
    assert not run.is_stalled()
    assert (
        "data-run-stalled"
        not in bob.get(reverse("experiments:run_list", args=[run.project.slug])).content.decode()
    )


def test_the_stall_the_run_page_is_told_names_since_when_and_for_how_long(settings):
    settings.RUN_STALL_AFTER_S, settings.RUN_HEARTBEAT_TIMEOUT_S = 600, 45
    since = NOW - timedelta(minutes=11)
    run = Run(status=RunStatus.RUNNING, heartbeat_at=NOW, started_at=since, progress_at=since)
    assert run.stall(NOW) == {"since": since.isoformat(), "for": "11\xa0minutes"}
    run.progress_at = NOW
    assert run.stall(NOW) is None


def test_a_status_report_is_progress_in_the_event_it_is_stored_as(client, reporting_run):  # noqa: F811
    """A page that reconnects replays stored status events after the snapshot: none may say "stalled"
    about a moment when the trainer had just reported."""
    from webapp.rollouts.models import RunEvent

    run, token = reporting_run
    long_ago = timezone.now() - timedelta(hours=1)
    Run.objects.filter(pk=run.pk).update(
        status=RunStatus.STARTING, heartbeat_at=timezone.now(), started_at=long_ago, progress_at=long_ago
    )
    assert Run.objects.get(pk=run.pk).is_stalled()
    post(client, run, token, {"events": [{"seq": 1, "type": "status", "status": "RUNNING"}]})
    stored = RunEvent.objects.get(run=run, seq=1).summary
    assert stored["status"] == "RUNNING" and stored["stall"] is None

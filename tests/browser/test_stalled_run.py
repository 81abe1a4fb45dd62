"""A run that heartbeats but makes no progress, in real Chromium against a real daphne: flagged in the runs
list and on its page; on the open page the flag goes away when progress arrives and comes back, without a
reload, when the run stalls again while its trainer keeps heartbeating."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.browser.conftest import elsewhere, sign_in, wait_until_following
from tests.browser.test_run_page_charts import report
from tests.conftest import PASSWORD
from tests.webapp.factories import make_run
from webapp.experiments.models import Run, RunStatus


def an_hour_without_progress(run_id: int) -> None:
    now = timezone.now()
    Run.objects.filter(pk=run_id).update(
        status=RunStatus.RUNNING,
        started_at=now - timedelta(hours=2),
        heartbeat_at=now,
        progress_at=now - timedelta(hours=1),
    )


@pytest.fixture
def stalled_run(transactional_db, project, environment, rubric, users):
    """A RUNNING run of the test story's project whose trainer heartbeats and reported progress an hour
    ago (RUN_STALL_AFTER_S is 600 s), and a run beside it that is just fine."""
    run = make_run(project, environment, rubric, users["alice"], "hung", overrides={"max_steps": 3})
    fine = make_run(project, environment, rubric, users["alice"], "fine", overrides={"max_steps": 3})
    an_hour_without_progress(run.pk)
    now = timezone.now()
    Run.objects.filter(pk=fine.pk).update(
        status=RunStatus.RUNNING, started_at=now, heartbeat_at=now, progress_at=now
    )
    return project, run, fine


def test_a_stalled_run_is_flagged_in_the_list_and_live_on_its_page(stalled_run, server, page):
    project, run, fine = stalled_run
    token = run.ingest_token()
    sign_in(page, server, "dave", PASSWORD)  # a viewer sees it as well

    page.goto(f"{server}/p/{project.slug}/runs/")
    flag = page.locator(f"tr[data-run-row='{run.pk}'] [data-run-stalled]")
    assert flag.is_visible() and flag.inner_text().startswith("stalled: no progress for 1")
    assert "hours" not in flag.inner_text()  # an hour, not two: the clock runs from the last progress
    assert page.locator(f"tr[data-run-row='{fine.pk}'] [data-run-stalled]").count() == 0

    page.goto(f"{server}/p/{project.slug}/runs/{run.pk}/")
    wait_until_following(page)
    flags = page.locator("[data-run-stalled]")
    assert flags.count() == 2  # next to the status and in the async-health panel
    assert all(flags.nth(i).is_visible() for i in range(2))
    assert "stalled: no progress for 1" in flags.first.inner_text()

    # Progress arrives (a metrics batch): the flag goes away without a reload.
    report(server, run, token, [{"type": "metrics", "step": 1, "values": {"reward/mean": 0.5}}])
    page.wait_for_function("Array.from(document.querySelectorAll('[data-run-stalled]')).every(b => b.hidden)")
    page.goto(f"{server}/p/{project.slug}/runs/")
    assert page.locator(f"tr[data-run-row='{run.pk}'] [data-run-stalled]").count() == 0

    # On a reloaded page with no flag, the run stalls again: the trainer's next heartbeat brings it back.
    page.goto(f"{server}/p/{project.slug}/runs/{run.pk}/")
    wait_until_following(page)
    assert all(flags.nth(i).is_hidden() for i in range(flags.count()))
    elsewhere(lambda: an_hour_without_progress(run.pk))
    time.sleep(1.1)  # a heartbeat news in a new second
    report(server, run, token, [{"type": "heartbeat"}], start=2)
    page.wait_for_function(
        "Array.from(document.querySelectorAll('[data-run-stalled]')).every(b => !b.hidden)"
    )
    assert flags.first.inner_text().startswith("stalled: no progress for 1")
    assert "since" in (flags.first.get_attribute("title") or "")

    # A run that finishes is no longer stalled: the status event hides the flag.
    report(server, run, token, [{"type": "status", "status": "SUCCEEDED"}], start=3)
    page.wait_for_function("Array.from(document.querySelectorAll('[data-run-stalled]')).every(b => b.hidden)")

"""The queue explained, live: a queued run's page shows its position, the run ahead and the workers of
its queue, and follows them as the run ahead starts, a worker comes online and a worker takes the run —
each time what a fresh load of the page renders. Real headless Chromium, daphne and the channel layer."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.browser.conftest import elsewhere
from tests.browser.test_run_page_truth import claim, queued_run, watch  # noqa: F401 (fixtures)

PANEL = """() => {
  const panel = document.querySelector('[data-run-queue]');
  if (!panel || panel.hidden) return null;
  const words = (node) => node.hidden ? null : node.textContent.replace(/\\s+/g, ' ').trim();
  return {
    position: words(panel.querySelector('[data-run-queue-position]')),
    warning: words(panel.querySelector('[data-run-queue-warning]')),
    ahead: words(panel.querySelector('[data-run-queue-ahead]')),
    links: Array.from(panel.querySelectorAll('[data-run-queue-ahead] a')).map((a) => a.getAttribute('href')),
    workers: words(panel.querySelector('[data-run-queue-workers]')),
  };
}"""


def reloaded_panel(watch) -> dict | None:  # noqa: F811
    """The panel as the server renders it: Alice's JavaScript-off tab loads the page anew."""
    page = watch.reloads[False]
    page.goto(watch.url)
    return page.evaluate(PANEL)


@pytest.fixture
def ahead(queued_run):  # noqa: F811
    from webapp.experiments.models import Run
    from webapp.experiments.services import run_create

    project, run, _token = queued_run
    first, _ = run_create(
        project=project,
        name="ahead <b>of it</b>",
        environment=run.environment_version.environment,
        rubric=run.rubric_version.rubric,
        preset="grpo",
        overrides={},
        user=run.created_by,
        dispatch=False,
    )
    Run.objects.filter(pk=first.pk).update(created_at=run.created_at - timedelta(minutes=1))
    return first


def test_the_queue_panel_follows_the_run_ahead_and_the_workers(ahead, queued_run, watch):  # noqa: F811
    from webapp.fleet.services import worker_report

    project, run, _token = queued_run
    page = watch.page
    shown = page.evaluate(PANEL)
    assert shown == reloaded_panel(watch)
    assert shown["position"] == "Position 2 on the cpu queue"
    assert shown["ahead"] == "Ahead: ahead <b>of it</b> (queued)."  # a name is text, never markup
    assert shown["links"] == [f"/p/{project.slug}/runs/{ahead.pk}/"]
    assert shown["warning"].startswith("No live worker serves the cpu queue")
    assert shown["workers"] == "No worker online serves this queue."

    claim(ahead, worker="cpu@box")
    watch.wait_for("document.querySelector('[data-run-queue-position]').textContent.includes('Position 1')")
    shown = page.evaluate(PANEL)
    assert shown["ahead"] == "Ahead: ahead <b>of it</b> (starting)." and shown == reloaded_panel(watch)

    elsewhere(
        lambda: worker_report(
            hostname="cpu@box",
            queues=["cpu"],
            gpus=[],
            cpus=2,
            ray_address="",
            pid=1,
            current_run_id=ahead.pk,
        )
    )
    watch.wait_for("document.querySelector('[data-run-queue-warning]').hidden")
    shown = page.evaluate(PANEL)
    assert shown["warning"] is None and shown["workers"] == "Served by cpu@box (busy)."
    assert shown == reloaded_panel(watch)

    claim(run, worker="cpu@box")
    watch.wait_for("document.querySelector('[data-run-queue]').hidden")
    assert reloaded_panel(watch) is None

"""The run page's live part in real Chromium against a real daphne server and channel layer: history
from metrics.json, then curves, feed, log and status that move when the trainer reports."""

from __future__ import annotations

import json

import pytest
import requests
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from tests.browser.conftest import elsewhere, sign_in, wait_until_following

PASSWORD = "correct-horse-battery"
HOSTILE = '<img src=x onerror="window.pwned=1">'


# Database rows are made in fixtures listed before `page`: once Playwright's event loop runs in this
# thread, Django keeps ORM connections per async context, and one opened then outlives the test
# (Postgres then refuses to drop the test database).
@pytest.fixture
def live_run(transactional_db):
    from webapp.experiments.services import environment_create, rubric_create, run_create
    from webapp.projects.models import Membership
    from webapp.projects.services import project_create

    User = get_user_model()
    alice = User.objects.create_user("alice", "alice@example.com", PASSWORD)
    dave = User.objects.create_user("dave", "dave@example.com", PASSWORD)
    project = project_create(name="Agents", owner=alice)
    Membership.objects.create(project=project, user=dave, role="viewer")
    environment = environment_create(
        project=project, name="arith", kind="arithmetic_calculator", config={}, user=alice
    )
    rubric = rubric_create(
        project=project,
        name="r",
        user=alice,
        spec={
            "aggregation": "weighted_sum",
            "criteria": [{"name": "correct", "kind": "numeric_match", "weight": 1.0, "params": {}}],
        },
    )
    run, token = run_create(
        project=project,
        name="live run",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={"max_steps": 10},
        user=alice,
        dispatch=False,
    )
    return project, run, token


def report(server, run, token, events):
    response = requests.post(
        f"{server}/api/runs/{run.pk}/events",
        data=json.dumps({"events": events}),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 200, response.text


def metrics(seq, step, reward):
    return {
        "seq": seq,
        "type": "metrics",
        "step": step,
        "time": 1_700_000_000 + step,
        "tokens": 500 * step,
        "values": {"reward/mean": reward, "reward/std": 0.1, "criterion/correct": reward, "kl": 0.001 * step},
    }


def group_event(seq, step):
    sample = {
        "group": 0,
        "task_id": "add-7",
        "split": "train",
        "components": [
            {"name": "correct", "kind": "numeric_match", "raw": 1.0, "weight": 1.0, "weighted": 1.0}
        ],
    }
    return {
        "seq": seq,
        "type": "trajectories",
        "step": step,
        "items": [
            {
                **sample,
                "sample": 0,
                "reward": 1.0,
                "turns": [{"role": "assistant", "text": "<answer>12</answer>"}],
            },
            {**sample, "sample": 1, "reward": 0.0, "turns": [{"role": "assistant", "text": HOSTILE}]},
        ],
    }


def points(page, chart, trace=0):
    return page.evaluate(f"document.getElementById('chart-{chart}').data[{trace}].x.length")


def test_the_run_page_loads_history_and_then_follows_the_run_live(live_run, server, page):
    project, run, token = live_run
    report(
        server,
        run,
        token,
        [
            {"seq": 1, "type": "status", "status": "STARTING"},
            {"seq": 2, "type": "status", "status": "RUNNING"},
            *[metrics(seq, seq - 2, 0.1 * seq) for seq in range(3, 8)],
            group_event(8, 5),
            {"seq": 9, "type": "log", "level": "info", "message": "step 5 <done>"},
        ],
    )
    sign_in(page, server, "dave", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/runs/{run.pk}/")
    wait_until_following(page)

    # History: five points per curve, the rollout feed and the log tail, all as text.
    assert points(page, "reward") == 5 and points(page, "criteria") == 5 and points(page, "kl") == 5
    feed = page.locator("[data-live-feed]")
    assert "add-7" in feed.inner_text() and HOSTILE in feed.inner_text()
    assert feed.locator("img").count() == 0 and page.evaluate("window.pwned") is None
    assert "step 5 <done>" in page.locator("[data-live-log]").inner_text()
    assert page.locator("[data-live-status]").inner_text() == "Running"
    assert page.locator("[data-live-step]").inner_text() == "step 5 of 10"

    # Live: the trainer reports two more steps, a log line and the end of the run.
    report(
        server,
        run,
        token,
        [
            metrics(10, 6, 0.9),
            metrics(11, 7, 0.95),
            group_event(12, 7),
            {"seq": 13, "type": "log", "level": "warning", "message": "almost there"},
        ],
    )
    page.wait_for_function("window.liveEventsReceived >= 4")
    page.wait_for_function("document.getElementById('chart-reward').data[0].x.length === 7")
    assert points(page, "criteria") == 7
    assert "almost there" in page.locator("[data-live-log]").inner_text()
    assert page.locator("[data-live-feed] > li").count() == 2
    assert page.locator("[data-live-step]").inner_text() == "step 7 of 10"
    assert page.locator("[data-live-best]").inner_text() == "0.9500"

    assert page.locator("[data-run-finished_at]").inner_text() == "—"
    report(server, run, token, [{"seq": 14, "type": "status", "status": "SUCCEEDED"}])
    page.wait_for_function("document.querySelector('[data-live-status]').textContent === 'Succeeded'")
    # The header rendered with the page learns when the run finished.
    page.wait_for_function("document.querySelector('[data-run-finished_at]').textContent !== '—'")
    run.refresh_from_db()
    finished = page.locator("[data-run-finished_at] time[data-when=seconds]")
    expect(finished).to_have_attribute("data-localized", "1")  # in the reader's zone (static/js/when.js)
    assert finished.evaluate("(t) => new Date(t.getAttribute('datetime')).getTime()") == pytest.approx(
        run.finished_at.timestamp() * 1000, abs=1
    )

    # Smoothing and another x-axis redraw from the same data.
    page.locator("[data-live-x]").select_option("tokens")
    page.wait_for_function("document.getElementById('chart-reward').data[0].x[6] === 3500")


def test_a_failure_while_the_page_is_open_shows_its_error_as_text(live_run, server, page):
    project, run, token = live_run
    report(server, run, token, [{"seq": 1, "type": "status", "status": "RUNNING"}])
    sign_in(page, server, "dave", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/runs/{run.pk}/")
    wait_until_following(page)
    assert page.locator("[data-run-error-panel]").is_hidden()
    report(
        server,
        run,
        token,
        [
            {
                "seq": 2,
                "type": "status",
                "status": "FAILED",
                "message": f"OOM in {HOSTILE}",
                "traceback": "Traceback (most recent call last): ...",
            }
        ],
    )
    page.wait_for_function("document.querySelector('[data-live-status]').textContent === 'Failed'")
    page.locator("[data-run-error-panel]").wait_for(state="visible")
    assert page.locator("[data-run-error]").inner_text() == f"OOM in {HOSTILE}"
    assert page.evaluate("window.pwned") is None


@pytest.fixture
def finished_run(live_run):
    from webapp.experiments.services import run_create

    project, active, _token = live_run
    return run_create(
        project=project,
        name="finished run",
        environment=active.environment_version.environment,
        rubric=active.rubric_version.rubric,
        preset="grpo",
        overrides={"max_steps": 10, "kl_coef": 0.1},
        user=active.created_by,
        dispatch=False,
    )


def test_compare_overlays_runs_and_follows_the_active_one(live_run, finished_run, server, page):
    project, active, token = live_run
    finished, finished_token = finished_run
    report(
        server,
        finished,
        finished_token,
        [
            {"seq": 1, "type": "status", "status": "STARTING"},
            {"seq": 2, "type": "status", "status": "RUNNING"},
            *[metrics(seq, seq, 0.05 * seq) for seq in range(3, 9)],
            {"seq": 9, "type": "status", "status": "SUCCEEDED"},
        ],
    )
    report(server, active, token, [{"seq": 1, "type": "status", "status": "STARTING"}, metrics(2, 1, 0.2)])

    sign_in(page, server, "dave", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/compare/?runs={active.pk},{finished.pk}")
    wait_until_following(page)
    assert page.evaluate("document.getElementById('compare-chart').data.map(t => t.x.length)") == [1, 6]
    assert "kl_coef" in page.locator("table.diff").inner_text()

    report(server, active, token, [metrics(3, 2, 0.4), metrics(4, 3, 0.5)])
    page.wait_for_function("document.getElementById('compare-chart').data[0].x.length === 3")
    page.locator("[data-compare-metric]").select_option("kl")
    page.wait_for_function("document.getElementById('compare-chart').layout.title.text === 'kl'")
    assert page.evaluate("document.getElementById('compare-chart').data.map(t => t.y.length)") == [3, 6]


def test_an_event_lost_on_the_way_is_fetched_again_by_a_reconnect(live_run, server, page, monkeypatch):
    """Redis pub/sub keeps nothing for a listener that was away: the page notices the gap in the
    sequence numbers and reconnects from its last event, and the replay brings the lost one."""
    from webapp.rollouts import ingest

    project, run, token = live_run
    report(
        server,
        run,
        token,
        [
            {"seq": 1, "type": "status", "status": "STARTING"},
            {"seq": 2, "type": "status", "status": "RUNNING"},
            metrics(3, 1, 0.1),
        ],
    )
    sign_in(page, server, "dave", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/runs/{run.pk}/")
    wait_until_following(page)

    # Step 2 is stored, but its broadcast never reaches the page (as during a Redis blip)…
    monkeypatch.setattr(ingest, "broadcast_on_commit", lambda run, events: None)
    elsewhere(lambda: ingest.ingest_batch(run=run, payload={"events": [metrics(4, 2, 0.2)]}))
    # …so when step 3 arrives, the page sees seq 5 after 3, reconnects, and the replay brings seq 4.
    report(server, run, token, [metrics(5, 3, 0.3)])
    page.wait_for_function("window.liveGapsResumed === 1")
    page.wait_for_function("document.getElementById('chart-reward').data[0].x.length === 3")
    assert page.evaluate("document.getElementById('chart-reward').data[0].x") == [1, 2, 3]
    assert page.locator("[data-live-step]").inner_text() == "step 3 of 10"

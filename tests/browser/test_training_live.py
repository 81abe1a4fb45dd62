"""End to end in real Chromium: a run trains on a real Celery worker, the run page's reward chart
gains points as it learns, a step's rollouts are in the feed before its update starts, and pressing
Cancel stops it — the status changes on the page. The page's plumbing is what is proved, not learning: the
run trains the tiny random Llama (`tiny_model_path`)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tests.browser.conftest import sign_in, wait_until_following
from tests.processes import celery_worker

pytestmark = pytest.mark.slow
PASSWORD = "a-long-browser-password"


@pytest.fixture
def training_setup(transactional_db):
    from webapp.experiments.services import environment_create, rubric_create
    from webapp.projects.services import project_create

    user = get_user_model().objects.create_user("rosa", "rosa@example.com", PASSWORD)
    project = project_create(name="Live agents", owner=user)
    environment = environment_create(
        project=project,
        name="tiny arithmetic",
        kind="arithmetic_calculator",
        config={"max_turns": 1},
        user=user,
    )
    rubric = rubric_create(
        project=project,
        name="partial credit",
        user=user,
        spec={
            "aggregation": "weighted_sum",
            "criteria": [
                {"name": "correct", "kind": "numeric_match", "weight": 1.0, "params": {}},
                {"name": "environment", "kind": "env_reward", "weight": 0.5, "params": {}},
            ],
        },
    )
    return user, project, environment, rubric


def chart_points(page) -> int:
    return page.evaluate("(document.getElementById('chart-reward').data[0] || {x: []}).x.length")


def test_watch_a_run_learn_and_cancel_it(training_setup, server, page, tiny_model_path):
    from webapp.experiments.services import run_create

    user, project, environment, rubric = training_setup
    steps = 2000  # the tiny model steps in a fraction of a second: far more than it can do before Cancel
    with celery_worker("cpu", name="browser", DASHBOARD_URL=server):
        run, _ = run_create(
            project=project,
            name="watched",
            environment=environment,
            rubric=rubric,
            preset="grpo",
            user=user,
            overrides={
                "model": tiny_model_path,
                "max_steps": steps,
                "group_size": 2,
                "prompts_per_step": 1,
                "max_new_tokens": 8,
                "eval_tasks": 0,
                "checkpoint_every": 0,
            },
        )
        sign_in(page, server, "rosa", PASSWORD)
        page.goto(f"{server}/p/{project.slug}/runs/{run.pk}/")
        wait_until_following(page)
        # Each time the phase line turns to "Updating · step N": is step N's group already in the feed?
        page.evaluate("""() => {
          window.feedBeforeUpdate = [];
          const phase = document.querySelector('[data-live-phase-text]');
          new MutationObserver(() => {
            const m = /^Updating · step (\\d+)/.exec(phase.textContent);
            if (!m) return;
            const feed = document.querySelector('[data-live-feed]').textContent;
            window.feedBeforeUpdate.push([Number(m[1]), feed.indexOf('step ' + m[1] + ' · train group') !== -1]);
          }).observe(phase, {childList: true, characterData: true, subtree: true});
        }""")

        page.wait_for_function(
            "(document.getElementById('chart-reward').data[0] || {x: []}).x.length >= 2", timeout=240_000
        )
        seen_updates = page.evaluate("window.feedBeforeUpdate")
        assert seen_updates and all(in_feed for _, in_feed in seen_updates), seen_updates
        seen = chart_points(page)
        page.wait_for_function(
            f"document.getElementById('chart-reward').data[0].x.length > {seen}", timeout=120_000
        )  # still growing, without a reload
        assert page.locator("[data-live-status]").inner_text() == "Running"

        page.click("[data-run-action=cancel] button")
        page.click("[data-cancel-dialog-confirm]")  # the page asks first
        page.wait_for_function(
            "(document.querySelector('[data-live-status]') || {}).textContent === 'Cancelled'",
            timeout=120_000,
        )
    run.refresh_from_db()
    assert run.status == "CANCELLED" and run.current_step < steps
    # In the stored event log too: step 1's trajectories came before its update began.
    from webapp.rollouts.models import RunEvent

    events = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", "summary"))
    first_rollouts = next(
        i for i, (kind, summary) in enumerate(events) if kind == "trajectories" and summary["step"] == 1
    )
    first_update = next(
        i
        for i, (kind, summary) in enumerate(events)
        if kind == "phase" and summary.get("phase") == "updating"
    )
    assert first_rollouts < first_update

"""The discussion panel on a trajectory page in real headless Chromium: it loads itself with htmx, a
comment posted with Ctrl+Enter appears in place and notifies the member it mentions, tags and flags
are added without leaving the page, and model output stays text."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tests.browser.conftest import sign_in
from tests.webapp.review_factories import make_trajectory
from webapp.experiments.services import environment_create, rubric_create, run_create
from webapp.projects.models import Membership
from webapp.projects.services import project_create
from webapp.review.models import Flag, Notification, TrajectoryTag

PASSWORD = "a-long-browser-password"
EVIL = '<img src=x onerror="window.pwned = 1">'


@pytest.fixture
def trajectory(transactional_db):
    User = get_user_model()
    owner = User.objects.create_user("olga", "olga@example.com", PASSWORD)
    annotator = User.objects.create_user("ana", "ana@example.com", PASSWORD)
    project = project_create(name="Discussions", owner=owner)
    Membership.objects.create(project=project, user=annotator, role="annotator")
    environment = environment_create(
        project=project, name="arith", kind="arithmetic_calculator", config={}, user=owner
    )
    rubric = rubric_create(
        project=project,
        name="r",
        spec={
            "aggregation": "weighted_sum",
            "criteria": [{"name": "correct", "kind": "numeric_match", "weight": 1.0, "params": {}}],
        },
        user=owner,
    )
    run, _ = run_create(
        project=project,
        name="r1",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=owner,
        dispatch=False,
    )
    return project, make_trajectory(run, answer=EVIL, prompt=EVIL)


def test_an_annotator_comments_tags_and_flags_in_place(trajectory, server, page):
    project, trajectory = trajectory
    sign_in(page, server, "ana", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/trajectories/{trajectory.pk}/")
    page.wait_for_selector("#comment-form")
    page.fill("#comment-form textarea[name=body]", f"@olga the reward ignores the format {EVIL}")
    page.select_option("#comment-form select[name=turn_index]", "2")
    page.focus("#comment-form textarea[name=body]")
    page.keyboard.press("Control+Enter")
    page.wait_for_selector(".comment-body:has-text('the reward ignores the format')")
    assert "on turn #2" in page.inner_text("#collaboration")
    assert Notification.objects.get().recipient.username == "olga"

    page.fill("#tag-form input[name=name]", "format bug")
    page.click("#tag-form button")
    page.wait_for_selector(".tag:has-text('format bug')")
    page.select_option("#flag-form select[name=reason]", "reward_wrong")
    page.click("#flag-form button")
    page.wait_for_selector(".badge.flag-open")
    assert (
        TrajectoryTag.objects.get().tag.name == "format bug" and Flag.objects.get().reason == "reward_wrong"
    )
    assert page.url.endswith(f"/trajectories/{trajectory.pk}/")  # never left the page
    assert page.evaluate("window.pwned") is None

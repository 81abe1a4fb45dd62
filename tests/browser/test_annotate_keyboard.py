"""An annotator works through a preference queue in real headless Chromium with the keyboard only:
1 / 2 / 3 / 0 choose, Enter submits (a required rationale gets the focus first), ← goes back to a
judged pair, and a reload resumes on the same pair in the same left/right order."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tests.browser.conftest import sign_in
from tests.webapp.review_factories import make_group
from webapp.experiments.services import environment_create, rubric_create, run_create
from webapp.projects.models import Membership
from webapp.projects.services import project_create
from webapp.review import services
from webapp.review.models import Judgement

PASSWORD = "a-long-browser-password"
EVIL = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 1">'


@pytest.fixture
def queue(transactional_db):
    User = get_user_model()
    owner = User.objects.create_user("olga", "olga@example.com", PASSWORD)
    annotator = User.objects.create_user("ana", "ana@example.com", PASSWORD)
    project = project_create(name="Preferences", owner=owner)
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
    for group in range(6):
        make_group(run, group=group, rewards=[1.0, 0.0], prompt=f"What is {group} + 2? {EVIL}")
    queue = services.queue_create(
        project=project,
        user=owner,
        name="sums",
        runs=[run],
        annotators=[annotator],
        rationale_required=True,
        instructions="Prefer the correct sum.",
        seed=1,
    )
    return project, queue, annotator


def current_pair(page) -> str:
    return page.get_attribute("#judgement-form", "action")


def test_an_annotator_judges_five_pairs_with_the_keyboard_only(queue, server, page):
    project, queue, annotator = queue
    sign_in(page, server, "ana", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/review/queues/{queue.pk}/annotate/")
    page.wait_for_function("window.annotateReady === true")
    assert "<script>" in page.inner_text("[data-prompt]")  # model text shown as text
    assert page.evaluate("window.pwned") is None

    # A reload resumes on the same pair, laid out the same way.
    first_action, first_left = current_pair(page), page.inner_text('[data-side="left"]')
    page.reload()
    page.wait_for_function("window.annotateReady === true")
    assert current_pair(page) == first_action and page.inner_text('[data-side="left"]') == first_left

    keys = ["1", "2", "3", "0", "1"]
    expected_sides = ["left", "right", "tie", "both_bad", "left"]
    for i, key in enumerate(keys):
        action = current_pair(page)
        page.keyboard.press("Enter")  # nothing chosen yet: a hint, no submit
        assert page.is_visible("[data-judgement-hint]") and current_pair(page) == action
        page.keyboard.press(key)
        page.keyboard.press("Enter")  # rationale required: the box gets the focus
        page.wait_for_function("document.activeElement && document.activeElement.name === 'rationale'")
        page.keyboard.type(f"reason {i} with digits 1 2 3")  # digits type text here, they do not choose
        assert page.is_checked(f'input[name=choice][value="{expected_sides[i]}"]')
        with page.expect_navigation():
            page.keyboard.press("Enter")
        page.wait_for_function("window.annotateReady === true")
        judgement = Judgement.objects.get(pair_id=int(action.rstrip("/").split("/")[-2]))
        assert services.side_of_choice(judgement.choice, left_is_a=judgement.left_is_a) == expected_sides[i]
        assert judgement.rationale == f"reason {i} with digits 1 2 3"

    assert Judgement.objects.filter(annotator=annotator).count() == 5
    assert "you judged 5" in page.inner_text("[data-progress]")

    # ← twice: back to the fourth judgement, shown as judged ("both bad"); → returns towards the open pair.
    page.keyboard.press("ArrowLeft")
    page.wait_for_url("**/pairs/*/")
    page.wait_for_function("window.annotateReady === true")
    assert page.is_checked('input[name=choice][value="left"]')
    page.keyboard.press("ArrowLeft")
    page.wait_for_url("**/pairs/*/")
    page.wait_for_function("window.annotateReady === true")
    assert page.is_checked('input[name=choice][value="both_bad"]')
    page.keyboard.press("ArrowRight")
    page.wait_for_function(
        "window.annotateReady === true && document.querySelector('input[value=left]').checked"
    )
    page.keyboard.press("ArrowRight")
    page.wait_for_url("**/annotate/")
    page.wait_for_function("window.annotateReady === true")
    assert not page.is_checked('input[name=choice][value="left"]')  # the sixth pair, still open
    assert page.evaluate("window.pwned") is None

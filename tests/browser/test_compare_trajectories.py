"""Many trajectories of one task side by side in real Chromium: a group's samples turn by turn, and one
evaluation task across the run's steps — aligned turns, what differs from the first column highlighted,
a missing turn shown as such, rows where all agree hidden on request, hostile text kept as text — and
one task across two runs, ticked in the explorer."""

from __future__ import annotations

import pytest

from tests.browser.conftest import sign_in
from tests.conftest import PASSWORD
from tests.webapp.factories import make_run, make_trajectory, turn

HOSTILE = '<img src=x onerror="window.pwned=1">'


@pytest.fixture
def samples(transactional_db, project, run):
    group = [
        make_trajectory(
            run,
            step=2,
            sample=i,
            reward=float(i),
            turns=[turn("user", "What is 6 × 7?"), turn("assistant", f"I think it is {answer}"), *extra],
        )
        for i, (answer, extra) in enumerate(
            [("42", [turn("user", "Sure?")]), ("41", [turn("user", "Sure?")]), (f"42 {HOSTILE}", [])]
        )
    ]
    for step in range(10):
        make_trajectory(
            run,
            step=step,
            task_id="eval-1",
            split="eval",
            turns=[turn("user", "q"), turn("assistant", f"step {step} answer")],
        )
    return project, run, group


def test_a_groups_samples_and_a_task_across_steps_turn_by_turn(samples, server, page):
    project, run, group = samples
    sign_in(page, server, "dave", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/runs/{run.pk}/groups/2/0/?split=train")
    page.click("[data-compare-all]")
    page.wait_for_selector("table.compare-turns")
    assert page.locator("thead [data-compare-column]").count() == 3
    assert page.locator("table.compare-turns tbody tr").count() == 3
    row1 = page.locator("tr[data-compare-row='1'] td.cell")
    assert row1.nth(1).locator("ins").all_inner_texts() == ["41"]  # what differs from the first column
    assert HOSTILE in row1.nth(2).inner_text() and page.evaluate("window.pwned") is None
    assert page.locator("tr[data-compare-row='2'] td.gap").count() == 1  # the third has no third turn
    assert page.locator("tr[data-compare-row='0']").is_visible()
    page.check("[data-changes-only]")
    assert page.locator("tr[data-compare-row='0']").is_hidden()  # every sample asked the same question
    assert page.locator("tr[data-compare-row='1']").is_visible()

    page.goto(f"{server}/p/{project.slug}/runs/{run.pk}/tasks/?split=eval")
    page.click("[data-compare-steps]")
    page.wait_for_selector("table.compare-turns")
    headers = [h.lower() for h in page.locator("thead [data-compare-column]").all_text_contents()]
    assert len(headers) == 8 and "step 0" in headers[0] and "step 9" in headers[-1]


@pytest.fixture
def one_task_in_two_runs(transactional_db, project, environment, rubric, users, run):
    """The task "eval-7" answered at steps 0 and 5 of one run and at step 3 of another run."""
    other = make_run(project, environment, rubric, users["alice"], "other run")
    made = [
        make_trajectory(
            owner,
            step=step,
            task_id="eval-7",
            split="eval",
            turns=[turn("user", "What is 3 + 4?"), turn("assistant", f"It is {answer}")],
        )
        for owner, step, answer in ((run, 0, "6"), (run, 5, "7"), (other, 3, f"7 {HOSTILE}"))
    ]
    return project, made


def test_ticked_trajectories_of_two_runs_side_by_side(one_task_in_two_runs, server, page):
    project, made = one_task_in_two_runs
    sign_in(page, server, "dave", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/trajectories/")
    button = page.locator("[data-compare-button]")
    assert button.is_disabled()
    page.check(f"tr[data-trajectory='{made[0].pk}'] [data-compare-pick]")
    assert button.is_disabled() and "tick one more" in page.inner_text("[data-compare-count]")
    for trajectory in made[1:]:
        page.check(f"tr[data-trajectory='{trajectory.pk}'] [data-compare-pick]")
    assert button.is_enabled() and "3 ticked." in page.inner_text("[data-compare-count]")
    button.click()
    page.wait_for_url("**/trajectories/compare/?id=**")
    page.wait_for_selector("table.compare-turns")
    headers = page.locator("thead [data-compare-column]").all_text_contents()
    assert len(headers) == 3 and any("other run" in h for h in headers)
    assert page.inner_text("[data-compare-task]") == "Task eval-7"
    # In the explorer's order (newest first): the other run's answer, then step 5's, then step 0's.
    answers = page.locator("tr[data-compare-row='1'] td.cell")
    assert HOSTILE in answers.nth(0).inner_text() and page.evaluate("window.pwned") is None
    assert "6" in answers.nth(2).locator("ins").all_inner_texts()  # what differs from the first column

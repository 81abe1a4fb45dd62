"""Many trajectories of one task side by side in real Chromium: a group's samples turn by turn, and one
evaluation task across the run's steps — aligned turns, what differs from the first column highlighted,
a missing turn shown as such, rows where all agree hidden on request, hostile text kept as text."""

from __future__ import annotations

import pytest

from tests.browser.conftest import sign_in
from tests.conftest import PASSWORD
from tests.webapp.factories import make_trajectory, turn

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

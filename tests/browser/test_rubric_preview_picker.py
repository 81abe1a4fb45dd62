"""The rubric preview's picker in real Chromium, under the Content-Security-Policy: typing words of an old
trajectory's task offers it (the options come from the server as one types), picking it previews its score;
and its trajectory page leads there with it already picked."""

from __future__ import annotations

import pytest

from tests.browser.conftest import sign_in
from tests.conftest import PASSWORD
from tests.webapp.factories import make_trajectory, turn

OLD_TASK = "Which planet is the largest?"


@pytest.fixture
def many_trajectories(transactional_db, project, run):
    oldest = make_trajectory(
        run,
        step=0,
        task_id="3e7a91c0",
        prompt=OLD_TASK,
        answer="Jupiter",
        turns=[turn("user", OLD_TASK), turn("assistant", "<answer>Jupiter</answer>")],
    )
    for step in range(1, 46):
        make_trajectory(
            run, step=step, prompt=f"What is {step} + 1?", turns=[turn("assistant", str(step + 1))]
        )
    return project, run, oldest


def test_an_old_trajectory_is_found_by_its_task_and_previewed(many_trajectories, server, enforced_page):
    project, run, oldest = many_trajectories
    page = enforced_page
    sign_in(page, server, "bob", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/trajectories/{oldest.pk}/")
    page.click("[data-preview-rubric]")
    page.wait_for_url("**/edit/?preview=*")
    picker = page.locator("input[name=preview-trajectory]")
    assert picker.input_value().startswith(f"#{oldest.pk} · {OLD_TASK}")

    # Not among the 40 newest the page lists first: typing its task finds it.
    options = page.locator("#preview-trajectory-options option")
    assert f"#{oldest.pk} ·" not in " ".join(o.get_attribute("value") for o in options.all())
    picker.fill("")
    picker.press_sequentially("largest planet"[:7])  # "largest"
    page.wait_for_function(
        "id => Array.from(document.querySelectorAll('#preview-trajectory-options option'))"
        ".some(o => o.value.startsWith('#' + id + ' · '))",
        arg=oldest.pk,
    )
    label = options.first.get_attribute("value")
    assert label.startswith(f"#{oldest.pk} · {OLD_TASK} · {run.name}")
    picker.fill(label)  # what choosing the suggestion writes
    page.click("text=Preview score")
    page.wait_for_selector("[data-preview-total]")
    assert page.inner_text("[data-preview-answer]") == "Jupiter"

"""Between two checkpoints, the evaluation tasks that flipped — right → wrong and wrong → right — listed in
real Chromium with links to their diffs; another pair of steps or pass mark recomputes the lists."""

from __future__ import annotations

import pytest

from tests.browser.conftest import sign_in
from tests.conftest import PASSWORD
from tests.webapp.factories import make_trajectory, turn
from webapp.experiments.models import Checkpoint

HOSTILE_TASK = "<img src=x onerror=window.pwned=1>"
# task → reward at steps 0, 5, 10
REWARDS = {
    "add-1": (0.0, 1.0, 1.0),
    "add-2": (1.0, 1.0, 0.0),
    HOSTILE_TASK: (0.0, 0.0, 1.0),
    "add-4": (1.0, 0.4, 1.0),
}


@pytest.fixture
def evaluated_run(transactional_db, project, run):
    for step in (5, 10):
        Checkpoint.objects.create(run=run, step=step, path=f"/ckpt/{step}")
    for group, (task, rewards) in enumerate(REWARDS.items()):
        for step, reward in zip((0, 5, 10), rewards, strict=True):
            make_trajectory(
                run,
                step=step,
                group=group,
                task_id=task,
                split="eval",
                reward=reward,
                turns=[turn("user", f"{task}?"), turn("assistant", f"{task} at step {step}: {reward}")],
            )
    return project, run


def test_flipped_tasks_between_checkpoints_link_to_their_diffs(evaluated_run, server, page):
    project, run = evaluated_run
    sign_in(page, server, "dave", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/runs/{run.pk}/")
    page.click("[data-task-flips]")
    # The last two checkpoints by default.
    assert "between step 5 and step 10" in page.inner_text("h1")
    broke = page.locator("[data-flips=broke] [data-flip-task]")
    fixed = page.locator("[data-flips=fixed] [data-flip-task]")
    assert [r.get_attribute("data-flip-task") for r in broke.all()] == ["add-2"]
    assert sorted(r.get_attribute("data-flip-task") for r in fixed.all()) == sorted([HOSTILE_TASK, "add-4"])
    assert page.evaluate("window.pwned") is None and page.locator("main img, .content img").count() == 0

    page.select_option("select[name=a]", "0")
    page.fill("input[name=pass]", "0.3")
    page.click("[data-flips-form] button[type=submit]")
    page.wait_for_url("**a=0**")
    assert [
        r.get_attribute("data-flip-task") for r in page.locator("[data-flips=broke] [data-flip-task]").all()
    ] == ["add-2"]
    assert sorted(
        r.get_attribute("data-flip-task") for r in page.locator("[data-flips=fixed] [data-flip-task]").all()
    ) == sorted(["add-1", HOSTILE_TASK])

    page.locator("[data-flips=broke] [data-flip-diff]").first.click()
    page.wait_for_url("**/diff/**")
    text = page.inner_text("body")
    assert "add-2 at step 0: 1.0" in text and "add-2 at step 10: 0.0" in text

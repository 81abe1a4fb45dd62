"""Judging turns from the keyboard in real headless Chromium against a real daphne server: carol steps to
the model's second turn with j, marks it with w, and the page comes back with the judged per-turn
rewards beside the turns; k steps back. No console errors on the way (the page's CSP is enforced)."""

from __future__ import annotations

import pytest

from tests.browser.conftest import sign_in
from tests.conftest import PASSWORD
from tests.webapp.factories import make_trajectory, turn


@pytest.fixture
def episode(transactional_db, project, run):
    """The test story's run (tests/conftest.py, carol annotates) with one episode whose answer broke."""
    trajectory = make_trajectory(
        run,
        turns=[
            turn("system", "You add numbers."),
            turn("user", "What is 12 + 30?"),
            turn("assistant", '<tool_call>{"name": "calculator"}</tool_call>', tool_name="calculator"),
            turn("tool", "", tool_name="calculator", tool_result="42"),
            turn("assistant", "<answer>TOOL_NAME</answer>"),
        ],
    )
    return project, trajectory


def test_carol_marks_the_turn_that_went_wrong_with_the_keyboard(episode, server, enforced_page):
    page = enforced_page
    project, trajectory = episode
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, server, "carol", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/trajectories/{trajectory.pk}/")
    page.wait_for_selector("#turn-4 [data-mark-turn]")
    assert page.locator("[data-judged-reward]").count() == 0

    page.keyboard.press("j")
    page.keyboard.press("j")
    assert page.evaluate("document.activeElement.id") == "turn-4"
    page.keyboard.press("w")
    page.wait_for_selector("#turn-4 [data-judged-reward]")
    rewards = page.eval_on_selector_all("[data-judged-reward]", "els => els.map(e => e.dataset.judgedReward)")
    assert rewards == ["1.0", "-1.0"]  # the call was fine, the answer is where it went wrong
    assert "your mark: went wrong here" in page.locator("#turn-4").inner_text()
    assert page.url.endswith("#turn-4")

    page.keyboard.press("k")
    assert page.evaluate("document.activeElement.id") == "turn-2"
    assert errors == []

"""The trajectory explorer in real headless Chromium: filters swap the results in place (htmx) and the
address bar follows; a saved view comes back; hostile trajectory text stays text."""

from __future__ import annotations

import pytest

from tests.browser.conftest import sign_in
from tests.conftest import PASSWORD
from tests.webapp.review.test_explorer import STORY, ingest

HOSTILE = '<img src=x onerror="window.pwned = 1"> <script>window.pwned = 2</script> pwned'


@pytest.fixture
def explored(transactional_db, project, run):
    """The test story's project (tests/conftest.py) with its run's trajectories, one of them hostile."""
    ingest(run, [*STORY, (3, 0, 0, 0.1, "ok", HOSTILE)])
    return project


def rows(page) -> int:
    return page.locator("#explorer-results tr[data-trajectory]").count()


def test_filtering_searching_and_a_saved_view(explored, server, page):
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    sign_in(page, server, "alice", PASSWORD)
    page.goto(f"{server}/p/{explored.slug}/trajectories/")
    assert rows(page) == 7

    # Text search: Enter submits, htmx swaps the results only, the address bar follows.
    page.fill("#id_q", "calculator")
    page.press("#id_q", "Enter")
    page.wait_for_url("**/trajectories/?q=calculator")
    page.wait_for_function("document.querySelectorAll('#explorer-results tr[data-trajectory]').length === 2")
    assert page.locator("#explorer-results mark").first.inner_text().lower().startswith("calculator")
    assert page.locator("#explorer-form").count() == 1  # the form was not replaced

    # A checkbox is a change: status error and the text together find nothing; without the text, one.
    page.check("input[name=status][value=error]")
    page.wait_for_url("**status=error**")
    page.wait_for_selector("text=No trajectories match")
    page.fill("#id_q", "")
    page.press("#id_q", "Enter")
    page.wait_for_function("document.querySelectorAll('#explorer-results tr[data-trajectory]').length === 1")
    assert "Error" in page.inner_text("#explorer-results tr[data-trajectory]")

    # Save the filters, go elsewhere, come back through the view.
    page.wait_for_load_state("networkidle")
    page.fill("input[name=name]", "Failures")
    page.click("button:has-text('Save view')")
    page.wait_for_selector(".saved-views a:has-text('Failures')")
    page.goto(f"{server}/p/{explored.slug}/trajectories/")
    assert rows(page) == 7
    page.click(".saved-views a:has-text('Failures')")
    page.wait_for_url("**status=error**")
    assert rows(page) == 1 and page.is_checked("input[name=status][value=error]")
    # Enter in the text box (a change and a submit at once) queues the second request: nothing aborted,
    # nothing in the console.
    assert errors == []


def test_hostile_trajectory_text_stays_text(explored, server, page):
    sign_in(page, server, "alice", PASSWORD)
    page.goto(f"{server}/p/{explored.slug}/trajectories/?q=pwned")
    assert rows(page) == 1
    assert page.evaluate("window.pwned") is None
    assert page.locator("#explorer-results img, #explorer-results script").count() == 0
    assert "<script>window.pwned = 2</script>" in page.inner_text("#explorer-results")  # shown as text

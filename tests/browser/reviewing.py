"""Reviewing together in real Chromium: helpers other browser tests compose (the three-users test of
adjudication uses them). Each member gets a browser context of their own, in their own time zone, under
the Content-Security-Policy as a user's browser is (so the helpers wait on the page's DOM, never on an
evaluated predicate), and every page they open follows ws/review/ (`<html data-review-live="ready">` once
the server has joined its groups).

    alice = member_page(browser, server, "alice", "Europe/Berlin")
    open_trajectory(alice, server, project, trajectory)
    post_comment(carol, "@alice look", turn=2)
    thread = thread_of(alice, "look")            # arrives without a reload
    reply(alice, thread, "agreed")
    expect_unread(carol, 1)
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import new_page, sign_in
from tests.conftest import PASSWORD
from tests.webapp.review_factories import make_trajectory

SOCKET_READY = "html[data-review-live=ready]"
ZONES = {"alice": "Europe/Berlin", "bob": "Asia/Tokyo", "carol": "America/New_York"}


@pytest.fixture
def discussed_trajectory(run):
    """A trajectory of the story's run (alice owns the project, bob researches, carol annotates), with
    turns #0 system, #1 user, #2 the model's answer."""
    return make_trajectory(run, answer="5", prompt="What is 2 + 2?")


def member_page(browser, server: str, username: str, zone: str | None = None, *, bypass_csp: bool = False):
    """A signed-in page of `username` in a browser context of its own, in `zone` (ZONES by default). The
    context closes with the test (the `browser` fixture closes the contexts a test opened)."""
    context = browser.new_context(
        viewport={"width": 1360, "height": 900},
        bypass_csp=bypass_csp,
        timezone_id=zone or ZONES.get(username, "UTC"),
        locale="en-GB",
    )
    page = new_page(context)
    sign_in(page, server, username, PASSWORD)
    return page


def wait_until_live(page) -> None:
    page.wait_for_selector(SOCKET_READY, state="attached")


def open_trajectory(page, server: str, project, trajectory) -> None:
    """Open the trajectory page and wait until its discussion follows the trajectory live. Sets
    window.notReloaded, which a reload would clear (tests assert that news came without one)."""
    page.goto(f"{server}/p/{project.slug}/trajectories/{trajectory.pk}/")
    page.wait_for_selector("#collaboration [data-discussion]")
    wait_until_live(page)
    page.evaluate("window.notReloaded = true")


def assert_not_reloaded(page) -> None:
    assert page.evaluate("window.notReloaded") is True


def post_comment(page, body: str, *, turn: int | None = None) -> None:
    """Write `body` in the discussion's comment box (on `turn`), post it with Ctrl+Enter, and wait
    until the author's own page shows it."""
    box = page.locator("#comment-form textarea[name=body]")
    box.fill(body)
    if turn is not None:
        page.select_option("#comment-form select[name=turn_index]", str(turn))
    box.focus()
    page.keyboard.press("Control+Enter")
    expect(page.locator("#collaboration .comment-body", has_text=body)).to_be_visible()


def thread_of(page, text: str, *, timeout_s: float = 10):
    """The discussion's thread whose first comment contains `text`, once it is on the page."""
    thread = page.locator("#collaboration li.thread", has=page.locator(".comment-body", has_text=text)).first
    expect(thread).to_be_visible(timeout=timeout_s * 1000)
    return thread


def reply(page, thread, body: str) -> None:
    thread.locator("details[data-reply] > summary").click()
    box = thread.locator("form[data-reply-form] textarea[name=body]")
    box.fill(body)
    box.focus()
    page.keyboard.press("Control+Enter")
    expect(page.locator("#collaboration .replies .comment-body", has_text=body)).to_be_visible()


def resolve(page, thread) -> None:
    thread.locator("button[data-resolve]").click()
    expect(thread_by_id(page, thread.get_attribute("data-thread"))).to_have_attribute("data-resolved", "")


def thread_by_id(page, thread_id: str | int):
    return page.locator(f"#collaboration li.thread[data-thread='{thread_id}']")


def expect_unread(page, count: int, *, timeout_s: float = 10) -> None:
    """The header's badge says `count` unread notifications."""
    expect(page.locator(".notifications-link")).to_have_attribute(
        "data-unread", str(count), timeout=timeout_s * 1000
    )

"""Real headless Chromium (Debian's package) driven by Playwright, against a real daphne server."""

from __future__ import annotations

import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

from tests.processes import Shared, asgi_server

# Playwright's sync API runs an event loop in this thread; the test's own ORM calls are still
# synchronous and safe, so tell Django not to refuse them.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/browser/" in str(item.fspath):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def chromium_path():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("Debian's chromium is not installed (make test installs it when run as root)")
    return path


# How long a page may take to load, or a condition to come true, before a test fails: on a 2-core CI
# machine with the heavy lane training beside the browser lane, a run page's load (Chromium compiling
# plotly on a few per cent of a core) has taken over 20 s.
PAGE_TIMEOUT_MS = 45_000


def new_page(context):
    """A new page of `context` that waits up to PAGE_TIMEOUT_MS for a load or a condition."""
    page = context.new_page()
    page.set_default_timeout(PAGE_TIMEOUT_MS)
    return page


# One daphne server and one Chromium serve a stretch of consecutive tests (tests.processes.Shared): each
# start cost seconds in every browser test. The server holds no state of its own between tests (the data
# is in the test database, which transactional_db empties after each test; sessions and the channel
# layer are in the database and Redis, as with a fresh server); each test gets a fresh browser context.


@pytest.fixture(scope="session")
def _shared_server(django_db_setup, django_db_blocker):
    """Stopped before the test database is dropped (it depends on django_db_setup)."""
    shared = Shared("server", asgi_server)
    yield shared
    shared.close()


@pytest.fixture
def server(transactional_db, _shared_server):
    return _shared_server.get()


@contextmanager
def _chromium(chromium_path: str):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def _shared_chromium(chromium_path):
    shared = Shared("browser", lambda: _chromium(chromium_path))
    yield shared
    shared.close()


@pytest.fixture
def browser(_shared_chromium):
    """The shared Chromium; the contexts a test opens in it are closed when the test ends."""
    browser = _shared_chromium.get()
    before = set(browser.contexts)
    yield browser
    for context in browser.contexts:
        if context not in before:
            context.close()


@pytest.fixture
def page(browser):
    """A page that ignores the Content-Security-Policy: Playwright's wait_for_function evaluates its
    predicate with eval, which the policy refuses — and what these tests check about hostile text
    (that it stays text) must hold without the policy anyway. test_content_security_policy.py drives
    the pages under the policy, with `enforced_page`."""
    from django.db import connections

    context = browser.new_context(viewport={"width": 1360, "height": 900}, bypass_csp=True)
    page = new_page(context)
    yield page
    context.close()
    # While Playwright's loop runs, Django keeps the ORM connections the test opened in a separate
    # (async-context) slot that the test-database teardown never closes; on Postgres the leftover
    # connection would stop the test database from being dropped.
    connections.close_all()


@pytest.fixture
def enforced_page(browser):
    """A page that obeys the Content-Security-Policy, as a user's browser does."""
    from django.db import connections

    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = new_page(context)
    yield page
    context.close()
    connections.close_all()


def sign_in(page, server: str, username: str, password: str) -> None:
    page.goto(f"{server}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login" not in url)


# The page follows a run once the server has sent its snapshot. The socket's `open` comes earlier: the
# server accepts first (so a refusal can carry its close code), then joins the run's group; an event
# broadcast in between never reaches the page (its replay covers what was stored by then, not what is
# broadcast after), so a test that reports right after `open` races the join on a loaded machine.
FOLLOWING_RUN = "window.liveSnapshotsReceived >= 1"


def wait_until_following(page) -> None:
    """Until the open page's live socket has joined its run (the snapshot arrived)."""
    page.wait_for_function(FOLLOWING_RUN)


def scroll_until(page, selector: str, *, step_px: int = 100_000, timeout_s: float = 60) -> None:
    """Scroll down, as a reader does, until `selector` is in the page. Each scroll reveals the pending row
    and htmx fetches one more window; a budget of time, not of scrolls, so a loaded machine's slower
    windows still get there."""
    deadline = time.monotonic() + timeout_s
    while not page.locator(selector).count():
        if time.monotonic() > deadline:
            raise AssertionError(f"{selector} not in the page after {timeout_s:.0f} s of scrolling")
        page.mouse.wheel(0, step_px)
        page.wait_for_timeout(150)


def elsewhere(work):
    """Run `work` (ORM writes that broadcast after their commit) on a thread of its own, as a worker
    process would: Playwright's event loop owns the test's thread, and the broadcast may not run in it."""
    from django.db import connection

    def job():
        try:
            return work()
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(job).result(timeout=30)

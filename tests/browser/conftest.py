"""Real headless Chromium (Debian's package) driven by Playwright, against a real daphne server."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.processes import asgi_server

# Playwright's sync API runs an event loop in this thread; the test's own ORM calls are still
# synchronous and safe, so tell Django not to refuse them.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]


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


@pytest.fixture
def server(transactional_db):
    with asgi_server() as url:
        yield url


@pytest.fixture
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    from django.db import connections

    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()
    # While Playwright's loop runs, Django keeps the ORM connections the test opened in a separate
    # (async-context) slot that the test-database teardown never closes; on Postgres the leftover
    # connection would stop the test database from being dropped.
    connections.close_all()


def sign_in(page, server: str, username: str, password: str) -> None:
    page.goto(f"{server}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/accounts/login" not in url)

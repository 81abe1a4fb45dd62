"""Reading a trajectory too long to load whole, in real Chromium: a search finds a turn far down and opens
the page there (?from=N) with a link to the turns before; while scrolling, the list keeps a bounded number of
turns in the page, letting the earliest go behind a "Turns before #N" link; hostile snippets stay text.
(bench/huge_trajectory.py measures the same reads on 10,000 turns on Postgres.)"""

from __future__ import annotations

import pytest

from tests.browser.conftest import scroll_until, sign_in
from tests.conftest import PASSWORD
from tests.webapp.factories import long_turns, make_trajectory

HOSTILE = '<img src=x onerror="window.pwned=1">'


@pytest.fixture
def long_trajectory(transactional_db, project, run):
    turns = long_turns(300)
    turns[250]["text"] += f" the zanzibar clue {HOSTILE}"
    return project, make_trajectory(run, turns=turns, reward=1.0)


def test_search_opens_the_page_at_a_far_turn_and_the_list_stays_bounded(long_trajectory, server, page):
    project, trajectory = long_trajectory
    sign_in(page, server, "dave", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/trajectories/{trajectory.pk}/")

    page.fill("[data-turn-search-input]", "Zanzibar")
    page.click("[data-turn-search] button[type=submit]")
    hit = page.locator("[data-turn-search-hit='250']")
    hit.wait_for()
    assert page.locator("[data-turn-search-hit]").count() == 1
    assert '<img src=x onerror="window.pwned' in page.inner_text("[data-turn-search-results]")  # as text
    assert page.evaluate("window.pwned") is None
    assert "1 turn match" in page.inner_text("[data-turn-search-note]")
    hit.click()
    page.wait_for_url("**?from=250#turn-250")
    first = page.eval_on_selector("ol[data-turns] > li.turn", "li => li.dataset.turn")
    assert first == "250"
    assert "Turns before #250" in page.inner_text("[data-turns-earlier]")
    page.click("[data-turns-earlier-link]")
    page.wait_for_url("**?from=190#turn-249")
    assert page.eval_on_selector("ol[data-turns] > li.turn", "li => li.dataset.turn") == "190"

    # From the top, with a small bound: scrolling loads windows and the earliest turns leave the page.
    page.goto(f"{server}/p/{project.slug}/trajectories/{trajectory.pk}/")
    page.evaluate("document.querySelector('[data-turns]').dataset.maxTurns = '80'")
    scroll_until(page, "#turn-299")
    # The last window is in the page as soon as it is swapped in; the earliest turns go when it settles.
    page.wait_for_function("document.querySelectorAll('ol[data-turns] > li.turn').length <= 80")
    count = page.locator("ol[data-turns] > li.turn").count()
    assert count <= 80
    first_loaded = int(page.eval_on_selector("ol[data-turns] > li.turn", "li => li.dataset.turn"))
    assert first_loaded == 300 - count
    assert f"Turns before #{first_loaded}" in page.inner_text("[data-turns-earlier]")

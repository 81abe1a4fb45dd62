"""Reading a long trajectory in real headless Chromium against a real daphne server: the page opens
with its first turns, scrolling fetches the rest window by window, a link to a turn far down loads up
to it, and hostile model output stays text. Then the diff of two trajectories side by side."""

from __future__ import annotations

import pytest

from tests.browser.conftest import scroll_until, sign_in
from tests.conftest import PASSWORD
from tests.webapp.factories import long_turns, make_trajectory, turn
from webapp.rollouts.views_trajectories import FIRST_TURNS

HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=1</script>'


@pytest.fixture
def long_run(transactional_db, project, run):
    """The test story's run (tests/conftest.py) with one 300-turn trajectory, read by dave (a viewer)."""
    turns = long_turns(300)
    turns[1]["text"] = HOSTILE
    turns[299]["text"] = f"the very last turn {HOSTILE}"
    trajectory = make_trajectory(run, turns=turns, reward=1.0)
    return project, run, trajectory


def turn_count(page) -> int:
    return page.locator("ol[data-turns] > li.turn").count()


def test_scrolling_a_300_turn_trajectory_loads_the_rest(long_run, server, page):
    project, _run, trajectory = long_run
    sign_in(page, server, "dave", PASSWORD)

    page.goto(f"{server}/p/{project.slug}/trajectories/{trajectory.pk}/")
    page.wait_for_selector(f"#turn-{FIRST_TURNS - 1}")
    assert turn_count(page) < 300

    scroll_until(page, "#turn-299", step_px=200_000)
    assert turn_count(page) == 300
    assert page.locator("[data-turns-more]").count() == 0
    indices = page.eval_on_selector_all(
        "ol[data-turns] > li.turn", "items => items.map(li => Number(li.dataset.turn))"
    )
    assert indices == list(range(300))

    # The hostile turns are text: no image, no script ran.
    assert HOSTILE in page.inner_text("#turn-1")
    assert HOSTILE in page.inner_text("#turn-299")
    assert page.evaluate("window.pwned") is None
    assert page.locator("ol[data-turns] img").count() == 0


def test_a_link_to_a_turn_not_loaded_yet_loads_up_to_it(long_run, server, page):
    project, _run, trajectory = long_run
    sign_in(page, server, "dave", PASSWORD)

    page.goto(f"{server}/p/{project.slug}/trajectories/{trajectory.pk}/#turn-250")

    page.wait_for_selector("#turn-250")
    page.wait_for_function(
        "() => { const r = document.getElementById('turn-250').getBoundingClientRect();"
        " return r.top < window.innerHeight && r.bottom > 0; }"
    )


def test_load_all_turns_then_diff_best_against_worst(long_run, server, page):
    project, run, trajectory = long_run
    worse = make_trajectory(
        run, sample=1, reward=0.0, turns=[turn("user", "turn 0: w0"), turn("assistant", HOSTILE)]
    )
    sign_in(page, server, "dave", PASSWORD)

    page.goto(f"{server}/p/{project.slug}/trajectories/{trajectory.pk}/")
    page.click("[data-load-all-turns]")
    page.wait_for_selector("#turn-299", state="attached")
    assert turn_count(page) == 300

    page.goto(f"{server}/p/{project.slug}/runs/{run.pk}/groups/0/0/?split=train")
    page.click("text=Diff best vs worst")
    page.wait_for_url(f"**/diff/?a={trajectory.pk}&b={worse.pk}")
    assert page.locator(".diff-row-left").count() == page.locator(".diff-row-right").count() >= 300
    page.check("[data-changes-only]")
    assert (
        page.locator(".diff-row-left.same").first.is_hidden()
        or page.locator(".diff-row-left.same").count() == 0
    )
    assert page.evaluate("window.pwned") is None

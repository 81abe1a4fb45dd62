"""Comparing many runs, in real Chromium against a real daphne: four runs ticked in the runs list open one
chart with a curve per run (its name, its points) and the config differences listing exactly the knobs
that differ, each run's value under its name; names that look like HTML stay text. Picking more runs
than the chart overlays says so instead of cutting the list silently."""

from __future__ import annotations

import pytest

from tests.browser.conftest import sign_in
from tests.browser.test_run_page_charts import HOSTILE_NAME, chart, report
from tests.conftest import PASSWORD
from tests.webapp.factories import make_run

# name, knobs: every run its own learning rate, one of them a longer completion budget.
SWEEP = [
    ("lr 1e-6", {"learning_rate": 1e-6}),
    ("lr 3e-6", {"learning_rate": 3e-6}),
    (HOSTILE_NAME, {"learning_rate": 1e-5}),
    ("lr 3e-5 long", {"learning_rate": 3e-5, "max_new_tokens": 96}),
]


@pytest.fixture
def sweep(transactional_db, project, environment, rubric, users, server):
    """A learning-rate sweep of four runs in the test story's project, each with two steps of reward
    (run i: 0.1·(i+1)·step), and six more runs with nothing reported: ten in all."""
    runs = [
        make_run(project, environment, rubric, users["alice"], name, overrides={"max_steps": 3, **knobs})
        for name, knobs in SWEEP
    ]
    for index, run in enumerate(runs):
        report(
            server,
            run,
            run.ingest_token(),
            [
                {"type": "metrics", "step": step, "values": {"reward/mean": 0.1 * (index + 1) * step}}
                for step in (1, 2)
            ],
        )
    others = [
        make_run(project, environment, rubric, users["alice"], f"other {n}", overrides={"max_steps": 3})
        for n in range(6)
    ]
    return project, runs, others


def test_four_runs_overlaid_with_the_knobs_that_differ(sweep, server, page):
    project, runs, _others = sweep
    sign_in(page, server, "dave", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/runs/")
    for run in runs:
        page.check(f"input[data-compare-pick][value='{run.pk}']")
    assert "4 runs ticked." in page.inner_text("[data-compare-count]")
    page.click("[data-compare-button]")
    page.wait_for_url("**/compare/**")
    page.wait_for_function(
        "(document.getElementById('compare-chart').data || []).filter(t => t.y.length === 2).length === 4"
    )

    # One curve per run (in the list's order: newest first), named by the run, with that run's points.
    shown = runs[::-1]
    # (Trace names are escaped for Plotly, which renders them as markup: the legend shows the text.)
    traces = chart(page, "#compare-chart", "div.data.map(t => Array.from(t.y))")
    for run, y in zip(shown, traces, strict=True):
        index = runs.index(run)
        assert y == pytest.approx([0.1 * (index + 1), 0.2 * (index + 1)])
    legend = chart(
        page, "#compare-chart", "Array.from(div.querySelectorAll('.legendtext')).map(t => t.textContent)"
    )
    assert legend == [f"{run.name} (#{run.pk})" for run in shown]
    assert page.locator("[data-compare-too-many]").count() == 0

    # The knobs that differ, exactly, with each run's value under its name (the names as text).
    table = page.locator("table.diff")
    headers = table.locator("thead th").all_text_contents()
    assert headers == ["Knob", *[run.name for run in shown]]
    rows = {
        cells[0]: cells[1:]
        for cells in (row.locator("td").all_inner_texts() for row in table.locator("tbody tr").all())
    }
    assert rows == {
        "learning_rate": ["3e-05", "1e-05", "3e-06", "1e-06"],
        "max_new_tokens": ["96", "128", "128", "128"],
    }, rows
    assert page.locator("a[href^='https://example.com'], b:text('bold')").count() == 0


def test_more_runs_than_the_chart_overlays_says_so(sweep, server, page):
    project, runs, others = sweep
    picked = [*runs, *others]
    sign_in(page, server, "dave", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/compare/?runs={','.join(str(run.pk) for run in picked)}")
    message = page.locator("[data-compare-too-many]")
    assert message.inner_text() == (
        "You picked 10 runs; the chart overlays at most 8. Showing the first 8: 2 runs left out. "
        "Untick some below to compare others."
    )
    page.wait_for_function("(document.getElementById('compare-chart').data || []).length === 8")
    shown = page.locator("table.diff thead th").all_text_contents()[1:]
    assert shown == [run.name for run in picked[:8]]
    # The picker holds what is shown: submitting it again compares those eight, without the message.
    page.click("form.panel button[type=submit]")
    page.wait_for_url("**/compare/?run=**")
    page.wait_for_function("(document.getElementById('compare-chart').data || []).length === 8")
    assert page.locator("[data-compare-too-many]").count() == 0


def test_a_click_on_a_runs_point_opens_that_runs_groups_at_that_step(sweep, server, page):
    project, runs, _others = sweep
    sign_in(page, server, "dave", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/compare/?runs={','.join(str(run.pk) for run in runs)}")
    page.wait_for_function(
        "(document.getElementById('compare-chart').data || []).filter(t => t.y.length === 2).length === 4"
    )
    # The mouse on the second run's point at step 2 (curves in the link's order; at step 2 they are
    # 0.2, 0.4, 0.6, 0.8 apart): under the "x unified" hover every curve's point at step 2 is clicked
    # with it, and the one under the cursor decides the run.
    target = runs[1]
    x, y = chart(
        page,
        "#compare-chart",
        """(() => {
            const xa = div._fullLayout.xaxis, ya = div._fullLayout.yaxis, trace = div.data[1];
            const i = Array.from(trace.x).indexOf(2), box = div.getBoundingClientRect();
            return [box.left + xa._offset + xa.l2p(2), box.top + ya._offset + ya.l2p(trace.y[i])];
        })()""",
    )
    page.mouse.move(x, y)
    page.wait_for_selector("#compare-chart .hoverlayer .hoverlabel, #compare-chart .hoverlayer .legend")
    page.mouse.click(x, y)
    page.wait_for_url(f"**/runs/{target.pk}/groups/?step=2")
    assert "Groups at step 2" in page.inner_text("h1")
    assert page.inner_text(".crumbs") == target.name

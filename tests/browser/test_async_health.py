"""The run page's async-health panel in real Chromium: per step the time stacked by phase with the wait
(the step's time no phase accounts for), tokens/s, the staleness histogram, the truncated / aborted share —
and a click on a step, there or on any step curve of the run page (static/js/curve_click.js), opens that
step's groups with their best and worst samples."""

from __future__ import annotations

import time

import pytest

from tests.browser.conftest import sign_in
from tests.browser.test_run_page_charts import report
from tests.conftest import PASSWORD
from tests.webapp.factories import make_run


def step_metrics(step: int) -> dict:
    return {
        "type": "metrics",
        "step": step,
        "values": {
            "step_time": 10.0,
            "time/generate": 5.0,
            "time/score": 0.5,
            "time/forward": 1.0,
            "time/backward": 1.0,
            "time/optimizer": 0.5,
            "time/weight_sync": 0.5,
            "tokens_per_s": 100.0 * step,
            "reward/mean": 0.25 * step,
            "loss": 1.0 / step,
        },
    }


def sample(group: int, sample_: int, *, reward: float, staleness: int, status: str = "ok") -> dict:
    return {
        "group": group,
        "sample": sample_,
        "task_id": f"task-{group}",
        "reward": reward,
        "staleness": staleness,
        "status": status,
        "turns": [{"role": "user", "text": "2 + 2?"}, {"role": "assistant", "text": f"answer {reward}"}],
    }


@pytest.fixture
def async_run(transactional_db, project, environment, rubric, users, server):
    run = make_run(project, environment, rubric, users["alice"], "async", overrides={"max_steps": 3})
    items = {
        1: [sample(0, 0, reward=1.0, staleness=0), sample(0, 1, reward=0.0, staleness=0, status="truncated")],
        2: [
            sample(0, 0, reward=0.25, staleness=1),
            sample(0, 1, reward=0.75, staleness=1),
            sample(1, 0, reward=0.5, staleness=2, status="error"),
            sample(1, 1, reward=0.0, staleness=1),
        ],
    }
    events = []
    for step in (1, 2):
        events += [step_metrics(step), {"type": "trajectories", "step": step, "items": items[step]}]
    report(server, run, run.ingest_token(), events)
    return project, run


def test_async_health_charts_and_a_click_to_the_steps_groups(async_run, server, page):
    project, run = async_run
    sign_in(page, server, "dave", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/runs/{run.pk}/")
    page.wait_for_selector("[data-async-health][data-drawn='2']")
    panel = page.locator("[data-async-health]")
    assert panel.locator("[data-async-health-empty]").is_hidden()

    timeline = page.evaluate(
        "() => document.querySelector('[data-async-health-chart=timeline]').data"
        ".map(t => [t.name, Array.from(t.x), Array.from(t.y)])"
    )
    assert [name for name, _, _ in timeline] == ["generate", "score", "learn", "sync", "other"]
    other = dict((name, y) for name, _, y in timeline)["other"]
    assert other == pytest.approx([1.5, 1.5])  # 10 s − 5 − 0.5 − 2.5 − 0.5
    # The run page's own "Step time by phase" chart stacks the same way: the same names in the same colours.
    page.wait_for_function("() => (document.querySelector('#chart-step_time').data || []).length === 5")
    colours = "(selector) => document.querySelector(selector).data.map(t => [t.name, t.marker.color, Array.from(t.y)])"
    assert page.evaluate(colours, "#chart-step_time") == page.evaluate(
        colours, "[data-async-health-chart=timeline]"
    )
    # Its legend and its x-axis title do not overlap.
    boxes = page.evaluate(
        "() => { const div = document.querySelector('[data-async-health-chart=timeline]');"
        " return ['.legend', '.xtitle'].map(s => { const r = div.querySelector(s).getBoundingClientRect();"
        " return [r.top, r.bottom]; }); }"
    )
    (legend_top, legend_bottom), (title_top, title_bottom) = boxes
    assert legend_bottom <= title_top or title_bottom <= legend_top, boxes
    assert "Step time by phase" in panel.inner_text()
    staleness = page.evaluate(
        "() => { const t = document.querySelector('[data-async-health-chart=staleness]').data[0];"
        " return [Array.from(t.x), Array.from(t.y)]; }"
    )
    assert staleness == [[0, 1, 2], [2, 3, 1]]
    share = page.evaluate(
        "() => document.querySelector('[data-async-health-chart=share]').data.map(t => [t.name, Array.from(t.y)])"
    )
    assert share == [["truncated", [0.5, 0.0]], ["aborted (error)", [0.0, 0.25]]]
    tokens = page.evaluate(
        "() => Array.from(document.querySelector('[data-async-health-chart=throughput]').data[0].y)"
    )
    assert tokens == [100.0, 200.0]

    # A click on step 2's bar opens step 2's groups, each with its best and worst sample.
    page.evaluate(
        "() => { const div = document.querySelector('[data-async-health-chart=timeline]');"
        " div.emit('plotly_click', {points: [{x: 2}]}); }"
    )
    page.wait_for_url("**/groups/?step=2")
    assert "Groups at step 2" in page.inner_text("h1")
    rows = page.locator("table.group-list tbody tr")
    assert rows.count() == 2
    first = rows.first
    assert first.locator("[data-best]").inner_text() == "best 0.750"
    assert first.locator("[data-worst]").inner_text() == "worst 0.250"
    first.locator("[data-worst]").click()
    page.wait_for_url("**/trajectories/**")
    assert "answer 0.25" in page.inner_text("ol[data-turns]")  # step 2, group 0: 0.25 vs 0.75
    page.go_back()
    page.locator("table.group-list tbody tr").first.locator("[data-best]").click()
    page.wait_for_url("**/trajectories/**")
    assert "answer 0.75" in page.inner_text("ol[data-turns]")

    # The same from a point of the live reward curve.
    page.goto(f"{server}/p/{project.slug}/runs/{run.pk}/")
    page.wait_for_selector("#chart-reward[data-step-click]")
    page.evaluate("() => document.getElementById('chart-reward').emit('plotly_click', {points: [{x: 1}]})")
    page.wait_for_url("**/groups/?step=1")
    assert page.locator("table.group-list tbody tr").count() == 1


def test_a_point_of_any_step_curve_opens_that_steps_groups(async_run, server, page):
    project, run = async_run
    report(
        server,
        run,
        run.ingest_token(),
        [{"type": "metrics", "step": 2, "split": "eval", "values": {"eval/accuracy": 0.5}}],
        start=5,
    )
    sign_in(page, server, "dave", PASSWORD)
    run_page = f"{server}/p/{project.slug}/runs/{run.pk}/"

    def click(selector: str, step: int) -> None:
        page.wait_for_selector(f"{selector}[data-step-click]")
        page.evaluate(
            "([selector, step]) => document.querySelector(selector).emit('plotly_click', {points: [{x: step}]})",
            [selector, step],
        )

    # A main curve other than the reward: the loss, and the step-time chart stacked by phase.
    for chart in ("#chart-loss", "#chart-step_time"):
        page.goto(run_page)
        click(chart, 2)
        page.wait_for_url("**/groups/?step=2")
        assert "Groups at step 2" in page.inner_text("h1")

    # An evaluation curve opens the step's evaluation groups.
    page.goto(run_page)
    click("[data-live-eval] .live-chart", 2)
    page.wait_for_url("**/groups/?step=2&split=eval")

    # With time on the x-axis a point is not a step: the click does nothing.
    page.goto(run_page)
    page.wait_for_selector("#chart-reward[data-step-click]")
    page.select_option("[data-live-x]", "time")
    click("#chart-reward", 1)
    time.sleep(0.5)
    assert page.url == run_page

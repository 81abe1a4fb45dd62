"""Charts a researcher reads, in real Chromium against a real daphne: evaluation as small multiples
(accuracy first), whole-step ticks, a log scale, the step time stacked by phase, a metric picker with
search, per-step histograms whose cells filter the feed and link the explorer, training and evaluation
groups listed apart, warnings marked in the log — and metric keys and run names that look like HTML stay
text in every chart, on the run page and on the compare page."""

from __future__ import annotations

import json
import time

import pytest
import requests

from tests.browser.conftest import new_page, sign_in, wait_until_following
from tests.conftest import PASSWORD
from tests.webapp.factories import make_run

HOSTILE_KEY = '<a href="https://example.com/x">click</a>'
HOSTILE_NAME = "<b>bold</b> <a href='https://example.com/y'>run</a>"


@pytest.fixture
def reported_runs(transactional_db, project, environment, rubric, users):
    """Two runs in the test story's project (tests/conftest.py), the second named like HTML, each with
    its ingestion token."""
    made = [
        make_run(project, environment, rubric, users["alice"], name, overrides={"max_steps": 3})
        for name in ("charts", HOSTILE_NAME)
    ]
    return project, [(run, run.ingest_token()) for run in made]


def report(server, run, token, events, *, start: int = 1):
    numbered = [
        {"seq": seq, "time": 1_700_000_000 + seq, **event} for seq, event in enumerate(events, start=start)
    ]
    response = requests.post(
        f"{server}/api/runs/{run.pk}/events",
        data=json.dumps({"events": numbered}),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 200, response.text


def train_metrics(step: int) -> dict:
    return {
        "type": "metrics",
        "step": step,
        "tokens": 100 * step,
        "values": {
            "reward/mean": 0.2 * step,
            "reward/std": 0.1,
            "accuracy": 0.25 * step,
            "step_time": 10.0,
            "time/generate": 6.0,
            "time/score": 0.5,
            "time/forward": 1.0,
            "time/backward": 1.5,
            "time/optimizer": 0.5,
            "time/weight_sync": 0.25,
            "grad_norm": 1.0 / step,
            "learning_rate": 1e-5,
            "staleness/mean": 0.5,
            "staleness/max": 1.0,
            "logprob_mismatch/mean": 0.01 * step,
            HOSTILE_KEY: float(step),
        },
    }


def eval_metrics(step: int) -> dict:
    return {
        "type": "metrics",
        "step": step,
        "split": "eval",
        "values": {"eval/turns": 1.0, "eval/reward/mean": 0.3 + 0.1 * step, "eval/accuracy": 0.1 * step},
    }


def group(step: int, split: str, rewards: list[float], task: str) -> dict:
    return {
        "type": "trajectories",
        "step": step,
        "items": [
            {
                "group": 0,
                "sample": sample,
                "task_id": task,
                "prompt": f"Question {task}?\nAnswer with a number.",
                "answer": "42",
                "split": split,
                "reward": reward,
                "completion_tokens": 10 + 5 * sample,
                "turns": [{"role": "assistant", "text": f"answer {sample}"}],
            }
            for sample, reward in enumerate(rewards)
        ],
    }


def chart(page, selector: str, expression: str):
    return page.evaluate(
        f"(() => {{ const div = document.querySelector({json.dumps(selector)}); return {expression}; }})()"
    )


def test_the_run_page_charts_read_like_a_researchers_notebook(reported_runs, server, page):
    project, [(run, token), _] = reported_runs
    first = [
        {"type": "status", "status": "STARTING"},
        {"type": "status", "status": "RUNNING"},
        eval_metrics(0),
        train_metrics(1),
    ]
    report(server, run, token, first)
    sign_in(page, server, "alice", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/runs/{run.pk}/")
    wait_until_following(page)

    # After the step-0 evaluation and one step, every series of one point is drawn (a marker), each
    # step axis reads whole, unique steps, accuracy keeps its 0–1 range, and the evaluation's figures
    # are numbers in the live bar.
    for selector in ("#chart-reward", "[data-key='eval/accuracy']", "[data-key='eval/reward/mean']"):
        assert chart(page, selector, "div.querySelectorAll('.scatterlayer .point').length") >= 1, selector
        ticks = chart(
            page, selector, "Array.from(div.querySelectorAll('.xtick text')).map(t => t.textContent)"
        )
        assert ticks and all(t.isdigit() for t in ticks) and len(set(ticks)) == len(ticks), (selector, ticks)
    assert chart(page, "[data-key='eval/accuracy']", "div.layout.yaxis.range") == [-0.03, 1.03]
    # "Best reward" says what it is: which split, which scale.
    assert "highest mean training reward of one step" in page.locator("[data-live-best-label]").get_attribute(
        "title"
    )
    assert page.locator("[data-live-eval-latest]").inner_text() == (
        "Evaluation at step 0 (held-out tasks): accuracy 0.000 · reward/mean 0.300"
    )

    report(
        server,
        run,
        token,
        [
            group(1, "train", [0.0, 0.0, 1.0], "t1"),
            *[
                event
                for step in (2, 3)
                for event in (
                    train_metrics(step),
                    group(step, "train", [0.0, 0.5 * (step - 1), 1.0], f"t{step}"),
                )
            ],
            eval_metrics(3),
            group(3, "eval", [1.0], "held-out-1"),
            {"type": "log", "level": "warning", "message": "tokenizer: truncating a prompt"},
        ],
        start=len(first) + 1,
    )
    page.wait_for_function(
        "(document.querySelector(\"[data-key='eval/accuracy']\").data[0].y || []).length === 2"
    )
    assert "Evaluation at step 3" in page.locator("[data-live-eval-latest]").inner_text()
    assert page.locator("[data-eval-figure='eval/accuracy']").inner_text() == "accuracy 0.300"

    # Evaluation as small multiples, accuracy first.
    keys = page.evaluate(
        "Array.from(document.querySelectorAll('[data-live-eval] .live-chart')).map(d => d.dataset.key)"
    )
    assert keys == ["eval/accuracy", "eval/reward/mean", "eval/turns"]
    assert chart(page, "[data-key='eval/accuracy']", "div.data[0].y") == [0.0, pytest.approx(0.3)]

    # Steps are whole numbers on the axis, and the scale can go logarithmic.
    ticks = page.evaluate(
        "Array.from(document.querySelectorAll('#chart-reward .xtick text')).map(t => t.textContent)"
    )
    assert ticks and all(tick.isdigit() for tick in ticks), ticks
    page.check("[data-live-log-scale]")
    page.wait_for_function("document.getElementById('chart-reward').layout.yaxis.type === 'log'")

    # The step time, stacked by phase: learning is forward + backward + optimizer.
    stack = chart(page, "#chart-step_time", "div.data.map(t => [t.name, t.type, t.y[0]])")
    assert stack == [
        ["generate", "bar", 6.0],
        ["score", "bar", 0.5],
        ["learn", "bar", 3.0],
        ["sync", "bar", 0.25],
        ["other", "bar", 0.25],
    ]
    assert chart(page, "#chart-step_time", "div.layout.barmode") == "stack"

    # Off-policy health, once the trainer reports it: staleness and the sampler/learner log-prob gap.
    assert chart(page, "#chart-staleness", "div.data.map(t => t.name)") == ["staleness/mean", "staleness/max"]
    assert chart(page, "#chart-mismatch", "div.data.map(t => t.name)") == ["mean"]
    assert page.locator("#chart-staleness").is_visible() and page.locator("#chart-mismatch").is_visible()

    # The rest of the metrics are a search away.
    page.fill("[data-live-metric-search]", "grad")
    assert page.locator("[data-live-metric-list] button").all_inner_texts() == ["grad_norm"]
    page.click("[data-live-metric-list] button")
    page.locator("[data-live-picked] [data-key='grad_norm']").wait_for()
    assert chart(page, "[data-key='grad_norm']", "div.data[0].y.length") == 3

    # A metric key that looks like a link is charted as text: no link in the SVG, the title reads the key.
    page.fill("[data-live-metric-search]", "example.com")
    page.click("[data-live-metric-list] button")
    hostile = f"[data-live-picked] [data-key={json.dumps(HOSTILE_KEY)}]"
    page.locator(hostile).wait_for()
    assert chart(page, hostile, "div.querySelector('.gtitle').textContent") == HOSTILE_KEY
    assert chart(page, hostile, "div.querySelectorAll('svg a').length") == 0
    assert page.locator("a[href='https://example.com/x']").count() == 0

    # Tasks by their text: the prompt's first line (the whole prompt on hover) and the expected answer.
    newest = page.locator("[data-live-feed] > li").first
    assert newest.locator("[data-task]").inner_text() == "Question t3?"
    assert (
        newest.locator("[data-task]").get_attribute("title")
        == "Question t3?\nAnswer with a number.\n\ntask t3"
    )
    assert newest.locator("[data-task-answer]").inner_text().strip() == "expected 42"

    # Training and evaluation groups are listed apart.
    assert page.locator("[data-live-feed] > li").count() == 3
    assert "held-out-1" not in page.locator("[data-live-feed]").inner_text()
    page.click("[data-live-feed-tab=eval]")
    assert "held-out-1" in page.locator("[data-live-feed-eval]").inner_text()
    page.click("[data-live-feed-tab=train]")

    # The warning stands out in the log.
    assert (
        page.locator("[data-live-log] .level-warning").inner_text().endswith("tokenizer: truncating a prompt")
    )

    # Rewards per step: a click on the cell of step 3's reward-1.0 bin lists those trajectories in the feed.
    page.wait_for_function("(document.getElementById('chart-histogram').data || []).length === 1")
    assert chart(page, "#chart-histogram", "div.data[0].x") == [1, 2, 3]
    # The top and bottom rows are whole cells: the axis spans every bin, edge to edge.
    low, high = chart(page, "#chart-histogram", "div._fullLayout.yaxis.range")
    assert low < 0.0 and high > 1.0  # the rewards' bins run from 0 to 1
    where = page.evaluate("""() => {
      const div = document.getElementById('chart-histogram'), xa = div._fullLayout.xaxis, ya = div._fullLayout.yaxis;
      const ys = div.data[0].y, box = div.getBoundingClientRect();
      return {x: box.left + xa._offset + xa.l2p(3), y: box.top + ya._offset + ya.l2p(ys[ys.length - 1])};
    }""")
    page.mouse.move(where["x"], where["y"])
    page.mouse.click(where["x"], where["y"])
    page.locator("[data-live-feed-filter]").wait_for(state="visible")
    filtered = page.locator("[data-live-feed-filtered] > li")
    assert filtered.count() == 2  # step 3 scored 1.0 twice (0.5 · 2 and the always-right sample)
    assert "Training, step 3, reward 0.95 to 1" in page.locator("[data-live-feed-filter-text]").inner_text()
    explorer = page.locator("[data-live-feed-filter-explorer]").get_attribute("href")
    assert (
        f"run={run.pk}" in explorer and "step_min=3&step_max=3" in explorer and "reward_min=0.95" in explorer
    )
    assert page.locator("[data-live-feed]").is_hidden()
    page.click("[data-live-feed-filter-clear]")
    assert page.locator("[data-live-feed]").is_visible()

    # Lengths per step too, and the histogram follows new trajectories.
    page.select_option("[data-live-histogram-field]", "length")
    page.wait_for_function(
        "document.getElementById('chart-histogram').layout.yaxis.title.text === 'response length'"
    )
    report(
        server,
        run,
        token,
        [
            {
                "seq": 40,
                "type": "trajectories",
                "step": 4,
                "items": [
                    {
                        "group": 0,
                        "sample": 0,
                        "task_id": "t4",
                        "reward": 0.5,
                        "completion_tokens": 12,
                        "turns": [],
                    }
                ],
            }
        ],
    )
    page.wait_for_function(
        "document.getElementById('chart-histogram').data[0].x.length === 4", timeout=10_000
    )


def test_the_compare_page_charts_names_and_keys_as_text(reported_runs, server, page):
    project, [(first, first_token), (second, second_token)] = reported_runs
    for run, token in ((first, first_token), (second, second_token)):
        report(server, run, token, [eval_metrics(0), train_metrics(1), train_metrics(2)])
    sign_in(page, server, "alice", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/compare/?runs={first.pk},{second.pk}")
    page.wait_for_function("(document.getElementById('compare-chart').data || []).length === 2")

    # Two runs with the same curve stay two: their own dash and marker, and a note that says so.
    assert chart(page, "#compare-chart", "div.data.map(t => t.line.dash)") == ["solid", "dash"]
    assert page.locator("[data-compare-identical]").inner_text() == (
        f"{HOSTILE_NAME} (#{second.pk}) is identical to charts (#{first.pk})"
    )
    ticks = chart(
        page, "#compare-chart", "Array.from(div.querySelectorAll('.xtick text')).map(t => t.textContent)"
    )
    assert ticks == ["1", "2"], ticks

    # A one-point evaluation accuracy is a visible marker on a 0–1 scale, one whole step on the axis.
    page.select_option("[data-compare-metric]", "eval/accuracy")
    page.wait_for_function("document.getElementById('compare-chart').layout.title.text === 'eval/accuracy'")
    time.sleep(0.2)
    assert chart(page, "#compare-chart", "div.querySelectorAll('.scatterlayer .point').length") == 2
    assert chart(
        page, "#compare-chart", "Array.from(div.querySelectorAll('.xtick text')).map(t => t.textContent)"
    ) == ["0"]
    yticks = chart(
        page, "#compare-chart", "Array.from(div.querySelectorAll('.ytick text')).map(t => t.textContent)"
    )
    assert len(set(yticks)) == len(yticks) and yticks[0] == "0" and yticks[-1] == "1", yticks
    page.select_option("[data-compare-metric]", HOSTILE_KEY)
    page.wait_for_function("document.getElementById('compare-chart').data[0].y.length === 2")
    time.sleep(0.2)  # let the redraw land
    assert chart(page, "#compare-chart", "div.querySelector('.gtitle').textContent") == HOSTILE_KEY
    legend = chart(
        page, "#compare-chart", "Array.from(div.querySelectorAll('.legendtext')).map(t => t.textContent)"
    )
    assert legend == [f"charts (#{first.pk})", f"{HOSTILE_NAME} (#{second.pk})"]
    assert chart(page, "#compare-chart", "div.querySelectorAll('svg a').length") == 0
    assert page.locator("a[href^='https://example.com']").count() == 0


PHONE = {"width": 390, "height": 844}

# Every drawn chart, and the card it sits in: wider than its box, or sticking out of the screen?
CHARTS_TOO_WIDE = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).filter(div => {
  const box = div.getBoundingClientRect();
  if (box.width === 0) return false;  // a hidden tab
  const svg = div.querySelector('.main-svg');
  const drawn = svg ? svg.getBoundingClientRect().width : 0;
  return div.scrollWidth > div.clientWidth + 1 || box.right > window.innerWidth + 1
    || box.left < -1 || drawn > box.width + 1;
}).map(div => (div.id || div.className) + ' ' + Math.round(div.getBoundingClientRect().width) + '/'
  + Math.round(div.scrollWidth))"""


def test_every_chart_fits_a_390px_phone(reported_runs, server, browser):
    """On a phone each chart of the run page and the compare page is as wide as the screen allows: none
    wider than its container, none past the screen's edge."""
    project, [(first, first_token), (second, second_token)] = reported_runs
    for run, token in ((first, first_token), (second, second_token)):
        report(
            server,
            run,
            token,
            [train_metrics(step) for step in (1, 2, 3)]
            + [eval_metrics(step) for step in (0, 2)]
            + [group(1, "train", [0.0, 1.0], "t1"), group(2, "train", [1.0, 0.5], "t2")],
        )
    context = browser.new_context(viewport=PHONE, bypass_csp=True)
    page = new_page(context)
    try:
        sign_in(page, server, "alice", PASSWORD)
        page.goto(f"{server}/p/{project.slug}/runs/{first.pk}/")
        page.wait_for_function("(document.getElementById('chart-reward').data || []).length > 0")
        page.wait_for_timeout(500)  # the other charts draw after the first
        drawn = page.evaluate("document.querySelectorAll('.js-plotly-plot').length")
        assert drawn >= 4, drawn
        assert page.evaluate(CHARTS_TOO_WIDE) == []
        page.goto(f"{server}/p/{project.slug}/compare/?runs={first.pk},{second.pk}")
        page.wait_for_function("(document.getElementById('compare-chart').data || []).length === 2")
        page.wait_for_timeout(300)
        assert page.evaluate(CHARTS_TOO_WIDE) == []
    finally:
        context.close()

"""What the walk on a fresh demo found on the run page, checked in real Chromium as a user sees it: a queued
run's charts say "no points yet" instead of inventing axes; series that coincide stay visible and the legend
names the twin; the best reward says at which step (of training); the evaluation's figure is rounded as the
log rounds it; the cancel dialog says what cancelling does now; "live" turns grey and says how the run ended;
the runs table says it scrolls on a phone; "1 run", not "1 runs"."""

from __future__ import annotations

import re

from tests.browser.conftest import sign_in, wait_until_following
from tests.browser.test_live_run_page import PASSWORD, live_run, report  # noqa: F401 — the fixture

EVAL_ACCURACY = 0.5625  # 9 of 16: a tie at the third decimal — the trainer's log writes 0.562


def step(seq: int, number: int, reward: float) -> dict:
    return {
        "seq": seq,
        "type": "metrics",
        "step": number,
        "values": {
            "reward/mean": reward,
            "staleness/mean": 1.0,  # every sample as stale: mean and max coincide
            "staleness/max": 1.0,
            "criterion/correct": 0.5,  # weight 1: the raw and weighted criterion coincide
            "criterion/correct/weighted": 0.5,
        },
    }


def legend(page, chart: str):
    return page.evaluate(
        f"document.getElementById('chart-{chart}').data.map(t => [t.name, (t.line || {{}}).dash])"
    )


def test_the_run_page_tells_what_is_there_and_what_will_happen(live_run, server, page):  # noqa: F811
    project, run, token = live_run
    sign_in(page, server, "alice", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/runs/{run.pk}/")
    wait_until_following(page)

    # Queued, nothing reported: the always-shown reward chart says so, with no axes of its own invention.
    reward = page.locator("#chart-reward")
    page.wait_for_selector("#chart-reward[data-points='none']")
    assert "no points yet" in reward.inner_text()
    assert page.evaluate("document.getElementById('chart-reward')._fullLayout.xaxis.visible") is False
    page.wait_for_selector("[data-async-health-chart=timeline][data-points='none']")
    # Cancelling a queued run drops it.
    page.click("[data-confirm-cancel] button")
    dialog = page.locator("[data-cancel-dialog]")
    assert dialog.locator("[data-cancel-outcome='queued']").is_visible()
    assert not dialog.locator("[data-cancel-outcome='after-step']").is_visible()
    page.click("[data-cancel-dialog-keep]")

    report(
        server,
        run,
        token,
        [
            {"seq": 1, "type": "status", "status": "STARTING"},
            {"seq": 2, "type": "status", "status": "RUNNING"},
            step(3, 1, 0.4),
            step(4, 2, 0.7),
            step(5, 3, 0.7),  # a tie: the best stays the first step that reached it
            {
                "seq": 6,
                "type": "metrics",
                "step": 3,
                "split": "eval",
                "values": {"eval/accuracy": EVAL_ACCURACY},
            },
        ],
    )
    page.wait_for_selector("#chart-reward[data-points='yes']")
    assert "no points yet" not in reward.inner_text()

    # Coinciding series: each its own dash, the later one's legend names the one it lies on.
    page.wait_for_function("(document.getElementById('chart-staleness').data || []).length === 2")
    assert legend(page, "staleness") == [
        ["staleness/mean", "solid"],
        ["staleness/max (same as staleness/mean)", "dash"],
    ]
    assert legend(page, "criteria") == [["correct", "solid"], ["correct/weighted (same as correct)", "dash"]]

    # The best reward with its step; the evaluation figure rounded as the trainer's log line rounds it.
    assert page.inner_text("[data-live-best-label]") == "best training reward 0.7000 at step 2"
    page.wait_for_selector("[data-eval-figure='eval/accuracy']")
    assert page.inner_text("[data-eval-figure='eval/accuracy'] strong") == f"{EVAL_ACCURACY:.3f}" == "0.562"

    # Cancelling now keeps the last finished step.
    page.click("[data-confirm-cancel] button")
    after = dialog.locator("[data-cancel-outcome='after-step']")
    assert after.is_visible() and not dialog.locator("[data-cancel-outcome='queued']").is_visible()
    assert "step 3 now" in after.inner_text() and "Resume starts from that checkpoint" in after.inner_text()
    page.click("[data-cancel-dialog-keep]")

    # The end of the run: no green "live" any more, live or after a reload.
    connection = page.locator("[data-live-connection]")
    assert connection.inner_text() == "live"
    report(server, run, token, [{"seq": 7, "type": "status", "status": "SUCCEEDED"}])
    page.wait_for_function("document.querySelector('[data-live-connection]').textContent === 'run succeeded'")
    assert "ok" not in connection.get_attribute("class").split()
    page.reload()
    page.wait_for_selector("#chart-reward[data-points='yes']")
    assert connection.inner_text() == "run succeeded"
    assert page.inner_text("[data-live-best-label]") == "best training reward 0.7000 at step 2"

    # The runs list: the best reward's step; on a phone the table says it scrolls, on a desktop it needs not.
    page.goto(f"{server}/p/{project.slug}/runs/")
    cell = page.locator(f"tr[data-run-row='{run.pk}'] [data-best-reward]")
    assert " ".join(cell.inner_text().split()) == "0.700 at step 2"
    assert page.locator("[data-scroll-hint]").is_hidden()
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.locator("[data-scroll-hint]").is_visible()
    table = page.evaluate(
        "(() => { const t = document.querySelector('table.runs'); return [t.scrollWidth, t.clientWidth]; })()"
    )
    assert table[0] > table[1]  # it does scroll, and the hint says so
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{server}/p/{project.slug}/")
    stats = page.inner_text(".stats")
    assert re.search(r"\b1 run\b", stats) and "1 runs" not in stats, stats

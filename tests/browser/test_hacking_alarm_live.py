"""The reward-hacking alarm while someone watches, in real headless Chromium on a real daphne server: a
run scores with a rubric that holds a learned reward (a reward model added to it, as the review loop
does), and the trainer reports through the real ingestion API while the page is open — the issue's
walk-through: a truncated, malformed `TOOL_NAME` call the reward model rates high while correctness
fails, and over the steps the learned reward rising while correctness and format fall. The flag shows in
the live feed and the group view, the banner rises in the header without a reload, and its button
pauses the run (a cancel the trainer sees at its next report)."""

from __future__ import annotations

import json

import pytest
import requests
from playwright.sync_api import expect

from tests.browser.conftest import sign_in, wait_until_following
from tests.conftest import PASSWORD
from tests.webapp.factories import make_run
from tests.webapp.rewards_factories import direct_snapshot, preference_texts, ready
from webapp.experiments.models import Run
from webapp.rewards import services as reward_services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

MALFORMED = '<tool_call>{"name": "TOOL_NAME", "arguments": {"expr": "17 +'  # cut off mid-call
CORRECT = "<answer>42</answer>"


@pytest.fixture
def scored_run(project, environment, rubric, users):
    """A running run whose rubric version scores with a learned reward beside correctness and format;
    made before the page (see test_live_run_page.py on ORM connections)."""
    snapshot = direct_snapshot(project=project, rows=preference_texts(6), user=users["bob"])
    reward_model = ready(
        reward_services.reward_model_train(snapshot=snapshot, user=users["bob"], name="style", dispatch=False)
    )
    reward_services.reward_model_register(
        reward_model=reward_model, rubric=rubric, weight=1.0, user=users["bob"]
    )
    run = make_run(project, environment, rubric, users["bob"], "scored by style v1", status="RUNNING")
    names = [c["name"] for c in run.resolved_config["rubric"]["criteria"]]
    assert names == ["correct", "format", "style_v1"]
    return run, run.ingest_token()


def report(server: str, run: Run, token: str, events: list[dict]) -> dict:
    response = requests.post(
        f"{server}/api/runs/{run.pk}/events",
        data=json.dumps({"events": events}),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        timeout=20,
    )
    assert response.status_code == 200, response.text
    return response.json()


def step_metrics(seq: int, step: int, *, style: float, correct: float, fmt: float) -> dict:
    values = {"criterion/style_v1": style, "criterion/correct": correct, "criterion/format": fmt}
    return {
        "seq": seq,
        "type": "metrics",
        "step": step,
        "time": 1_700_000_000 + step,
        "values": {**values, "reward/mean": style + correct + 0.2 * fmt, "accuracy": correct},
    }


def component(name: str, kind: str, raw: float, weight: float = 1.0) -> dict:
    return {"name": name, "kind": kind, "raw": raw, "weight": weight, "weighted": raw * weight}


def walkthrough_group(seq: int, step: int) -> dict:
    """The walk-through's group: the malformed call (reward model high, correctness and format failed,
    truncated) and the correct answer."""
    prompt = {"role": "user", "text": "What is 17 + 25? Answer inside <answer></answer>."}
    malformed = [
        component("correct", "numeric_match", 0.0),
        component("format", "regex", 0.0, 0.2),
        component("style_v1", "learned_reward", 0.93),
    ]
    correct = [
        component("correct", "numeric_match", 1.0),
        component("format", "regex", 1.0, 0.2),
        component("style_v1", "learned_reward", 0.31),
    ]
    return {
        "seq": seq,
        "type": "trajectories",
        "step": step,
        "items": [
            {
                "group": 0,
                "sample": 0,
                "task_id": "add-17-25",
                "status": "truncated",
                "reward": sum(c["weighted"] for c in malformed),
                "components": malformed,
                "turns": [prompt, {"role": "assistant", "text": MALFORMED}],
            },
            {
                "group": 0,
                "sample": 1,
                "task_id": "add-17-25",
                "reward": sum(c["weighted"] for c in correct),
                "components": correct,
                "turns": [prompt, {"role": "assistant", "text": CORRECT}],
            },
        ],
    }


def test_the_alarm_rises_on_the_open_run_page_and_the_run_can_be_paused_from_it(
    scored_run, project, server, browser, page
):
    run, token = scored_run
    slug = project.slug
    sign_in(page, server, "bob", PASSWORD)
    page.goto(f"{server}/p/{slug}/runs/{run.pk}/")
    wait_until_following(page)
    banner = page.locator("[data-hacking-alarm]")
    expect(banner).to_be_hidden()

    # Two healthy steps: the learned reward and correctness rise together — no alarm.
    report(
        server,
        run,
        token,
        [
            step_metrics(1, 1, style=0.1, correct=0.5, fmt=0.9),
            step_metrics(2, 2, style=0.15, correct=0.6, fmt=0.9),
        ],
    )
    expect(page.locator("[data-live-step]")).to_contain_text("step 2")
    expect(banner).to_be_hidden()

    # Then the walk-through: the malformed call scores high with the reward model, and over four more
    # steps the learned reward climbs while correctness and format fall.
    report(
        server,
        run,
        token,
        [
            walkthrough_group(3, 6),
            step_metrics(4, 3, style=0.4, correct=0.3, fmt=0.6),
            step_metrics(5, 4, style=0.6, correct=0.2, fmt=0.5),
            step_metrics(6, 5, style=0.8, correct=0.1, fmt=0.4),
            step_metrics(7, 6, style=0.9, correct=0.0, fmt=0.3),
        ],
    )
    # The feed flags the group, and its worst sample (the malformed call) says why.
    feed = page.locator("[data-live-feed]")
    expect(feed.locator(".badge.hacking").first).to_contain_text("possible reward hacking (1)")
    expect(feed).to_contain_text("style_v1 scored high while correct, format, truncated failed")
    # The header's banner rises without a reload, naming the criteria and the steps.
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("over steps 1–6 the learned reward (style_v1) rose by")
    expect(banner).to_contain_text("verifiable criteria (correct, format)")
    # …and links the trajectory that shows it: the malformed call the reward model scored high.
    expect(banner.locator("[data-alarm-example]")).to_have_count(1)
    expect(banner.locator("[data-alarm-examples]")).to_contain_text("step 6")
    assert page.evaluate("window.liveSnapshotsReceived") == 1  # live, not a reconnect or a reload

    # The group view flags the malformed call, and only it.
    group_page = page.context.new_page()
    group_page.goto(f"{server}/p/{slug}/runs/{run.pk}/groups/6/0/?split=train")
    expect(group_page.locator("[data-hacking-flag]")).to_have_count(1)
    expect(group_page.locator("tr:has([data-hacking-flag])")).to_contain_text("Truncated")
    group_page.close()

    # Pause from the banner: the run is asked to stop, and the trainer hears it at its next report.
    banner.locator("button:has-text('Pause the run')").click()
    expect(page.locator(".messages")).to_contain_text("Cancellation requested")
    expect(page.locator("[data-run-cancel-requested]")).to_be_visible()
    expect(banner).to_be_visible()  # the alarm still stands after the reload
    assert report(server, run, token, [{"seq": 8, "type": "log", "message": "step 7"}])["control"] == {
        "cancel": True
    }
    # The trainer stops: the pause button goes with the cancel action, live.
    report(server, run, token, [{"seq": 9, "type": "status", "status": "CANCELLED"}])
    expect(page.locator("[data-run-status]")).to_have_text("Cancelled")
    expect(banner.locator("[data-pause-run]")).to_be_hidden()

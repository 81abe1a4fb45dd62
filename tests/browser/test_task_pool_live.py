"""The curriculum's task pool on the open run page, in real headless Chromium on a real daphne server: the
trainer reports its pool step by step through the real ingestion API; the panel shows the pool over steps
(size, frontier, replay buffer and share), the success-rate histogram and the entries, a generated task
linking to the failed task it was born from, and what an LLM generator wrote and refused (its text shown as
text) — live, without a reload."""

from __future__ import annotations

import json

import pytest
import requests
from playwright.sync_api import expect

from tests.browser.conftest import sign_in, wait_until_following
from tests.conftest import PASSWORD
from tests.webapp.factories import make_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

FAILED = {
    "id": "t-hard",
    "prompt": "What is 87 + 77 + 70?",
    "state": "failed",
    "attempts": 1,
    "rate": 0.0,
    "difficulty": "0.9",
}
EASY = {
    "id": "t-easy",
    "prompt": "What is 1 + 2?",
    "state": "mastered",
    "attempts": 1,
    "rate": 1.0,
    "difficulty": "0.1",
}
CHILD = {
    "id": "t-child",
    "prompt": "What is 61 + 18 + 40?",
    "parent": "t-hard",
    "generator": "environment",
    "born": 1,
    "state": "frontier",
    "attempts": 1,
    "rate": 0.5,
    "difficulty": "0.85",
}

# Written by an LLM generator (trainers/learn/curriculum_llm.py): untrusted text.
WRITTEN = {
    "id": "llm-written",
    "prompt": '<img src=x onerror="window.pwned=1"> What is 60 + 18?',
    "parent": "t-child",
    "generator": "llm:tutor",
    "born": 2,
    "state": "new",
}


def pool(seq: int, step: int, entries: list[dict], drawn: dict, **generation) -> dict:
    return {
        **generation,
        "seq": seq,
        "type": "task_pool",
        "step": step,
        "size": len(entries),
        "frontier": 1,
        "replay": 2,
        "drawn": drawn,
        "entries": entries,
    }


def test_the_pool_grows_live_with_its_lineage(project, environment, rubric, users, server, page):
    run = make_run(
        project,
        environment,
        rubric,
        users["bob"],
        "curriculum",
        overrides={"curriculum": "from_failures"},
        status="RUNNING",
    )
    token = run.ingest_token()

    def report(events: list[dict]) -> None:
        response = requests.post(
            f"{server}/api/runs/{run.pk}/events",
            data=json.dumps({"events": events}),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            timeout=20,
        )
        assert response.status_code == 200, response.text

    report([pool(1, 1, [FAILED, EASY], {"tasks": 2, "frontier": 0, "replay": 0})])
    sign_in(page, server, "bob", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/runs/{run.pk}/")
    wait_until_following(page)
    panel = page.locator("[data-task-pool]")
    expect(panel.locator("[data-task-pool-step-row]")).to_have_count(1)

    report([pool(2, 2, [FAILED, EASY, CHILD], {"tasks": 0, "frontier": 1, "replay": 1})])
    expect(panel.locator("[data-task-pool-step-row]")).to_have_count(2)
    expect(panel.locator("[data-task-pool-step-row='2']")).to_contain_text("50%")  # replay share
    expect(panel.locator("[data-task-pool-states]")).to_have_text("1 failed · 1 frontier · 1 mastered")
    bins = panel.locator("[data-task-pool-histogram] .task-pool-bin small")
    assert [bins.nth(i).text_content() for i in (0, 5, 9)] == ["1", "1", "1"]
    child = panel.locator("[data-task-pool-entry='t-child']")
    expect(child).to_contain_text("What is 61 + 18 + 40?")
    expect(child.locator("[data-born-from]")).to_have_attribute("href", "#task-pool-t-hard")
    expect(child).to_contain_text("(environment, step 1)")
    assert page.evaluate("window.liveSnapshotsReceived") == 1

    panel.locator("[data-task-pool-step]").select_option("1")
    expect(panel.locator("[data-task-pool-entry]")).to_have_count(2)
    expect(panel.locator("[data-task-pool-refused]")).to_be_hidden()  # the environment refuses nothing

    refused = {"wrong_answer": 2, "no_answer": 1}
    entries = [FAILED, EASY, CHILD, WRITTEN]
    report(
        [
            pool(
                3,
                3,
                entries,
                {"tasks": 1, "frontier": 1, "replay": 0},
                generator="llm:tutor",
                generated=1,
                refused=refused,
            )
        ]
    )
    panel.locator("[data-task-pool-step]").select_option("3")
    row = panel.locator("[data-task-pool-step-row='3']")
    expect(row).to_contain_text("llm:tutor")
    expect(row.locator("[data-task-pool-refused-count]")).to_have_text("3")
    expect(panel.locator("[data-task-pool-refused]")).to_have_text(
        "Variants refused after step 3: no answer 1 · wrong answer 2"
    )
    written = panel.locator("[data-task-pool-entry='llm-written']")
    expect(written).to_contain_text('<img src=x onerror="window.pwned=1"> What is 60 + 18?')
    expect(written).to_contain_text("(llm:tutor, step 2)")
    assert written.locator("img").count() == 0 and page.evaluate("window.pwned") is None

"""Training-Free GRPO's experience library on the open run page, in real headless Chromium on a real daphne
server: the trainer reports its library step by step through the real ingestion API, and the panel shows
the document with each step's diff (added, modified, deleted, refused edits) without a reload; an earlier
step can be looked at; the trajectory page lists what was in its prompt. Model output stays text."""

from __future__ import annotations

import json

import pytest
import requests
from playwright.sync_api import expect

from tests.browser.conftest import sign_in, wait_until_following
from tests.conftest import PASSWORD
from tests.webapp.factories import make_run, make_trajectory
from webapp.experiments.models import Run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

G1 = {"id": "G1", "text": "Check the sum before answering."}
G2 = {"id": "G2", "text": "<b>Answer</b> inside <answer></answer> tags."}


@pytest.fixture
def library_run(project, environment, rubric, users):
    run = make_run(
        project,
        environment,
        rubric,
        users["bob"],
        "experiences",
        preset="training_free_grpo",
        status="RUNNING",
    )
    return run, run.ingest_token()


def report(server: str, run: Run, token: str, events: list[dict]) -> None:
    response = requests.post(
        f"{server}/api/runs/{run.pk}/events",
        data=json.dumps({"events": events}),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        timeout=20,
    )
    assert response.status_code == 200, response.text


def library(seq: int, step: int, items: list[dict], edits: list[dict]) -> dict:
    return {
        "seq": seq,
        "type": "experience",
        "step": step,
        "items": items,
        "edits": edits,
        "groups_asked": 2,
        "prompt_tokens": 300,
        "completion_tokens": 40,
    }


def test_the_library_and_its_diff_grow_live_on_the_run_page(library_run, project, server, page):
    run, token = library_run
    report(server, run, token, [library(1, 0, [], [])])  # the library the run starts with
    sign_in(page, server, "bob", PASSWORD)
    page.goto(f"{server}/p/{project.slug}/runs/{run.pk}/")
    wait_until_following(page)
    panel = page.locator("[data-experience-library]")
    expect(panel.locator("[data-experience-empty]")).to_be_visible()

    report(
        server,
        run,
        token,
        [
            library(
                2,
                1,
                [G1, G2],
                [
                    {"op": "add", "id": "G1", "text": G1["text"], "group": 0},
                    {"op": "add", "id": "G2", "text": G2["text"], "group": 1},
                    {"op": "delete", "id": "G7", "applied": False, "reason": "no experience G7", "group": 1},
                ],
            )
        ],
    )
    items = panel.locator("[data-experience-items] li")
    expect(items).to_have_count(2)
    expect(panel.locator("[data-experience-counts]")).to_contain_text(
        "2 added · 0 modified · 0 deleted · 1 refused"
    )
    expect(panel.locator("[data-experience-id='G2'] .experience-text")).to_have_text(
        G2["text"]
    )  # text, not markup
    expect(panel.locator("[data-experience-refused]")).to_contain_text("refused: no experience G7")

    modified = {"id": "G1", "text": "Check the sum twice before answering."}
    report(
        server,
        run,
        token,
        [
            library(
                3,
                2,
                [modified],
                [
                    {"op": "modify", "id": "G1", "text": modified["text"], "before": G1["text"], "group": 0},
                    {"op": "delete", "id": "G2", "before": G2["text"], "group": 0},
                ],
            )
        ],
    )
    expect(panel.locator("[data-experience-id='G1']")).to_have_attribute("data-experience-change", "modified")
    expect(panel.locator("[data-experience-id='G1'] .experience-before")).to_have_text(G1["text"])
    expect(panel.locator("[data-experience-id='G2']")).to_have_attribute("data-experience-change", "deleted")
    expect(panel.locator("[data-experience-cost]")).to_contain_text("340 tokens at this step, 1020 so far")
    assert page.evaluate("window.liveSnapshotsReceived") == 1  # live, not a reload

    # An earlier step: the document as it was then, with that step's own diff.
    panel.locator("[data-experience-step]").select_option("1")
    expect(panel.locator("[data-experience-id='G2']")).to_have_attribute("data-experience-change", "added")
    expect(panel.locator("[data-experience-counts]")).to_contain_text("2 added")

    # A trajectory of step 2 was generated with step 1's library in its prompt.
    trajectory = make_trajectory(run, step=2)
    page.goto(f"{server}/p/{project.slug}/trajectories/{trajectory.pk}/")
    shown = page.locator("[data-experiences-in-prompt]")
    expect(shown.locator("[data-experience-id]")).to_have_count(2)
    expect(shown).to_contain_text(G2["text"])

"""The review loop end to end, in real headless Chromium, on a real daphne server and a real Celery
worker: from a finished run a researcher makes a preference queue, an annotator judges its pairs with
the keyboard, the researcher freezes a dataset snapshot (and downloads its DPO export), trains a reward
model from it on the worker, adds the model to the rubric, launches a run with the new rubric version
and finds the whole chain — queue → snapshot → reward model → rubric version → run — on the lineage
page. Nothing is done outside the browser but making the finished run's rollouts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import new_page, sign_in
from tests.conftest import PASSWORD
from tests.processes import celery_worker
from tests.webapp.rewards_factories import answered, preference_texts
from webapp.experiments.models import Run, RunStatus
from webapp.review.models import Judgement, PreferenceQueue, PreferenceSnapshot
from webapp.rewards.models import RewardModel

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(840),
]

GROUPS = 6  # one pair each (a confident tagged answer vs a hedging one); a seventh group ties on reward
TRAINING_TIMEOUT_MS = 240_000  # embedding on a busy two-core machine; the page polls every 3 s


@pytest.fixture
def finished_run(run):
    """The `run` fixture, finished, with GRPO groups of two rollouts whose rewards differ — and one group
    whose rewards are equal (the queue form is told to skip it)."""
    for group, (prompt, good, bad) in enumerate(preference_texts(GROUPS, seed=3)):
        answered(run, group=group, sample=0, prompt=prompt, answer=good, reward=1.0)
        answered(run, group=group, sample=1, prompt=prompt, answer=bad, reward=0.0)
    answered(run, group=GROUPS, sample=0, prompt="What is 1 + 1?", answer="<answer>2</answer>", reward=0.5)
    answered(run, group=GROUPS, sample=1, prompt="What is 1 + 1?", answer="<answer>2</answer>.", reward=0.5)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, current_step=1)
    run.refresh_from_db()
    return run


def box(page, column: str):
    """The linked boxes of one column of the lineage diagram."""
    return page.locator(f".lineage-col:has(h3:text-is('{column}')) .lineage-box")


def test_a_team_goes_from_a_finished_run_to_a_learned_reward_and_a_new_run_in_the_browser(
    finished_run, project, rubric, users, server, browser, page, tmp_path
):
    slug = project.slug
    sign_in(page, server, "bob", PASSWORD)

    # 1. The researcher makes a preference queue over the finished run, assigning carol.
    page.goto(f"{server}/p/{slug}/")
    page.click("nav.project-nav >> text=Annotate")
    page.click("a.button:has-text('New queue')")
    page.wait_for_url("**/review/queues/new/")
    page.fill("input[name=name]", "style study")
    page.check(f"input[name=runs][value='{finished_run.pk}']")
    page.check("input[name=distinct_rewards]")
    page.check(f"input[name=annotators][value='{users['carol'].pk}']")
    page.fill("textarea[name=instructions]", "Prefer the confident, tagged answer.")
    page.click("button[type=submit]:has-text('Create queue')")
    page.wait_for_url(re.compile(r"/review/queues/\d+/$"))
    queue = PreferenceQueue.objects.get()
    expect(page.locator(".messages")).to_contain_text(f"created with {GROUPS} pairs")
    assert queue.pairs.count() == GROUPS and list(queue.annotators.all()) == [users["carol"]]

    # 2. The annotator judges every pair with the keyboard: the tagged answer wins, one pair is a tie.
    carol_context = browser.new_context(viewport={"width": 1360, "height": 900}, bypass_csp=True)
    try:
        carol = new_page(carol_context)
        sign_in(carol, server, "carol", PASSWORD)
        carol.goto(f"{server}/p/{slug}/review/queues/")
        carol.click("text=style study")
        carol.click("a.button:has-text('Annotate')")
        for i in range(GROUPS):
            carol.wait_for_function("window.annotateReady === true")
            left_is_good = "<answer>" in carol.inner_text('[data-side="left"]')
            key = "3" if i == 2 else ("1" if left_is_good else "2")
            carol.keyboard.press(key)
            with carol.expect_navigation():
                carol.keyboard.press("Enter")
        expect(carol.locator("[data-queue-done]")).to_be_visible()
        expect(carol.locator("[data-progress]")).to_contain_text(f"you judged {GROUPS}")
    finally:
        carol_context.close()
    assert Judgement.objects.filter(pair__queue=queue, annotator=users["carol"]).count() == GROUPS

    # 3a. The researcher freezes a snapshot: five pairs, the tie left out.
    page.goto(f"{server}/p/{slug}/review/queues/{queue.pk}/")
    expect(page.locator(".progress-table")).to_contain_text("carol")
    page.click("#snapshot-form button:has-text('Create dataset snapshot')")
    page.wait_for_url(re.compile(r"#datasets$"))
    expect(page.locator(".messages")).to_contain_text(f"Dataset v1: {GROUPS - 1} pairs")
    row = page.locator("#datasets ~ table tbody tr").first
    expect(row).to_contain_text("v1")
    expect(row.locator("td.num")).to_have_text(str(GROUPS - 1))
    expect(row).to_contain_text("1 tie")
    snapshot = PreferenceSnapshot.objects.get()

    # 3b. The DPO export, downloaded through the row's link: one JSON object a line, the tagged answer chosen.
    with page.expect_download() as download_info:
        row.locator("a:has-text('DPO JSONL')").click()
    download = download_info.value
    assert download.suggested_filename == "style-study-v1.dpo.jsonl"
    lines = [
        json.loads(line) for line in Path(download.path()).read_text("utf-8").splitlines() if line.strip()
    ]
    assert len(lines) == GROUPS - 1
    for line in lines:  # TRL's conversational format: messages before the answer, then each side's
        assert {"prompt", "chosen", "rejected"} <= line.keys()
        chosen = " ".join(m["content"] or "" for m in line["chosen"])
        rejected = " ".join(m["content"] or "" for m in line["rejected"])
        assert line["prompt"][-1]["content"].startswith("What is ")
        assert "<answer>" in chosen and "<answer>" not in rejected
        assert {m["role"] for m in line["chosen"] + line["rejected"]} <= {"assistant", "tool"}

    # 3c. Train a reward model from the snapshot through the form; a real worker trains it while the
    # status panel polls, and the page reloads itself when the model is ready.
    with celery_worker("cpu", name="preference-loop", DASHBOARD_URL=server, REWARD_MODELS_DIR=str(tmp_path)):
        page.click("nav.project-nav >> text=Reward models")
        page.click("a.button:has-text('Train from a snapshot')")
        page.wait_for_url("**/reward-models/new/")
        page.select_option("select[name=snapshot]", str(snapshot.pk))
        page.fill("input[name=name]", "style")
        page.fill("input[name=epochs]", "50")
        page.select_option("select[name=queue]", "cpu")
        page.click("#train-form button[type=submit]")
        page.wait_for_url(re.compile(r"/reward-models/\d+/$"))
        expect(page.locator(".messages")).to_contain_text("queued for training on the cpu workers")
        reward_model = RewardModel.objects.get()
        expect(page.locator("#rm-status")).to_have_attribute("hx-get", re.compile(r"/status/$"))
        expect(page.locator("#register-form")).to_be_visible(timeout=TRAINING_TIMEOUT_MS)
    reward_model.refresh_from_db()
    assert reward_model.status == "ready", reward_model.error_message
    status = page.locator("#rm-status")
    expect(status.locator(".badge.rm-ready")).to_have_text("Ready")
    expect(status.locator(".badge.rm-unreliable")).to_have_text("Not reliable")  # a handful of pairs
    expect(status).not_to_have_attribute("hx-get", re.compile(".*"))  # no more polling
    expect(status).to_contain_text(str(GROUPS - 1))  # pairs
    assert Path(reward_model.path).parent == tmp_path

    # 3d. Add it to the rubric: the rubric's version 2 scores with it. Five pairs leave one or two
    # held out, so the page says the model is not reliable and adding it takes the explicit override.
    reliability = reward_model.reliability()
    assert not reliability.reliable
    expect(page.locator("main")).to_contain_text("not reliable")
    page.select_option("#register-form select[name=rubric]", str(rubric.pk))
    page.fill("#register-form input[name=weight]", "0.5")
    # Ticked unless cleared: the model cannot pay the policy for failing the rubric's checks.
    expect(page.locator("#register-form input[name=only_when_checks_pass]")).to_be_checked()
    page.click("#register-form button:has-text('Add to rubric')")
    expect(page.locator("#register-form")).to_contain_text("override")
    page.fill("#register-form input[name=weight]", "0.5")
    page.check("#register-form input[name=allow_unreliable]")
    page.click("#register-form button:has-text('Add to rubric')")
    expect(page.locator(".messages")).to_contain_text("correctness v2 scores with style v1")
    expect(page.locator("a:has-text('correctness v2')")).to_be_visible()  # "Used by"
    version = rubric.versions.get(number=2)
    learned = [c for c in version.spec["criteria"] if c["kind"] == "learned_reward"]
    assert learned == [
        {
            "name": "style_v1",
            "kind": "learned_reward",
            "weight": 0.5,
            "params": {"path": reward_model.path, "bounded": True, "only_when_checks_pass": True},
        }
    ]

    # 3e. Launch a run with the rubric (it pins the new version) and find it in the list.
    page.click("nav.project-nav >> text=Runs")
    page.click("a.button:has-text('New run')")
    page.wait_for_url("**/runs/new/")
    page.fill("input[name=name]", "scored by style v1")
    page.select_option("select[name=rubric]", str(rubric.pk))
    page.click("button[type=submit]:has-text('Launch run')")
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    new_run = Run.objects.get(name="scored by style v1")
    assert new_run.rubric_version == version
    page.click("nav.project-nav >> text=Runs")
    listed = page.locator("table.runs tr", has_text="scored by style v1")
    expect(listed).to_contain_text("correctness v2")

    # 4. The lineage page links every step of the loop.
    page.goto(f"{server}/p/{slug}/reward-models/{reward_model.pk}/")
    page.click("a:has-text('Lineage')")
    page.wait_for_url(f"**/lineage/reward-models/{reward_model.pk}/")
    expect(box(page, "Source runs")).to_have_text(re.compile(r"first run\s*Succeeded"))
    expect(box(page, "Source runs")).to_have_attribute("href", f"/p/{slug}/runs/{finished_run.pk}/")
    expect(box(page, "Preference queue")).to_have_text("style study")
    expect(box(page, "Preference queue")).to_have_attribute("href", f"/p/{slug}/review/queues/{queue.pk}/")
    expect(box(page, "Snapshot")).to_contain_text(f"dataset #{snapshot.pk} v1")
    expect(box(page, "Snapshot")).to_contain_text(f"{GROUPS - 1} pairs")
    expect(box(page, "Snapshot")).to_have_attribute("href", f"/p/{slug}/review/queues/{queue.pk}/#datasets")
    expect(box(page, "Reward model")).to_contain_text("style v1")
    expect(box(page, "Reward model")).to_contain_text("Ready")
    expect(box(page, "Rubric versions")).to_have_text("correctness v2")
    expect(box(page, "Runs")).to_contain_text("scored by style v1")
    expect(box(page, "Runs")).to_contain_text("correctness v2")
    # …and the links lead there.
    box(page, "Runs").click()
    page.wait_for_url(f"**/runs/{new_run.pk}/")
    page.go_back()
    box(page, "Preference queue").click()
    page.wait_for_url(f"**/review/queues/{queue.pk}/")
    expect(page.locator("h1")).to_have_text("style study")

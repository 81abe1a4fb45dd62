"""The direct route from preferences to the policy, in real headless Chromium on a real daphne server and
a real Celery worker: an annotator judges a queue's pairs with the keyboard, the researcher freezes a
snapshot and trains the policy on it with DPO in one click (our DPO on the judged run's model, one
step), watches the run succeed and its checkpoint appear without a reload, starts a GRPO run from that
checkpoint through the run form, and finds snapshot → DPO run → checkpoint → GRPO run on the lineage
page. The GRPO run is only queued: the lineage needs it to exist, not to finish."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import new_page, sign_in, wait_until_following
from tests.conftest import PASSWORD
from tests.processes import celery_worker
from tests.webapp.rewards_factories import answered, preference_texts
from webapp.experiments.models import Checkpoint, Run, RunStatus
from webapp.review import services as review

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(600),
]

PAIRS = 3  # one pair per group: a confident tagged answer vs a hedging one
DPO_STEPS = 1
TRAINING_TIMEOUT_MS = 330_000  # a worker's start and a DPO step on a busy two-core machine


@pytest.fixture
def queue(run, project, users, tiny_model_path):
    """The `run` fixture, finished with groups of two rollouts, and a preference queue over them with
    carol assigned (the queue form has its own browser test: test_preference_loop.py). The run trained the
    tiny random Llama, so the DPO run on its judgements does too: this test proves the loop, not learning."""
    for group, (prompt, good, bad) in enumerate(preference_texts(PAIRS, seed=5)):
        answered(run, group=group, sample=0, prompt=prompt, answer=good, reward=1.0)
        answered(run, group=group, sample=1, prompt=prompt, answer=bad, reward=0.0)
    Run.objects.filter(pk=run.pk).update(
        status=RunStatus.SUCCEEDED,
        current_step=1,
        resolved_config={**run.resolved_config, "model": tiny_model_path},
    )
    return review.queue_create(
        project=project,
        user=users["bob"],
        name="style study",
        runs=[run],
        annotators=[users["carol"]],
        instructions="Prefer the confident, tagged answer.",
        seed=1,
    )


def box(page, column: str):
    """The linked boxes of one column of the lineage diagram."""
    return page.locator(f".lineage-col:has(h3:text-is('{column}')) .lineage-box")


def test_a_team_trains_the_policy_on_its_judgements_with_dpo_and_goes_on_with_grpo(
    queue, run, project, environment, rubric, server, browser, page, tiny_model_path
):
    slug = project.slug

    # The worker starts while carol judges (its start-up overlaps hers) and stops once the DPO run is done.
    with celery_worker("cpu", name="dpo-loop", DASHBOARD_URL=server):
        # 1. carol judges every pair with the keyboard: the tagged answer wins.
        carol_context = browser.new_context(viewport={"width": 1360, "height": 900}, bypass_csp=True)
        try:
            carol = new_page(carol_context)
            sign_in(carol, server, "carol", PASSWORD)
            carol.goto(f"{server}/p/{slug}/review/queues/{queue.pk}/annotate/")
            for _ in range(PAIRS):
                carol.wait_for_function("window.annotateReady === true")
                carol.keyboard.press("1" if "<answer>" in carol.inner_text('[data-side="left"]') else "2")
                with carol.expect_navigation():
                    carol.keyboard.press("Enter")
            expect(carol.locator("[data-queue-done]")).to_be_visible()
        finally:
            carol_context.close()

        # 2. bob freezes a snapshot and trains the policy on it with DPO, one click (one step, for the test).
        sign_in(page, server, "bob", PASSWORD)
        page.goto(f"{server}/p/{slug}/review/queues/{queue.pk}/")
        page.click("#snapshot-form button:has-text('Create dataset snapshot')")
        expect(page.locator(".messages")).to_contain_text(f"Dataset v1: {PAIRS} pairs")
        row = page.locator("#datasets ~ table tbody tr").first
        row.locator("[data-dpo-run] input[name=max_steps]").fill(str(DPO_STEPS))
        # It may start from a checkpoint of the judged runs (the GRPO policy); this one has none: the model
        # the judged run started from, named.
        expect(row.locator("[data-dpo-start] option")).to_have_text([f"the base model: {tiny_model_path}"])
        row.locator("[data-dpo-run] button:has-text('Train the policy with DPO')").click()
        page.wait_for_url(re.compile(r"/runs/\d+/$"))
        expect(page.locator(".messages")).to_contain_text("queued on the cpu queue")
        dpo = Run.objects.get(kind="dpo")
        assert dpo.max_steps == DPO_STEPS and dpo.preference_snapshot.queue_id == queue.pk
        assert dpo.resolved_config["model"] == tiny_model_path

        # The page follows the run on the worker: it succeeds, and its checkpoint shows up with a link
        # to start a GRPO run from it, without a reload.
        wait_until_following(page)
        expect(page.locator("[data-run-status]")).to_have_text("Succeeded", timeout=TRAINING_TIMEOUT_MS)
    dpo.refresh_from_db()
    assert dpo.status == RunStatus.SUCCEEDED, dpo.error_message + dpo.error_traceback
    checkpoint = Checkpoint.objects.get(run=dpo, step=DPO_STEPS)
    expect(page.locator(f"[data-checkpoint-step='{DPO_STEPS}']")).to_be_visible()
    expect(page.locator("#chart-dpo_margin")).to_be_visible()  # DPO's own metrics, charted
    # …and none of GRPO's panels (no rollouts: no reward chart, distributions or feed), no Resume once done.
    expect(page.locator("#chart-reward")).to_be_hidden()
    expect(page.locator("[data-live-rollout-panels]")).to_be_hidden()
    expect(page.locator("[data-live-feed]")).to_be_hidden()
    expect(page.locator("[data-run-action=resume]")).to_be_hidden()
    start = page.locator("[data-start-from-checkpoint]")
    expect(start).to_be_visible()

    # 3. A GRPO run from the DPO checkpoint, through the run form (queued: no worker is needed for it).
    start.locator(f"a:text-is('step {DPO_STEPS}')").click()
    page.wait_for_url(f"**/runs/new/?from_checkpoint={checkpoint.pk}")
    expect(page.locator("[data-start-checkpoint]")).to_contain_text("(a DPO run)")
    page.fill("input[name=name]", "grpo after dpo")
    page.select_option("select[name=environment]", str(environment.pk))
    page.select_option("select[name=rubric]", str(rubric.pk))
    page.click("button[type=submit]:has-text('Launch run')")
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    grpo = Run.objects.get(name="grpo after dpo")
    assert (grpo.kind, grpo.lineage, grpo.parent_id) == ("rl", "init", dpo.pk)
    assert grpo.resolved_config["model"] == checkpoint.path

    # 4. The lineage page, reached from the DPO run's page, links the whole chain.
    page.goto(f"{server}/p/{slug}/runs/{dpo.pk}/")
    page.click("[data-dpo-lineage]")
    page.wait_for_url(f"**/lineage/dpo-runs/{dpo.pk}/")
    expect(box(page, "Source runs")).to_have_attribute("href", f"/p/{slug}/runs/{run.pk}/")
    expect(box(page, "Preference queue")).to_have_text("style study")
    expect(box(page, "Snapshot")).to_contain_text(f"{PAIRS} pairs")
    expect(box(page, "DPO run")).to_contain_text(dpo.name)
    expect(box(page, "DPO run")).to_contain_text("Succeeded")
    expect(box(page, "Checkpoints")).to_contain_text(f"step {DPO_STEPS}")
    expect(box(page, "Runs from it")).to_contain_text("grpo after dpo")
    expect(box(page, "Runs from it")).to_contain_text(f"from step {DPO_STEPS}")
    box(page, "Runs from it").click()
    page.wait_for_url(f"**/runs/{grpo.pk}/")
    expect(page.locator("main")).to_contain_text(f"the checkpoint at step {DPO_STEPS} of {dpo.name}")

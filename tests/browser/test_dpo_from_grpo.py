"""Issue 35 point 1's walk, in real headless Chromium on a real daphne server and a real Celery worker:
a short GRPO LoRA run (the demo's knobs made tiny: 12 steps, the demo's checkpoint at step 10 and the final
one at 12) trains on the worker → an annotator judges its last steps' pairs → the researcher freezes a
snapshot and, on the snapshot's row, trains the policy with DPO from the GRPO run's step-10 checkpoint (not
the latest) → the DPO run succeeds, and the
policy it trained is the checkpoint's: its held-out log-probs before its first DPO step are the ones the
checkpoint (loaded here as any run loads a model) gives the same pairs — and not the base model's.

Plumbing, not learning: the runs train the tiny random Llama (`tiny_model_path`); a regex on its words
is the reward (an "h" in its answer: about half of the random words it samples have one), so its
groups' rewards differ and its LoRA updates move the policy."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import new_page, sign_in, wait_until_following
from tests.conftest import PASSWORD
from tests.processes import celery_worker
from webapp.core.management.commands.seed_demo import DEMO_RUN
from webapp.experiments.models import Checkpoint, Run, RunStatus
from webapp.experiments.services import environment_create, rubric_create, run_create
from webapp.review import services as review
from webapp.rollouts.models import MetricPoint

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(900),
]

GRPO_STEPS = 12
START_STEP = 10  # the demo checkpoints every 10 steps: DPO starts from its step-10 policy
TRAINING_TIMEOUT_MS = 360_000  # a worker's start and a run's steps on a busy two-core machine


def demo_made_tiny(model: str) -> dict:
    """The demo run's knobs (LoRA on every linear layer, recomputed activations, mixed precision, a bf16
    sampling copy, its learning rate) at sizes a test can wait for."""
    return {
        **DEMO_RUN["overrides"],
        "model": model,
        "max_steps": GRPO_STEPS,
        "group_size": 2,
        "prompts_per_step": 4,
        "max_new_tokens": 8,
        "max_turns": 1,
        "eval_tasks": 2,
        "eval_every": 5,
        "checkpoint_every": START_STEP,
    }


def held_out_logprobs(model_path: str, rows: list[dict], max_length: int) -> tuple[float, float]:
    """The mean summed log-probs of the held-out pairs' chosen and rejected responses under the model at
    `model_path`, loaded as a run loads its `model` (a LoRA checkpoint: its merged weights)."""
    import torch

    from trainers.learn.pairs import pair_logprobs, tokenize_pair
    from trainers.models import load_model, load_tokenizer

    model = load_model(model_path, "cpu", torch.float32).eval()
    tokenizer = load_tokenizer(model_path)
    pairs = [tokenize_pair(row, tokenizer, max_length) for row in rows]
    with torch.no_grad():
        chosen, rejected = pair_logprobs(model, pairs)
    return float(chosen.mean()), float(rejected.mean())


def test_dpo_from_a_lora_grpo_runs_checkpoint_trains_the_checkpoints_policy(
    project, users, server, browser, page, tiny_model_path
):
    from trainers.learn.dpo import dpo_config, held_out_split, preference_rows
    from webapp.review.exports import dpo_records

    slug = project.slug
    environment = environment_create(
        project=project, name="tiny arithmetic", kind="arithmetic_calculator", config={"max_turns": 1},
        user=users["alice"],
    )  # fmt: skip
    rubric = rubric_create(
        project=project,
        name="says h",
        user=users["alice"],
        spec={
            "aggregation": "weighted_sum",
            "criteria": [{"name": "says h", "kind": "regex", "weight": 1.0, "params": {"pattern": "h"}}],
        },
    )
    with celery_worker("cpu", name="dpo-from-grpo", DASHBOARD_URL=server):
        # 1. The GRPO LoRA run trains on the worker; bob watches it finish.
        grpo, _ = run_create(
            project=project,
            name="tiny demo",
            environment=environment,
            rubric=rubric,
            preset=DEMO_RUN["preset"],
            overrides=demo_made_tiny(tiny_model_path),
            user=users["bob"],
        )
        sign_in(page, server, "bob", PASSWORD)
        page.goto(f"{server}/p/{slug}/runs/{grpo.pk}/")
        wait_until_following(page)
        expect(page.locator("[data-run-status]")).to_have_text("Succeeded", timeout=TRAINING_TIMEOUT_MS)
        grpo.refresh_from_db()
        assert grpo.status == RunStatus.SUCCEEDED, grpo.error_message + grpo.error_traceback
        checkpoint = Checkpoint.objects.get(run=grpo, step=START_STEP)
        assert checkpoint.kind == "adapter"  # the demo trains LoRA
        assert Checkpoint.objects.filter(run=grpo, step=GRPO_STEPS).exists()  # a later one to pass over

        # 2. carol judges the run's groups (every pair: the tiny model's rewards may tie, and the queue
        # form's "Skip pairs with equal rewards" is what a team unticks for that).
        queue = review.queue_create(
            project=project, user=users["bob"], name="tiny demo's pairs", runs=[grpo],
            annotators=[users["carol"]], distinct_rewards=False, seed=1, steps=[START_STEP - 1, START_STEP],
        )  # fmt: skip
        pairs = queue.pairs.count()
        assert pairs >= 5  # enough for the DPO run to hold some out
        carol_context = browser.new_context(viewport={"width": 1360, "height": 900}, bypass_csp=True)
        try:
            carol = new_page(carol_context)
            sign_in(carol, server, "carol", PASSWORD)
            carol.goto(f"{server}/p/{slug}/review/queues/{queue.pk}/annotate/")
            for _ in range(pairs):
                carol.wait_for_function("window.annotateReady === true")
                carol.keyboard.press("1")
                with carol.expect_navigation():
                    carol.keyboard.press("Enter")
            expect(carol.locator("[data-queue-done]")).to_be_visible()
        finally:
            carol_context.close()

        # 3. bob freezes a snapshot and trains the policy with DPO from the GRPO run's step-10 checkpoint.
        page.goto(f"{server}/p/{slug}/review/queues/{queue.pk}/")
        page.click("#snapshot-form button:has-text('Create dataset snapshot')")
        expect(page.locator(".messages")).to_contain_text(f"Dataset v1: {pairs} pairs")
        row = page.locator("#datasets ~ table tbody tr").first
        row.locator("[data-dpo-run] input[name=max_steps]").fill("1")
        start = row.locator("[data-dpo-start]")
        expect(start.locator("option")).to_contain_text(
            [f"tiny demo · step {GRPO_STEPS}", f"tiny demo · step {START_STEP}"]
        )
        start.select_option(label=f"tiny demo · step {START_STEP}")
        row.locator("[data-dpo-run] button:has-text('Train the policy with DPO')").click()
        page.wait_for_url(re.compile(r"/runs/\d+/$"))
        dpo = Run.objects.get(kind="dpo")
        assert (dpo.lineage, dpo.parent_checkpoint_id) == ("init", checkpoint.pk)
        assert dpo.resolved_config["model"] == checkpoint.path
        wait_until_following(page)
        expect(page.locator("[data-run-status]")).to_have_text("Succeeded", timeout=TRAINING_TIMEOUT_MS)
    dpo.refresh_from_db()
    assert dpo.status == RunStatus.SUCCEEDED, dpo.error_message + dpo.error_traceback
    expect(page.locator("[data-checkpoint-step='1']")).to_be_visible()

    # 4. The DPO'd policy is the checkpoint's: before its first step, its held-out pairs' log-probs are
    # the checkpoint's own on those pairs (the worker split them as DPO does; recomputed here).
    knobs = dpo_config({k: v for k, v in dpo.resolved_config.items() if k not in ("kind", "snapshot")})
    _, held = held_out_split(preference_rows(dpo_records(dpo.preference_snapshot)), knobs["eval_fraction"])
    assert held, "the DPO run held no pairs out"

    def at_start(key: str) -> float:
        return MetricPoint.objects.get(run=dpo, key=key, step=0).value

    started = (at_start("eval/dpo/logp_chosen"), at_start("eval/dpo/logp_rejected"))
    from_checkpoint = held_out_logprobs(checkpoint.path, held, knobs["max_length"])
    from_base = held_out_logprobs(tiny_model_path, held, knobs["max_length"])
    assert started == pytest.approx(from_checkpoint, rel=1e-6, abs=1e-5), (started, from_checkpoint)
    # …and the checkpoint is not the base model (the GRPO steps moved it): the equality above says which.
    assert max(abs(a - b) for a, b in zip(from_checkpoint, from_base, strict=True)) > 1e-4, (
        from_checkpoint,
        from_base,
    )
    # The policy starts as its reference: a margin of zero but for float rounding (the reference's
    # log-probs were taken in other passes than the evaluation's).
    assert at_start("eval/dpo/margin") == pytest.approx(0.0, abs=1e-5)

"""The README's screenshots, taken on a real run: the demo project (`manage.py seed_demo`), a short GRPO
run of the bundled SmolLM2-135M on a real Celery worker with the demo's knobs, and real Chromium.

    SCREENSHOTS=1 .venv/bin/python -m pytest tests/browser/test_screenshots.py -m screenshots
    (or: python scripts/screenshots.py)

writes docs/screenshot-*.png: the live run page while the reward rises, a GRPO group, one of its
samples in the token view (coloured by entropy), an evaluation task diffed across checkpoints, and the
annotation page. Skipped unless SCREENSHOTS=1, so the test
suite never rewrites tracked files; it took 7 minutes on the 2-core CPU beside other jobs (22 when they kept it busy)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from django.core.management import call_command

from tests.browser.conftest import elsewhere, new_page, sign_in, wait_until_following
from tests.processes import celery_worker

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.screenshots,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(3600),
    pytest.mark.skipif(os.environ.get("SCREENSHOTS") != "1", reason="set SCREENSHOTS=1 to retake them"),
]

DOCS = Path(__file__).resolve().parents[2] / "docs"
# The demo run's knobs are the bundled model's recommended ones (the learning bench's: lr 2e-5, 48 new
# tokens, group 8 x 2 prompts, the calculator environment without curriculum), on which held-out
# accuracy went 50% -> 100% in 10 steps; enough steps for the reward curve to rise, and few evaluation
# tasks (evaluation before training and at EVAL_STEP give the diff its two checkpoints). One torch
# thread: on a 2-core machine other jobs keep busy, two threads mostly wait for each other. The group,
# diff and annotation shots are taken once the EVAL_STEP evaluation is in, the live page at LIVE_STEP
# (the run still training), and then the run is cancelled from its page.
STEPS = 10
EVAL_STEP = 5
LIVE_STEP = 9
OVERRIDES = {
    "max_steps": STEPS,
    "eval_every": EVAL_STEP,
    "checkpoint_every": EVAL_STEP,
    "eval_tasks": 4,
    "torch_threads": 1,
}
RUN_TIMEOUT_S = 50 * 60


def shoot(page, name: str, *, full_page: bool = False) -> None:
    page.wait_for_timeout(800)  # charts finish their transitions
    page.screenshot(path=str(DOCS / f"screenshot-{name}.png"), full_page=full_page)


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(5)


def test_take_the_readme_screenshots_on_a_real_run(server, browser):
    from webapp.core.management.commands.seed_demo import (
        DEMO_ENVIRONMENT,
        DEMO_PASSWORD,
        DEMO_RUBRIC,
        DEMO_RUN,
        DEMO_USERNAME,
    )
    from webapp.experiments.models import Environment, Rubric, Run
    from webapp.experiments.services import run_create
    from webapp.projects.models import Project
    from webapp.review import services as review_services
    from webapp.rollouts.models import Trajectory

    # Writes that broadcast after their commit run on a thread of their own (Playwright's loop owns this one).
    elsewhere(lambda: call_command("seed_demo"))
    project = Project.objects.get(slug="demo")
    user = project.memberships.get().user
    Run.objects.filter(project=project).delete()  # the seeded, never-queued definition
    environment = Environment.objects.get(project=project, name=DEMO_ENVIRONMENT["name"])
    rubric = Rubric.objects.get(project=project, name=DEMO_RUBRIC["name"])
    context = browser.new_context(viewport={"width": 1360, "height": 900}, bypass_csp=True)
    page = new_page(context)
    sign_in(page, server, DEMO_USERNAME, DEMO_PASSWORD)
    slug = project.slug

    with celery_worker("cpu", name="screenshots", DASHBOARD_URL=server):
        run, _ = elsewhere(
            lambda: run_create(
                project=project,
                environment=environment,
                rubric=rubric,
                user=user,
                name="GRPO on arithmetic",
                preset=DEMO_RUN["preset"],
                overrides={**DEMO_RUN["overrides"], **OVERRIDES},
            )
        )
        evals = Trajectory.objects.filter(run=run, split="eval", sample_index=0)
        wait_for(
            lambda: evals.filter(step=EVAL_STEP).count() >= OVERRIDES["eval_tasks"],
            f"the evaluation at step {EVAL_STEP}",
        )

        # 1. A GRPO group of the latest step whose samples disagree (the learning signal).
        train = Trajectory.objects.filter(run=run, split="train")
        groups: dict[tuple[int, int], list[float]] = {}
        for step, group, reward in train.values_list("step", "group_index", "reward"):
            groups.setdefault((step, group), []).append(reward)
        step, group = max(groups, key=lambda key: (max(groups[key]) - min(groups[key]), key[0]))
        page.goto(f"{server}/p/{slug}/runs/{run.pk}/groups/{step}/{group}/")
        shoot(page, "group")

        # 1b. The token view: the first step's best sample (the untrained policy, still unsure in places),
        # its reply coloured by the policy's entropy per token (the run reports token statistics:
        # `token_stats: auto` for a model this small), the legend in view and the hover card of the token
        # the policy was least sure of.
        best = train.filter(step=1).order_by("-reward", "sample_index").first()
        page.goto(f"{server}/p/{slug}/trajectories/{best.pk}/")
        page.select_option("[data-token-quantity]", "entropy")
        tokens = page.locator(".token-text .token")
        tokens.first.wait_for()
        page.locator("[data-token-controls]").evaluate("el => el.scrollIntoView({block: 'start'})")
        page.evaluate("window.scrollBy(0, -8)")
        # The strongest colour: the alpha of each token's hsla(...) background (token_view.js).
        unsure = tokens.evaluate_all(
            "spans => spans.map(s => parseFloat(s.style.background.split(',').pop()) || 0)"
            ".reduce((best, alpha, i, all) => alpha > all[best] ? i : best, 0)"
        )
        tokens.nth(unsure).hover()
        shoot(page, "tokens")

        # 2. One evaluation task before training and at the checkpoint, diffed.
        before = dict(evals.filter(step=0).values_list("task_id", "reward"))
        after = dict(evals.filter(step=EVAL_STEP).values_list("task_id", "reward"))
        task = max(before, key=lambda t: (after.get(t, 0) - before[t], t))
        page.goto(f"{server}/p/{slug}/runs/{run.pk}/tasks/diff/?task={task}&b={EVAL_STEP}&split=eval")
        page.wait_for_url(re.compile(r"/diff/"))
        shoot(page, "diff")

        # 3. The annotation page of a preference queue over the run's groups.
        queue = elsewhere(
            lambda: review_services.queue_create(
                project=project,
                user=user,
                name="Which answer is better?",
                runs=[run],
                annotators=[user],
                distinct_rewards=True,
                instructions="Prefer the answer that is right and uses the calculator once.",
            )
        )
        page.goto(f"{server}/p/{slug}/review/queues/{queue.pk}/annotate/")
        page.wait_for_function("window.annotateReady === true")
        page.keyboard.press("1")
        shoot(page, "annotate")

        # 4. The live page, the run still training: reward curve, evaluation, phase, the rollout feed.
        wait_for(lambda: Run.objects.get(pk=run.pk).current_step >= LIVE_STEP, f"step {LIVE_STEP}")
        page.goto(f"{server}/p/{slug}/runs/{run.pk}/")
        wait_until_following(page)
        page.wait_for_function(
            f"(document.getElementById('chart-reward').data[0] || {{x: []}}).x.length >= {LIVE_STEP}"
        )
        shoot(page, "live")

        # Then stop it from its page, through the confirm dialog.
        page.click("[data-run-action=cancel] button")
        page.click("[data-cancel-dialog-confirm]")
        page.wait_for_function(
            "['Cancelled', 'Succeeded'].includes(document.querySelector('[data-live-status]').textContent)",
            timeout=RUN_TIMEOUT_S * 1000,
        )
    context.close()

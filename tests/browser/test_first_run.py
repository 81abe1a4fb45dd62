"""A researcher's first session, in real headless Chromium: sign in, define an environment and a
rubric (checking it with the preview), launch a run and find it in the list."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tests.browser.conftest import elsewhere, sign_in
from webapp.experiments.models import Environment, Rubric, Run
from webapp.projects.services import project_create


@pytest.fixture
def researcher(transactional_db):
    user = get_user_model().objects.create_user("rosa", "rosa@example.com", "a-long-browser-password")
    project = project_create(name="Tool-using agents", owner=user)
    return user, project


def test_a_researcher_defines_and_launches_a_first_run(researcher, server, page):
    user, project = researcher
    sign_in(page, server, "rosa", "a-long-browser-password")
    page.click(f"text={project.name}")
    page.wait_for_url(f"**/p/{project.slug}/")

    # An environment: the config form comes from the kind's JSON schema.
    page.click("text=New environment")
    page.fill("input[name=name]", "Arithmetic, two turns")
    # The kind is already the first one, whose fields are on the page: choosing it again swaps them for
    # fresh ones, so typing waits for that swap (under load it used to land in the old field).
    with page.expect_response(lambda response: "/environments/config-fields/" in response.url):
        page.select_option("select[name=kind]", "arithmetic_calculator")
    page.wait_for_load_state("networkidle")
    page.fill("input[name=config-max_turns]", "99")  # beyond the schema's maximum
    page.click("button[type=submit]")
    page.wait_for_selector(".errorlist")
    assert Environment.objects.count() == 0
    page.fill("input[name=config-max_turns]", "2")
    page.click("button[type=submit]")
    page.wait_for_url("**/environments/*/")
    assert Environment.objects.get().latest_version.config["max_turns"] == 2

    # A rubric, checked with the preview before saving.
    page.goto(f"{server}/p/{project.slug}/rubrics/new/")
    page.fill("input[name=name]", "Correct answers")
    page.fill("input[name=criteria-0-name]", "correct")
    page.select_option("select[name=criteria-0-kind]", "numeric_match")
    page.wait_for_selector("[name^=criteria-0-params-]")
    page.fill("textarea[name=preview-transcript]", "user: What is 2 + 2?\nassistant: <answer>4</answer>")
    page.fill("input[name=preview-answer]", "4")
    page.click("text=Preview score")
    page.wait_for_selector(".preview-table")
    assert "correct" in page.inner_text(".preview-table")
    page.click("button[type=submit]:has-text('Create rubric')")
    page.wait_for_url("**/rubrics/*/")
    assert Rubric.objects.get().name == "Correct answers"

    # A run: the DAPO preset fills the knobs, every knob stays editable.
    page.goto(f"{server}/p/{project.slug}/runs/new/")
    page.fill("input[name=name]", "DAPO, first try")
    page.select_option("select[name=preset]", "dapo")
    assert page.input_value("input[name=knob-clip_high]") == "0.28"
    page.click("details:has(input[name=knob-max_steps]) > summary")  # open the knob's group
    page.fill("input[name=knob-max_steps]", "25")
    page.click("button[type=submit]:has-text('Launch run')")
    page.wait_for_url("**/runs/*/")
    run = Run.objects.get()
    assert run.name == "DAPO, first try" and run.preset == "dapo" and run.overrides["max_steps"] == 25

    page.goto(f"{server}/p/{project.slug}/runs/")
    assert "DAPO, first try" in page.inner_text("table")
    assert "Queued" in page.inner_text("table")

    # A trajectory the run stored previews, with the rubric that scored it, to its stored total: the
    # preview reads the trajectory's own answer and environment reward, not the answer typed in the form.
    from webapp.rollouts.ingest import ingest_batch
    from webapp.rollouts.models import Trajectory

    item = {
        "group": 0,
        "sample": 0,
        "task_id": "add-2-2",
        "prompt": "What is 2 + 2?",
        "answer": "4",
        "env_reward": 0.0,
        "reward": 1.0,
        "components": [
            {"name": "correct", "kind": "numeric_match", "raw": 1.0, "weight": 1.0, "weighted": 1.0}
        ],
        "turns": [
            {"role": "user", "text": "What is 2 + 2?"},
            {"role": "assistant", "text": "<answer>4</answer>"},
        ],
    }
    elsewhere(
        lambda: ingest_batch(
            run=run, payload={"events": [{"seq": 1, "type": "trajectories", "step": 1, "items": [item]}]}
        )
    )
    stored = Trajectory.objects.get(run=run)
    page.goto(f"{server}/p/{project.slug}/rubrics/{Rubric.objects.get().pk}/edit/")
    page.fill("input[name=preview-trajectory]", str(stored.pk))
    page.fill("input[name=preview-answer]", "5")  # not this trajectory's answer: the preview ignores it
    page.click("text=Preview score")
    page.wait_for_selector("[data-preview-total]")
    assert page.inner_text("[data-preview-total]") == f"{stored.reward:.4f}"
    assert page.inner_text("[data-preview-answer]") == "4"

"""Training-Free GRPO through the dashboard: launched from the form and the API like any run, its
experience library stored per step from the run's events, and each trajectory page naming the
experiences that were in its prompt."""

from __future__ import annotations

import json

from django.urls import reverse

from tests.webapp.experiments.test_pages_runs import choose_preset, launch_form
from tests.webapp.experiments.test_pages_runs import url as run_url
from tests.webapp.factories import make_trajectory
from tests.webapp.html_forms import field_errors
from webapp.experiments.models import Run
from webapp.recipes.models import ExperienceLibraryStep
from webapp.rollouts.models import RunEvent


def test_the_form_launches_a_training_free_run_and_refuses_a_bad_knob(
    client_for, project, environment, rubric
):
    bob = client_for("bob")
    posted, presets, keys = launch_form(bob, project)
    assert "Training-Free GRPO" in bob.get(run_url("run_create", project)).content.decode()
    choose_preset(posted, "training_free_grpo", presets, keys)
    posted.update({"name": "bad library", "knob-experience_max_items": "0"})
    refused = bob.post(run_url("run_create", project), posted)
    assert field_errors(refused.content, "knob-experience_max_items") == [
        "Experience library size must be 1 or more (got 0)."
    ]
    posted.update({"name": "library", "knob-experience_max_items": "12"})
    response = bob.post(run_url("run_create", project), posted)
    run = Run.objects.get(name="library")
    assert response.status_code == 302
    assert run.preset == "training_free_grpo"
    assert run.resolved_config["experience_max_items"] == 12
    assert run.resolved_config["group_size"] == 5  # the paper's group of 5, from the preset


def test_the_api_launches_one_and_says_what_is_wrong(client_for, project, environment, rubric):
    bob = client_for("bob")
    api = f"/api/projects/{project.slug}/runs/"
    body = {"name": "tf", "environment": environment.pk, "rubric": rubric.pk, "preset": "training_free_grpo"}
    bad = bob.post(
        api,
        json.dumps({**body, "overrides": {"num_rollout_workers": 2}}),
        content_type="application/json",
    )
    assert bad.status_code == 400
    assert "Training-Free GRPO generates in the worker's process" in json.dumps(bad.json())
    created = bob.post(
        api,
        json.dumps({**body, "overrides": {"experience_model": "policy"}}),
        content_type="application/json",
    )
    assert created.status_code == 201, created.content
    assert created.json()["resolved_config"]["preset"] == "training_free_grpo"


def experience(seq: int, step: int, items: list[dict], edits: list[dict]) -> dict:
    return {
        "seq": seq,
        "type": "experience",
        "step": step,
        "items": items,
        "edits": edits,
        "groups_asked": len(edits),
        "prompt_tokens": 90,
        "completion_tokens": 12,
    }


def test_the_library_is_stored_per_step_and_each_trajectory_names_its_experiences(
    client, client_for, project, environment, rubric, users
):
    from webapp.experiments.services import run_create

    run, token = run_create(
        project=project,
        name="tf",
        environment=environment,
        rubric=rubric,
        preset="training_free_grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )
    g1 = {"id": "G1", "text": "Check the sum <before> answering."}
    events = [
        experience(1, 0, [], []),
        experience(2, 1, [g1], [{"op": "add", "id": "G1", "text": g1["text"]}]),
    ]
    response = client.post(
        f"/api/runs/{run.pk}/events",
        json.dumps({"events": events}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 200, response.content
    stored = ExperienceLibraryStep.objects.get(run=run, step=1)
    assert stored.summary()["counts"] == {"added": 1, "modified": 0, "deleted": 0, "refused": 0}
    assert stored.edits[0]["applied"] is True  # the wire's default, filled in
    live = RunEvent.objects.get(run=run, seq=2).summary
    assert live["items"] == [g1] and live["step"] == 1 and live["prompt_tokens"] == 90

    bob = client_for("bob")
    first = make_trajectory(run, step=1)  # generated before step 1's edits: the empty library
    second = make_trajectory(run, step=2, task_id="add-8")
    evaluated = make_trajectory(run, step=1, split="eval", task_id="add-9")

    def page(trajectory) -> str:
        return bob.get(
            reverse("rollouts:trajectory_detail", args=[project.slug, trajectory.pk])
        ).content.decode()

    assert "the experience library was still empty" in page(first)
    for html in (page(second), page(evaluated)):
        assert 'data-experience-id="G1"' in html
        assert "Check the sum &lt;before&gt; answering." in html  # model output, escaped


def test_a_run_without_a_library_shows_no_panel(client_for, project, run):
    trajectory = make_trajectory(run, step=1)
    html = client_for("bob").get(reverse("rollouts:trajectory_detail", args=[project.slug, trajectory.pk]))
    assert "data-experiences-in-prompt" not in html.content.decode()

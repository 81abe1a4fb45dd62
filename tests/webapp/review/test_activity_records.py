"""The project's activity log records the work around the review too: launches, cancels, new
environment and rubric versions, and reward models (trained, and added to a rubric) — and the activity
page links each to what it is about."""

from __future__ import annotations

from django.urls import reverse

from tests.webapp.rewards_factories import direct_snapshot, preference_texts
from webapp.experiments.services import environment_update, rubric_update, run_create, run_request_cancel
from webapp.review.models import Activity
from webapp.rewards import services as reward_services
from webapp.rewards.models import RewardModel


def log(project) -> list[tuple[str, str, dict]]:
    return [
        (a.verb, a.actor.username if a.actor else "", a.data)
        for a in Activity.objects.filter(project=project).order_by("id")
    ]


def test_launches_cancels_and_new_versions_are_recorded(project, environment, rubric, users):
    before = Activity.objects.count()

    run, _ = run_create(
        project=project,
        name="try lr",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )
    run_request_cancel(run=run, user=users["alice"])
    latest = environment.versions.order_by("-number").first()
    environment_update(environment=environment, user=users["bob"], kind=latest.kind, config=latest.config)
    rubric_spec = rubric.versions.order_by("-number").first().spec
    rubric_update(
        rubric=rubric, user=users["bob"], spec={**rubric_spec, "aggregation": "group_normalized_sum"}
    )

    assert log(project)[before:] == [
        ("run.launched", "bob", {"run_id": run.pk, "name": "try lr"}),
        ("run.cancelled", "alice", {"run_id": run.pk, "name": "try lr"}),
        # the unchanged environment made no version: nothing to record
        ("rubric.versioned", "bob", {"rubric_id": rubric.pk, "name": rubric.name, "version": 2}),
    ]


def test_the_fixtures_own_first_versions_are_recorded(project, environment, rubric):
    verbs = [verb for verb, _actor, _data in log(project)]
    assert "environment.versioned" in verbs and "rubric.versioned" in verbs


def test_reward_models_are_recorded_when_trained_and_when_added_to_a_rubric(project, rubric, users):
    snapshot = direct_snapshot(project=project, rows=preference_texts(6), user=users["bob"])
    reward_model = reward_services.reward_model_train(
        snapshot=snapshot, user=users["bob"], name="style", dispatch=False
    )
    assert reward_services.reward_model_claim(reward_model.pk, worker="w1")
    assert reward_services.reward_model_finish(
        reward_model.pk,
        path="/srv/reward_models/rm-1",
        metrics={"held_out_accuracy": 0.9, "n_eval": 60},
        curve=[],
    )
    reward_services.reward_model_register(
        reward_model=RewardModel.objects.get(pk=reward_model.pk), rubric=rubric, weight=0.5, user=users["bob"]
    )

    recorded = [(verb, data) for verb, _actor, data in log(project)]
    assert ("reward_model.trained", {"reward_model_id": reward_model.pk, "name": "style v1"}) in recorded
    assert recorded[-1] == (
        "reward_model.added",
        {"rubric_id": rubric.pk, "name": rubric.name, "version": 2},
    )
    assert recorded[-2][0] == "rubric.versioned"


def test_the_activity_page_links_runs_and_versions(client_for, project, run, rubric):
    html = client_for("dave").get(reverse("review:activity", args=[project.slug])).content.decode()

    assert "launched the run" in html
    assert f'href="{reverse("experiments:run_detail", args=[project.slug, run.pk])}"' in html
    assert f'href="{reverse("experiments:rubric_detail", args=[project.slug, rubric.pk])}"' in html
    assert "saved the rubric" in html and "· v1" in html

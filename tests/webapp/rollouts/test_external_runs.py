"""Registering an external run through the JSON API: who may, what it pins, and that its token reports."""

from __future__ import annotations

import json

import pytest

from webapp.experiments.models import Run, RunOrigin, RunStatus

URL = "/api/projects/agents/external-runs/"


def create(client, body, **extra):
    return client.post(URL, data=json.dumps(body), content_type="application/json", **extra)


@pytest.mark.parametrize("name", ["alice", "bob"])
def test_it_lets_researchers_and_owners_register_an_external_run(client_for, project, name):
    response = create(
        client_for(name), {"name": "trl grpo", "algorithm": "trl-grpo", "config": {"beta": 0.04}}
    )
    assert response.status_code == 201, response.content
    body = response.json()
    run = Run.objects.get(pk=body["id"])
    assert run.origin == RunOrigin.EXTERNAL and run.is_external
    assert run.status == RunStatus.RUNNING and run.started_at is not None
    assert run.environment_version is None and run.rubric_version is None
    assert run.environment_label == "external"
    assert run.preset == "trl-grpo" and run.resolved_config["beta"] == 0.04
    assert body["ingest_token"].startswith("rsr_")
    assert body["events_url"].endswith(f"/api/runs/{run.pk}/events")
    assert body["page_url"].endswith(f"/p/agents/runs/{run.pk}/")


def test_its_token_reports_events(client_for, project):
    body = create(client_for("bob"), {"name": "script"}).json()
    events = {
        "events": [
            {"seq": 1, "type": "metrics", "step": 3, "values": {"reward/mean": 0.5}},
            {"seq": 2, "type": "status", "status": "SUCCEEDED"},
        ]
    }
    response = client_for("bob").post(
        f"/api/runs/{body['id']}/events",
        data=json.dumps(events),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {body['ingest_token']}",
    )
    assert response.status_code == 200, response.content
    run = Run.objects.get(pk=body["id"])
    assert run.status == RunStatus.SUCCEEDED and run.current_step == 3 and run.last_reward == 0.5


@pytest.mark.parametrize("name", ["carol", "dave"])
def test_annotators_and_viewers_are_forbidden(client_for, project, name):
    response = create(client_for(name), {"name": "nope"})
    assert response.status_code == 403
    assert response.json()["error"] == "forbidden"
    assert not Run.objects.exists()


def test_outsiders_learn_nothing(client_for, project):
    assert create(client_for("eve"), {"name": "nope"}).status_code == 404
    assert create(client_for("eve"), {"name": "nope"}).json()["error"] == "not_found"
    assert not Run.objects.exists()


def test_anonymous_callers_must_authenticate(client, project):
    assert create(client, {"name": "nope"}).status_code in (401, 403)


def test_it_accepts_a_personal_api_token(client, users, project):
    from webapp.accounts.services import api_token_create

    _token, raw = api_token_create(user=users["bob"], name="laptop")
    response = create(client, {"name": "token run"}, HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 201, response.content
    assert Run.objects.get().created_by == users["bob"]


def test_it_pins_an_environment_and_rubric_of_the_project(client_for, project, environment, rubric):
    response = create(
        client_for("bob"), {"name": "pinned", "environment": environment.pk, "rubric": rubric.pk}
    )
    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    assert run.environment_version == environment.latest_version
    assert run.rubric_version == rubric.latest_version
    assert run.resolved_config["environment"]["name"] == "arith"


def test_it_refuses_another_projects_environment_and_bad_fields(client_for, users, project):
    from webapp.experiments.services import environment_create
    from webapp.projects.services import project_create

    other = project_create(name="Other", owner=users["eve"])
    foreign = environment_create(
        project=other, name="e", kind="arithmetic_calculator", config={}, user=users["eve"]
    )
    response = create(client_for("bob"), {"name": "x", "environment": foreign.pk})
    assert response.status_code == 400
    assert response.json()["fields"] == {"environment": ["No such environment in this project."]}
    response = create(client_for("bob"), {"name": "x", "config": [1, 2]})
    assert response.status_code == 400 and "config" in response.json()["fields"]
    response = create(client_for("bob"), {"name": ""})
    assert "name" in response.json()["fields"]
    assert not Run.objects.exists()


def test_an_external_run_without_pins_renders_on_the_run_pages(client_for, project):
    client = client_for("bob")
    run_id = create(client, {"name": "external one"}).json()["id"]
    listing = client.get("/p/agents/runs/")
    assert listing.status_code == 200 and "external · external" in listing.content.decode()
    detail = client.get(f"/p/agents/runs/{run_id}/")
    assert detail.status_code == 200 and "the external trainer" in detail.content.decode()
    assert client.get(f"/p/agents/compare/?runs={run_id}").status_code == 200


def test_an_external_run_cannot_be_resumed_or_forked_here(client_for, project, users):
    from django.core.exceptions import ValidationError

    from webapp.experiments.models import Checkpoint
    from webapp.experiments.services import run_fork, run_resume

    run = Run.objects.get(pk=create(client_for("bob"), {"name": "ext"}).json()["id"])
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
    run.refresh_from_db()
    Checkpoint.objects.create(run=run, step=10, path="/ckpt/10")
    for attempt in (
        lambda: run_resume(run=run, user=users["bob"]),
        lambda: run_fork(run=run, user=users["bob"], overrides={}),
    ):
        with pytest.raises(ValidationError) as refused:
            attempt()
        assert "origin" in refused.value.message_dict


def test_external_runs_without_pins_are_listed_and_shown_by_the_api(client_for, project, users):
    from webapp.experiments.models import Run
    from webapp.rollouts.external import external_run_create

    run, _ = external_run_create(project=project, user=users["bob"], name="from TRL")
    client = client_for("dave")
    listed = client.get(f"/api/projects/{project.slug}/runs/").json()["results"]
    assert [(r["name"], r["origin"], r["environment"], r["rubric"]) for r in listed] == [
        ("from TRL", "external", None, None)
    ]
    assert client.get(f"/api/runs/{run.pk}/").json()["origin"] == Run.objects.get(pk=run.pk).origin

"""Environments, rubrics and runs through the JSON API: bob (researcher) defines and launches; bad input
is refused with field paths that point into the request body, and nothing is written."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from webapp.accounts.models import hash_token
from webapp.experiments.models import Environment, EnvironmentVersion, Rubric, RubricVersion, Run, RunStatus
from webapp.projects.models import Membership, Project

# The `rubric` fixture's spec (tests/conftest.py).
RUBRIC_SPEC = {
    "aggregation": "weighted_sum",
    "criteria": [
        {"name": "correct", "kind": "numeric_match", "weight": 1.0, "params": {}},
        {"name": "format", "kind": "regex", "weight": 0.2, "params": {"pattern": "<answer>.*</answer>"}},
    ],
}


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def bob(users) -> APIClient:
    client = APIClient()
    client.force_login(users["bob"])
    return client


def counts() -> dict[str, int]:
    models = (Project, Membership, Environment, EnvironmentVersion, Rubric, RubricVersion, Run)
    return {m.__name__: m.objects.count() for m in models}


def post(client: APIClient, url: str, body) -> object:
    return client.post(url, json.dumps(body), content_type="application/json")


def patch(client: APIClient, url: str, body) -> object:
    return client.patch(url, json.dumps(body), content_type="application/json")


# --- environments -------------------------------------------------------------------------------------


def test_bob_creates_an_environment_and_edits_it_into_a_new_version(bob, project):
    url = f"/api/projects/{project.slug}/environments/"
    created = post(bob, url, {"name": "countdown", "kind": "countdown", "config": {"num_numbers": 4}})
    assert created.status_code == 201, created.content
    env = created.json()
    assert env["name"] == "countdown"
    assert env["created_by"] == "bob"
    assert env["latest_version"]["number"] == 1
    assert env["latest_version"]["config"] == {"num_numbers": 4}
    assert env["version_count"] == 1

    edited = patch(bob, f"{url}{env['id']}/", {"config": {"num_numbers": 5}, "note": "harder"})
    assert edited.status_code == 200, edited.content
    assert edited.json()["latest_version"]["number"] == 2
    assert edited.json()["latest_version"]["note"] == "harder"
    assert edited.json()["latest_version"]["kind"] == "countdown"  # kept when left out

    renamed = patch(bob, f"{url}{env['id']}/", {"name": "countdown-5", "description": "five numbers"})
    assert renamed.json()["latest_version"]["number"] == 2  # same config: no new version
    assert renamed.json()["name"] == "countdown-5"

    versions = bob.get(f"{url}{env['id']}/versions/").json()
    assert [v["number"] for v in versions["results"]] == [2, 1]
    assert versions["results"][1]["config"] == {"num_numbers": 4}

    listed = bob.get(url).json()
    assert listed["count"] == 1
    assert listed["results"][0]["version_count"] == 2


def test_environment_list_is_paginated(bob, project, users):
    from webapp.experiments.services import environment_create

    for i in range(5):
        environment_create(
            project=project, name=f"env-{i}", kind="arithmetic_calculator", config={}, user=users["alice"]
        )
    page = bob.get(f"/api/projects/{project.slug}/environments/?limit=2&offset=2").json()
    assert page["count"] == 5
    assert [e["name"] for e in page["results"]] == ["env-2", "env-3"]
    assert "offset=4" in page["next"]


def test_environment_of_another_project_is_404(bob, project, users):
    from webapp.experiments.services import environment_create
    from webapp.projects.services import project_create

    elsewhere = project_create(name="Elsewhere", owner=users["bob"])
    foreign = environment_create(project=elsewhere, name="x", kind="countdown", config={}, user=users["bob"])
    assert bob.get(f"/api/projects/{project.slug}/environments/{foreign.pk}/").status_code == 404


# --- rubrics ------------------------------------------------------------------------------------------


def test_bob_creates_a_rubric_and_a_new_version(bob, project):
    url = f"/api/projects/{project.slug}/rubrics/"
    created = post(bob, url, {"name": "exact", "description": "d", **RUBRIC_SPEC})
    assert created.status_code == 201, created.content
    rubric = created.json()
    assert rubric["latest_version"]["spec"] == RUBRIC_SPEC
    assert rubric["description"] == "d"

    criteria = [dict(c) for c in RUBRIC_SPEC["criteria"]]
    criteria[1]["weight"] = 0.5
    edited = patch(bob, f"{url}{rubric['id']}/", {"criteria": criteria, "note": "less format"})
    assert edited.status_code == 200, edited.content
    latest = edited.json()["latest_version"]
    assert latest["number"] == 2
    assert latest["spec"]["criteria"][1]["weight"] == 0.5
    assert latest["spec"]["aggregation"] == "weighted_sum"  # kept when left out

    versions = bob.get(f"{url}{rubric['id']}/versions/").json()["results"]
    assert [v["number"] for v in versions] == [2, 1]


# --- runs ---------------------------------------------------------------------------------------------


def test_bob_launches_a_run_and_gets_its_ingestion_token_once(
    bob, project, environment, rubric, django_capture_on_commit_callbacks
):
    url = f"/api/projects/{project.slug}/runs/"
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        created = post(
            bob,
            url,
            {
                "name": "dapo run",
                "environment": environment.pk,
                "rubric": rubric.pk,
                "preset": "dapo",
                "overrides": {"group_size": 4},
            },
        )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["status"] == RunStatus.QUEUED
    assert body["ingest_token"].startswith("rsr_")
    run = Run.objects.get(pk=body["id"])
    assert run.ingest_token_hash == hash_token(body["ingest_token"])  # only the hash is stored
    assert body["resolved_config"]["group_size"] == 4
    assert body["resolved_config"]["clip_high"] == 0.28  # from the preset
    assert body["resolved_config"]["environment"]["name"] == environment.name
    assert body["environment"] == {"id": environment.pk, "name": environment.name, "version": 1}
    assert body["rubric"] == {"id": rubric.pk, "name": rubric.name, "version": 1}
    assert len(callbacks) >= 1  # dispatched to the queue only once the transaction commits

    again = bob.get(f"/api/runs/{body['id']}/").json()
    assert "ingest_token" not in again
    assert "ingest_token_hash" not in again
    listed = bob.get(url).json()["results"]
    assert [r["id"] for r in listed] == [body["id"]]
    assert "resolved_config" not in listed[0]


def test_runs_can_be_filtered_by_status(bob, project, run):
    url = f"/api/projects/{project.slug}/runs/"
    assert bob.get(f"{url}?status=QUEUED").json()["count"] == 1
    assert bob.get(f"{url}?status=RUNNING").json()["count"] == 0
    bad = bob.get(f"{url}?status=SLEEPING")
    assert bad.status_code == 400
    assert list(bad.json()["fields"]) == ["status"]


def test_cancelling_a_queued_run_cancels_it_at_once(bob, run):
    response = bob.post(f"/api/runs/{run.pk}/cancel/")
    assert response.status_code == 200
    assert response.json()["result"] == "CANCELLED"
    assert response.json()["run"]["status"] == "CANCELLED"
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and run.cancel_requested


def test_cancelling_a_running_run_asks_the_trainer(bob, run):
    from webapp.experiments.services import run_transition

    assert run_transition(run.pk, RunStatus.STARTING)
    assert run_transition(run.pk, RunStatus.RUNNING)
    response = bob.post(f"/api/runs/{run.pk}/cancel/")
    assert response.json()["result"] == "cancel_requested"
    assert response.json()["run"]["status"] == "RUNNING"
    assert response.json()["run"]["cancel_requested"] is True


def test_a_finished_run_cannot_be_cancelled(bob, run):
    bob.post(f"/api/runs/{run.pk}/cancel/")
    again = bob.post(f"/api/runs/{run.pk}/cancel/")
    assert again.status_code == 400
    assert list(again.json()["fields"]) == ["status"]


# --- bad input: exact field paths, nothing written ------------------------------------------------------

ENV = "environments"
RUB = "rubrics"
RUN = "runs"
CRITERION = {"name": "exact", "kind": "exact_match", "weight": 1.0}

BAD_INPUT = [
    # (what, collection, body, expected field paths)
    (
        "env config out of range",
        ENV,
        {"name": "e", "kind": "arithmetic_calculator", "config": {"max_turns": 0}},
        ["config.max_turns"],
    ),
    (
        "env config wrong type",
        ENV,
        {"name": "e", "kind": "countdown", "config": {"num_numbers": "four"}},
        ["config.num_numbers"],
    ),
    ("env config unknown key", ENV, {"name": "e", "kind": "countdown", "config": {"bogus": 1}}, ["config"]),
    ("env config not an object", ENV, {"name": "e", "kind": "countdown", "config": [1, 2]}, ["config"]),
    ("env unknown kind", ENV, {"name": "e", "kind": "chess", "config": {}}, ["kind"]),
    ("env missing kind", ENV, {"name": "e"}, ["kind"]),
    ("env blank name", ENV, {"name": "  ", "kind": "countdown"}, ["name"]),
    ("env name not a string", ENV, {"name": {"x": 1}, "kind": "countdown"}, ["name"]),
    ("env duplicate name", ENV, {"name": "arith", "kind": "countdown"}, ["name"]),
    (
        "rubric unknown criterion kind",
        RUB,
        {"name": "r", "criteria": [CRITERION, {**CRITERION, "name": "b", "kind": "vibes"}]},
        ["criteria.1.kind"],
    ),
    (
        "rubric negative weight",
        RUB,
        {"name": "r", "criteria": [CRITERION, {**CRITERION, "name": "b", "weight": -1}]},
        ["criteria.1.weight"],
    ),
    (
        "rubric bad params",
        RUB,
        {
            "name": "r",
            "criteria": [{"name": "fmt", "kind": "regex", "weight": 1, "params": {"pattern": "(unclosed"}}],
        },
        ["criteria.0.params.pattern"],
    ),
    (
        "rubric unknown aggregation",
        RUB,
        {"name": "r", "aggregation": "vote", "criteria": [CRITERION]},
        ["aggregation"],
    ),
    ("rubric no criteria", RUB, {"name": "r", "criteria": []}, ["criteria"]),
    (
        "rubric unknown spec field",
        RUB,
        {"name": "r", "criteria": [CRITERION], "temperature": 2},
        ["non_field_errors"],
    ),
    ("run unknown preset", RUN, {"preset": "ppo-xl"}, ["preset"]),
    ("run knob out of range", RUN, {"overrides": {"max_turns": -1}}, ["overrides.max_turns"]),
    ("run knob wrong type", RUN, {"overrides": {"learning_rate": "fast"}}, ["overrides.learning_rate"]),
    ("run unknown knob", RUN, {"overrides": {"warp_speed": 9}}, ["overrides"]),
    (
        "run knobs that disagree",
        RUN,
        {"overrides": {"max_staleness": 1}},
        ["overrides.max_staleness"],
    ),
    ("run overrides not an object", RUN, {"overrides": [1]}, ["overrides"]),
    ("run unknown queue", RUN, {"queue": "tpu"}, ["queue"]),
    ("run missing environment", RUN, {"environment": None}, ["environment"]),
    ("run environment of another project", RUN, {"environment": "foreign"}, ["environment"]),
    ("run blank name", RUN, {"name": ""}, ["name"]),
]


@pytest.mark.parametrize("what, collection, body, paths", BAD_INPUT, ids=[case[0] for case in BAD_INPUT])
def test_bad_input_is_refused_with_field_paths_and_writes_nothing(
    what, collection, body, paths, bob, project, environment, rubric, users
):
    if collection == RUN:
        from webapp.experiments.services import environment_create
        from webapp.projects.services import project_create

        foreign = environment_create(
            project=project_create(name="Elsewhere", owner=users["bob"]),
            name="x",
            kind="countdown",
            config={},
            user=users["bob"],
        )
        body = {"name": "r", "environment": environment.pk, "rubric": rubric.pk, **body}
        if body["environment"] is None:
            del body["environment"]
        elif body["environment"] == "foreign":
            body["environment"] = foreign.pk
    before = counts()

    response = post(bob, f"/api/projects/{project.slug}/{collection}/", body)

    assert response.status_code == 400, response.content
    error = response.json()
    assert error["error"] == "validation_failed"
    assert sorted(error["fields"]) == sorted(paths), error
    assert all(error["fields"][p] and all(isinstance(m, str) for m in error["fields"][p]) for p in paths)
    assert counts() == before


BAD_UPDATES = [
    (ENV, {"config": {"max_turns": 99}}, ["config.max_turns"]),
    (ENV, {"kind": "nope"}, ["kind"]),
    (ENV, {"name": ""}, ["name"]),
    (RUB, {"criteria": [CRITERION, {**CRITERION, "name": "b", "weight": -0.5}]}, ["criteria.1.weight"]),
    (RUB, {"criteria": [{**CRITERION, "kind": "vibes"}]}, ["criteria.0.kind"]),
]


@pytest.mark.parametrize("collection, body, paths", BAD_UPDATES)
def test_bad_updates_make_no_new_version(collection, body, paths, bob, project, environment, rubric):
    target = environment if collection == ENV else rubric
    before = counts()
    response = patch(bob, f"/api/projects/{project.slug}/{collection}/{target.pk}/", body)
    assert response.status_code == 400, response.content
    assert sorted(response.json()["fields"]) == paths
    assert counts() == before
    target.refresh_from_db()
    assert target.name in ("arith", "correctness")


@pytest.mark.parametrize("collection", [ENV, RUB, RUN])
def test_malformed_json_is_400_malformed_json(collection, bob, project, environment, rubric):
    before = counts()
    response = bob.post(
        f"/api/projects/{project.slug}/{collection}/",
        '{"name": "x", "config": {',
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["error"] == "malformed_json"
    assert "JSON" in response.json()["detail"]
    assert counts() == before


def test_a_json_array_is_not_a_body(bob, project):
    response = post(bob, f"/api/projects/{project.slug}/environments/", [{"name": "x"}])
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["non_field_errors"]


def test_form_encoded_bodies_are_415(bob, project):
    response = bob.post(f"/api/projects/{project.slug}/environments/", {"name": "x", "kind": "countdown"})
    assert response.status_code == 415
    assert response.json()["error"] == "unsupported_media_type"
    assert not Environment.objects.filter(name="x").exists()


# --- lists stay a fixed number of queries however long they get --------------------------------------------


@pytest.mark.parametrize("collection", [ENV, RUB, RUN])
def test_lists_do_not_query_per_row(
    collection, bob, project, environment, rubric, users, django_assert_max_num_queries
):
    from webapp.experiments import services

    def add(i: int) -> None:
        if collection == ENV:
            services.environment_create(
                project=project, name=f"e{i}", kind="countdown", config={}, user=users["bob"]
            )
        elif collection == RUB:
            services.rubric_create(project=project, name=f"r{i}", spec=RUBRIC_SPEC, user=users["bob"])
        else:
            services.run_create(
                project=project,
                name=f"run {i}",
                environment=environment,
                rubric=rubric,
                preset="grpo",
                overrides={},
                user=users["bob"],
                dispatch=False,
            )

    url = f"/api/projects/{project.slug}/{collection}/"
    add(0)
    with django_assert_max_num_queries(8) as few:
        bob.get(url)
    for i in range(1, 8):
        add(i)
    with django_assert_max_num_queries(len(few.captured_queries)):
        assert len(bob.get(url).json()["results"]) >= 8


def test_a_script_previews_an_environment_config_without_saving_it(signed_in, project):
    bob = signed_in("bob")
    good = bob.post(
        f"/api/projects/{project.slug}/environments/preview/",
        {"kind": "countdown", "config": {"num_numbers": 3}},
        format="json",
    ).json()
    assert good["ok"] and good["task"]["prompt"] and [t["name"] for t in good["tools"]] == ["calculator"]
    bad = bob.post(
        f"/api/projects/{project.slug}/environments/preview/",
        {"kind": "arithmetic_calculator", "config": {"min_digits": 5, "max_digits": 2}},
        format="json",
    )
    assert bad.status_code == 200 and bad.json()["errors"] == {
        "max_digits": ["Must be at least min digits (5), not 2."]
    }
    assert (
        signed_in("dave")
        .post(f"/api/projects/{project.slug}/environments/preview/", {"kind": "countdown"}, format="json")
        .status_code
        == 403
    )

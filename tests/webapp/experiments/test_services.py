"""The write services of every model: projects, memberships, environments and rubrics (versioned),
runs (creation, the status machine and its races, cancellation, progress) and API tokens.

Each write is atomic and validates through the same registries the trainer uses: an error writes
nothing, and says which field (by dotted path) is wrong.
"""

from __future__ import annotations

import threading
from itertools import product
from types import SimpleNamespace

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from rest_framework import exceptions
from rest_framework.test import APIRequestFactory

from tests.webapp.factories import make_run
from webapp.accounts.authentication import ApiTokenAuthentication
from webapp.accounts.models import ApiToken, hash_token
from webapp.accounts.services import api_token_create, api_token_revoke
from webapp.experiments import services
from webapp.experiments.models import (
    ALLOWED_TRANSITIONS,
    FINAL_STATUSES,
    Environment,
    EnvironmentVersion,
    Rubric,
    RubricVersion,
    Run,
    RunKind,
    RunStatus,
)
from webapp.projects.models import Membership, Project, Role
from webapp.projects.services import membership_remove, membership_set, project_create

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


def fields_of(excinfo: pytest.ExceptionInfo[ValidationError]) -> list[str]:
    return sorted(excinfo.value.message_dict)


def counts() -> dict[str, int]:
    models = (Project, Membership, Environment, EnvironmentVersion, Rubric, RubricVersion, Run, ApiToken)
    return {m.__name__: m.objects.count() for m in models}


# --- projects and memberships ----------------------------------------------------------------------------


def test_project_create_makes_the_creator_its_owner_with_a_unique_slug(users):
    first = project_create(name="Agents & Tools", owner=users["alice"], description="d")
    second = project_create(name="Agents & Tools", owner=users["bob"])
    custom = project_create(name="X", owner=users["bob"], slug="My Custom Slug")
    assert (first.slug, second.slug, custom.slug) == ("agents-tools", "agents-tools-2", "my-custom-slug")
    assert Membership.objects.get(project=first).user == users["alice"]
    assert Membership.objects.get(project=first).role == Role.OWNER
    assert first.created_by == users["alice"] and first.description == "d"


def test_a_project_with_a_symbols_only_name_still_gets_a_slug(users):
    assert project_create(name="!!!", owner=users["alice"]).slug == "project"


def test_project_create_needs_a_name(users):
    with pytest.raises(ValidationError) as excinfo:
        project_create(name="  ", owner=users["alice"])
    assert fields_of(excinfo) == ["name"]
    assert not Project.objects.exists()


def test_membership_set_adds_and_changes_roles(project, users):
    added = membership_set(project=project, username="eve", role=Role.VIEWER)
    assert added.role == Role.VIEWER
    changed = membership_set(project=project, username="eve", role=Role.RESEARCHER)
    assert changed.pk == added.pk and changed.role == Role.RESEARCHER
    assert Membership.objects.filter(project=project, user=users["eve"]).count() == 1


@pytest.mark.parametrize(
    "username, role, field", [("mallory", Role.VIEWER, "username"), ("eve", "admin", "role")]
)
def test_membership_set_refuses_unknown_users_and_roles(username, role, field, project):
    before = counts()
    with pytest.raises(ValidationError) as excinfo:
        membership_set(project=project, username=username, role=role)
    assert fields_of(excinfo) == [field]
    assert counts() == before


def test_the_last_owner_stays(project, users):
    alice = Membership.objects.get(project=project, user=users["alice"])
    with pytest.raises(ValidationError) as excinfo:
        membership_set(project=project, username="alice", role=Role.VIEWER)
    assert fields_of(excinfo) == ["role"]
    with pytest.raises(ValidationError):
        membership_remove(project=project, membership_id=alice.pk)
    alice.refresh_from_db()
    assert alice.role == Role.OWNER

    membership_set(project=project, username="bob", role=Role.OWNER)
    membership_remove(project=project, membership_id=alice.pk)
    assert not Membership.objects.filter(pk=alice.pk).exists()


def test_membership_remove_only_removes_members_of_that_project(project, users):
    other = project_create(name="Other", owner=users["eve"])
    eves = Membership.objects.get(project=other)
    with pytest.raises(ValidationError) as excinfo:
        membership_remove(project=project, membership_id=eves.pk)
    assert fields_of(excinfo) == ["membership"]
    dave = Membership.objects.get(project=project, user=users["dave"])
    membership_remove(project=project, membership_id=dave.pk)
    assert not Membership.objects.filter(pk=dave.pk).exists()


# --- environments ------------------------------------------------------------------------------------------


def test_environment_create_stores_version_one(project, users):
    env = services.environment_create(
        project=project,
        name=" countdown ",
        kind="countdown",
        config={"num_numbers": 4},
        user=users["bob"],
        description="d",
    )
    assert env.name == "countdown"
    version = env.latest_version
    assert (version.number, version.kind, version.config, version.created_by) == (
        1,
        "countdown",
        {"num_numbers": 4},
        users["bob"],
    )
    assert version.snapshot() == {
        "name": "countdown",
        "version": 1,
        "kind": "countdown",
        "config": {"num_numbers": 4},
    }


@pytest.mark.parametrize(
    "name, kind, config, fields",
    [
        ("e", "arithmetic_calculator", {"max_turns": 0}, ["config.max_turns"]),
        (
            "e",
            "arithmetic_calculator",
            {"max_turns": 0, "min_digits": "one"},
            ["config.max_turns", "config.min_digits"],
        ),
        ("e", "countdown", {"surprise": True}, ["config"]),
        ("e", "countdown", "not an object", ["config"]),
        ("e", "chess", {}, ["kind"]),
        ("", "countdown", {}, ["name"]),
        ("x" * 121, "countdown", {}, ["name"]),
        ("arith", "countdown", {}, ["name"]),  # the `environment` fixture's name
    ],
)
def test_environment_create_refuses_bad_input_and_writes_nothing(
    name, kind, config, fields, project, environment, users
):
    before = counts()
    with pytest.raises(ValidationError) as excinfo:
        services.environment_create(project=project, name=name, kind=kind, config=config, user=users["bob"])
    assert fields_of(excinfo) == fields
    assert counts() == before


def test_environment_update_versions_only_real_changes(environment, users):
    v1 = environment.latest_version
    same = services.environment_update(
        environment=environment,
        user=users["bob"],
        kind=v1.kind,
        config=v1.config,
        description="only the description",
    )
    assert same.pk == v1.pk
    environment.refresh_from_db()
    assert environment.description == "only the description"

    v2 = services.environment_update(
        environment=environment, user=users["bob"], kind=v1.kind, config={"max_turns": 6}, note="longer"
    )
    assert (v2.number, v2.config, v2.note, v2.created_by) == (2, {"max_turns": 6}, "longer", users["bob"])

    v3 = services.environment_update(environment=environment, user=users["bob"], kind="countdown", config={})
    assert (v3.number, v3.kind) == (3, "countdown")
    v1.refresh_from_db()
    assert (v1.kind, v1.config) == ("arithmetic_calculator", {})  # versions are never edited


def test_environment_update_refuses_bad_input_and_changes_nothing(project, environment, users):
    services.environment_create(project=project, name="taken", kind="countdown", config={}, user=users["bob"])
    before = counts()
    with pytest.raises(ValidationError) as excinfo:
        services.environment_update(
            environment=environment,
            user=users["bob"],
            kind="arithmetic_calculator",
            config={"max_turns": 99},
            name="renamed",
        )
    assert fields_of(excinfo) == ["config.max_turns"]
    with pytest.raises(ValidationError) as excinfo:
        services.environment_update(
            environment=environment,
            user=users["bob"],
            kind="arithmetic_calculator",
            config={"max_turns": 5},
            name="taken",
        )
    assert fields_of(excinfo) == ["name"]
    assert counts() == before
    environment.refresh_from_db()
    assert environment.name == "arith"


def test_runs_keep_the_versions_they_pinned(project, environment, rubric, users):
    first = make_run(project, environment, rubric, users["bob"])
    services.environment_update(
        environment=environment, user=users["bob"], kind="arithmetic_calculator", config={"max_turns": 2}
    )
    services.rubric_update(
        rubric=rubric, user=users["bob"], spec={**RUBRIC_SPEC, "aggregation": "group_normalized_sum"}
    )
    second = make_run(project, environment, rubric, users["bob"])

    first.refresh_from_db()
    assert (first.environment_version.number, first.rubric_version.number) == (1, 1)
    assert first.resolved_config["environment"]["config"] == {}
    assert first.resolved_config["rubric"]["aggregation"] == "weighted_sum"
    assert (second.environment_version.number, second.rubric_version.number) == (2, 2)
    assert second.resolved_config["environment"]["config"] == {"max_turns": 2}
    assert second.resolved_config["rubric"]["aggregation"] == "group_normalized_sum"


# --- rubrics -------------------------------------------------------------------------------------------------


def test_rubric_create_and_update_make_versions(project, users):
    rubric = services.rubric_create(project=project, name="r", spec=RUBRIC_SPEC, user=users["bob"])
    assert rubric.latest_version.number == 1
    assert rubric.latest_version.snapshot() == {"name": "r", "version": 1, **RUBRIC_SPEC}
    same = services.rubric_update(rubric=rubric, user=users["bob"], spec=RUBRIC_SPEC, name="renamed")
    assert same.number == 1
    rubric.refresh_from_db()
    assert rubric.name == "renamed"
    changed = services.rubric_update(
        rubric=rubric, user=users["bob"], spec={**RUBRIC_SPEC, "criteria": RUBRIC_SPEC["criteria"][:1]}
    )
    assert changed.number == 2 and len(changed.spec["criteria"]) == 1


CRITERION = {"name": "exact", "kind": "exact_match", "weight": 1.0}


@pytest.mark.parametrize(
    "spec, fields",
    [
        ({"criteria": [CRITERION, {**CRITERION, "name": "b", "weight": -0.1}]}, ["criteria.1.weight"]),
        ({"criteria": [CRITERION, {**CRITERION, "name": "b", "kind": "vibes"}]}, ["criteria.1.kind"]),
        ({"criteria": [CRITERION, CRITERION]}, ["criteria.1.name"]),
        ({"criteria": [{**CRITERION, "params": {"bogus": 1}}]}, ["criteria.0.params"]),
        ({"criteria": []}, ["criteria"]),
        ({"aggregation": "median", "criteria": [CRITERION]}, ["aggregation"]),
        ("not an object", ["spec"]),
    ],
)
def test_rubric_create_refuses_bad_specs_and_writes_nothing(spec, fields, project, users):
    before = counts()
    with pytest.raises(ValidationError) as excinfo:
        services.rubric_create(project=project, name="r", spec=spec, user=users["bob"])
    assert fields_of(excinfo) == fields
    assert counts() == before


def test_rubric_update_with_a_bad_spec_changes_nothing(rubric, users):
    before = counts()
    with pytest.raises(ValidationError):
        services.rubric_update(
            rubric=rubric, user=users["bob"], name="renamed", spec={"criteria": [{**CRITERION, "weight": -1}]}
        )
    assert counts() == before
    rubric.refresh_from_db()
    assert rubric.name == "correctness"


# --- runs: creation --------------------------------------------------------------------------------------------


def test_run_create_resolves_the_config_and_stores_only_the_token_hash(project, environment, rubric, users):
    run, token = services.run_create(
        project=project,
        name="dapo",
        environment=environment,
        rubric=rubric,
        preset="dapo",
        overrides={"group_size": 4, "max_steps": 7},
        user=users["bob"],
        queue="gpu",
        dispatch=False,
    )
    assert token.startswith("rsr_") and run.ingest_token_hash == hash_token(token)
    assert token not in str(Run.objects.filter(pk=run.pk).values().get())
    config = run.resolved_config
    assert (config["preset"], config["group_size"], config["clip_high"], config["max_steps"]) == (
        "dapo",
        4,
        0.28,
        7,
    )
    assert config["environment"] == environment.latest_version.snapshot()
    assert config["rubric"] == rubric.latest_version.snapshot()
    assert (run.status, run.queue, run.max_steps, run.overrides) == (
        RunStatus.QUEUED,
        "gpu",
        7,
        {"group_size": 4, "max_steps": 7},
    )


@pytest.mark.parametrize(
    "kwargs, fields",
    [
        ({"preset": "ppo-xl"}, ["preset"]),
        ({"overrides": {"max_turns": -1}}, ["config.max_turns"]),
        ({"overrides": {"clip_low": 2, "group_size": 2000}}, ["config.clip_low", "config.group_size"]),
        ({"overrides": {"warp_speed": 9}}, ["config"]),
        ({"overrides": "fast"}, ["overrides"]),
        ({"queue": "tpu"}, ["queue"]),
        ({"name": " "}, ["name"]),
        ({"environment": "foreign"}, ["environment"]),
        ({"rubric": "foreign"}, ["rubric"]),
    ],
)
def test_run_create_refuses_bad_input_and_writes_nothing(kwargs, fields, project, environment, rubric, users):
    other = project_create(name="Other", owner=users["bob"])
    if kwargs.get("environment") == "foreign":
        kwargs["environment"] = services.environment_create(
            project=other, name="e", kind="countdown", config={}, user=users["bob"]
        )
    if kwargs.get("rubric") == "foreign":
        kwargs["rubric"] = services.rubric_create(
            project=other, name="r", spec=RUBRIC_SPEC, user=users["bob"]
        )
    arguments = {
        "project": project,
        "name": "r",
        "environment": environment,
        "rubric": rubric,
        "preset": "grpo",
        "overrides": {},
        "user": users["bob"],
        "dispatch": False,
        **kwargs,
    }
    before = counts()
    with pytest.raises(ValidationError) as excinfo:
        services.run_create(**arguments)
    assert fields_of(excinfo) == fields
    assert counts() == before


def test_a_run_is_queued_only_after_its_transaction_commits(
    project, environment, rubric, users, monkeypatch, django_capture_on_commit_callbacks
):
    from webapp.core.dispatch import Task, celery_app

    queued: list[tuple[int, str]] = []

    def send_task(name, args, queue):  # record instead of publishing: no worker consumes it here
        assert name == Task.EXECUTE_RUN
        queued.append((args[0], queue))
        return SimpleNamespace(id="task-1")

    monkeypatch.setattr(celery_app, "send_task", send_task)
    with django_capture_on_commit_callbacks(execute=True):
        run = make_run(project, environment, rubric, users["bob"], queue="gpu", dispatch=True)
        assert queued == []  # not before the commit
    assert queued == [(run.pk, "gpu")]

    with django_capture_on_commit_callbacks(execute=True), pytest.raises(ValidationError):
        make_run(project, environment, rubric, users["bob"], preset="nope", dispatch=True)
    assert queued == [(run.pk, "gpu")]  # a refused run is never queued


# --- runs: the status machine ----------------------------------------------------------------------------------

ALL_STATUSES = list(RunStatus)


@pytest.mark.parametrize(
    "start, target",
    list(product(ALL_STATUSES, ALL_STATUSES)),
    ids=[f"{a}->{b}" for a, b in product(ALL_STATUSES, ALL_STATUSES)],
)
def test_run_transition_follows_the_status_machine(start, target, run):
    Run.objects.filter(pk=run.pk).update(status=start)
    allowed = target in ALLOWED_TRANSITIONS[start]

    assert services.run_transition(run.pk, target) is allowed

    run.refresh_from_db()
    assert run.status == (target if allowed else start)
    if allowed and target == RunStatus.RUNNING:
        assert run.started_at is not None and run.heartbeat_at is not None
    if allowed and target in FINAL_STATUSES:
        assert run.finished_at is not None
    if not allowed:
        assert run.finished_at is None


def test_final_statuses_are_final():
    assert all(ALLOWED_TRANSITIONS[s] == () for s in FINAL_STATUSES)


def test_run_transition_stores_the_extra_fields(run):
    services.run_transition(run.pk, RunStatus.STARTING, worker="gpu-box-1")
    services.run_transition(run.pk, RunStatus.FAILED, error_message="CUDA OOM", error_traceback="Traceback…")
    run.refresh_from_db()
    assert (run.worker, run.error_message, run.error_traceback) == ("gpu-box-1", "CUDA OOM", "Traceback…")


def test_a_writer_holding_a_stale_status_loses(run):
    """The read-modify-write race: a worker read QUEUED, then the user cancelled. The worker's update
    is conditional on the status it may come from, so it changes nothing."""
    stale = Run.objects.get(pk=run.pk)
    assert stale.status == RunStatus.QUEUED
    assert services.run_transition(run.pk, RunStatus.CANCELLED)
    assert services.run_transition(stale.pk, RunStatus.STARTING) is False
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED


def test_the_reaper_and_the_worker_cannot_both_finish_a_run(run):
    services.run_transition(run.pk, RunStatus.STARTING)
    services.run_transition(run.pk, RunStatus.RUNNING)
    assert services.run_transition(run.pk, RunStatus.SUCCEEDED)
    assert services.run_transition(run.pk, RunStatus.LOST) is False
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED


@pytest.mark.django_db(transaction=True)
def test_concurrent_claims_of_one_run_have_exactly_one_winner(run):
    """Real concurrency: several threads, each on its own database connection, try to move the same
    queued run to STARTING at the same moment; the conditional UPDATE lets exactly one through."""
    writers = 6
    barrier = threading.Barrier(writers)
    results: list[bool] = []
    errors: list[BaseException] = []

    def claim() -> None:
        try:
            barrier.wait(timeout=10)
            results.append(services.run_transition(run.pk, RunStatus.STARTING))
        except BaseException as exc:  # reported by the assertion below, with the traceback
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=claim) for _ in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert sorted(results) == [False] * (writers - 1) + [True]
    assert Run.objects.get(pk=run.pk).status == RunStatus.STARTING


# --- runs: cancellation and progress -----------------------------------------------------------------------------


def test_cancelling_a_queued_run_is_immediate(run, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        assert services.run_request_cancel(run=run) == RunStatus.CANCELLED
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and run.cancel_requested and run.finished_at is not None


@pytest.mark.parametrize("status", [RunStatus.STARTING, RunStatus.RUNNING])
def test_cancelling_a_started_run_asks_the_trainer_to_stop(status, run):
    Run.objects.filter(pk=run.pk).update(status=status)
    run.refresh_from_db()
    assert services.run_request_cancel(run=run) == "cancel_requested"
    run.refresh_from_db()
    assert run.status == status and run.cancel_requested


@pytest.mark.parametrize("status", FINAL_STATUSES)
def test_a_finished_run_cannot_be_cancelled(status, run):
    Run.objects.filter(pk=run.pk).update(status=status)
    run.refresh_from_db()
    with pytest.raises(ValidationError) as excinfo:
        services.run_request_cancel(run=run)
    assert fields_of(excinfo) == ["status"]
    run.refresh_from_db()
    assert run.status == status and not run.cancel_requested


def test_progress_only_moves_forward_and_best_reward_is_a_maximum(run):
    services.run_record_progress(run_id=run.pk, step=5, last_reward=0.5, best_reward=0.5)
    services.run_record_progress(run_id=run.pk, step=3, last_reward=0.2, best_reward=0.2)  # a late batch
    run.refresh_from_db()
    assert (run.current_step, run.last_reward, run.best_reward, run.best_reward_step) == (5, 0.2, 0.5, 5)
    services.run_record_progress(run_id=run.pk, step=6, last_reward=None, best_reward=0.9)
    run.refresh_from_db()
    assert (run.current_step, run.best_reward, run.best_reward_step) == (6, 0.9, 6)
    services.run_record_progress(run_id=run.pk, step=7, last_reward=0.9, best_reward=0.9)  # a tie
    run.refresh_from_db()
    assert (run.best_reward, run.best_reward_step) == (0.9, 6)  # the first step to reach it keeps it


def test_heartbeat_stamps_the_run(run):
    assert run.heartbeat_at is None
    services.run_heartbeat(run.pk)
    run.refresh_from_db()
    assert run.heartbeat_at is not None


# --- API tokens ------------------------------------------------------------------------------------------------


def _authenticate(raw: str):
    request = APIRequestFactory().get("/api/projects/", HTTP_AUTHORIZATION=f"Bearer {raw}")
    return ApiTokenAuthentication().authenticate(request)


def test_api_token_create_returns_the_raw_value_once(users):
    token, raw = api_token_create(user=users["bob"], name="  laptop  ")
    assert raw.startswith("rsu_") and len(raw) > 40
    assert (token.name, token.prefix, token.token_hash) == ("laptop", raw[:10], hash_token(raw))
    assert _authenticate(raw) == (users["bob"], token)
    token.refresh_from_db()
    assert token.last_used_at is not None
    other, other_raw = api_token_create(user=users["bob"], name="x" * 80)
    assert other_raw != raw and len(other.name) == 80
    with pytest.raises(ValidationError, match="At most 80 characters"):  # refused, never cut
        api_token_create(user=users["bob"], name="x" * 81)


def test_api_token_needs_a_name(users):
    with pytest.raises(ValidationError) as excinfo:
        api_token_create(user=users["bob"], name="")
    assert fields_of(excinfo) == ["name"]
    assert not ApiToken.objects.exists()


def test_a_revoked_token_no_longer_authenticates(users):
    token, raw = api_token_create(user=users["bob"], name="t")
    with pytest.raises(ValidationError):
        api_token_revoke(user=users["alice"], token_id=token.pk)  # not alice's
    api_token_revoke(user=users["bob"], token_id=token.pk)
    with pytest.raises(ValidationError):
        api_token_revoke(user=users["bob"], token_id=token.pk)  # already revoked
    with pytest.raises(exceptions.AuthenticationFailed):
        _authenticate(raw)


def test_a_deactivated_users_token_does_not_authenticate(users):
    _token, raw = api_token_create(user=users["bob"], name="t")
    users["bob"].is_active = False
    users["bob"].save()
    with pytest.raises(exceptions.AuthenticationFailed):
        _authenticate(raw)


def test_other_authorization_headers_are_left_to_other_authenticators(users):
    # A run token is a Bearer value this authenticator refuses by name (it belongs to ingestion only).
    request = APIRequestFactory().get("/", HTTP_AUTHORIZATION="Bearer rsr_run-token")
    with pytest.raises(exceptions.AuthenticationFailed, match="run token"):
        ApiTokenAuthentication().authenticate(request)
    request = APIRequestFactory().get("/", HTTP_AUTHORIZATION="Basic Ym9iOnB3")
    assert ApiTokenAuthentication().authenticate(request) is None


def test_a_tinker_clients_run_is_not_offered_resume_it_continues_from_its_loop(
    signed_in, project, environment, rubric, users
):
    run = make_run(
        project, environment, rubric, users["bob"], status=RunStatus.SUCCEEDED, kind=RunKind.TINKER
    )
    run.checkpoints.create(step=2, path="/tmp/tinker-state")
    assert (
        run.resume_refusal()[0] == "kind" and "create_training_client_from_state" in run.resume_refusal()[1]
    )
    assert not run.actions()["resume"]
    refused = signed_in("bob").post(f"/api/runs/{run.pk}/resume/", {}, format="json")
    assert refused.status_code == 400, refused.content

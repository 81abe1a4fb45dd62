"""Who may call which API endpoint: every endpoint × every role, an outsider and an anonymous caller.

alice owns the project, bob researches, carol annotates, dave views, eve is an outsider.
Expected: anonymous → 401; eve → 404 on anything inside the project (its existence stays secret);
a member whose role lacks the capability → 403; everyone else → the endpoint's success status.
A refused call writes nothing.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from rest_framework.test import APIClient

from tests.conftest import make_project
from tests.webapp.review_factories import make_group
from tests.webapp.rewards_factories import direct_snapshot, preference_texts
from webapp.accounts.models import ApiToken
from webapp.accounts.services import api_token_create
from webapp.experiments.models import (
    Checkpoint,
    Environment,
    EnvironmentVersion,
    Rubric,
    RubricVersion,
    Run,
)
from webapp.experiments.services import run_create
from webapp.projects.models import ROLE_CAPABILITIES, Invitation, Membership, Project, ProjectSecret
from webapp.projects.services import invitation_create, secret_set
from webapp.review import services as review_services
from webapp.review.models import (
    Activity,
    Adjudication,
    Comment,
    Notification,
    PreferenceQueue,
    PreferenceSnapshot,
    QueueJudge,
    Tag,
    TrajectoryTag,
    TurnJudgement,
)
from webapp.rewards.models import RewardModel
from webapp.rollouts.ingest import insert_metrics
from webapp.rollouts.models import Trajectory, Turn

PRINCIPALS = ["anonymous", "alice", "bob", "carol", "dave", "eve"]
ROLES = {"alice": "owner", "bob": "researcher", "carol": "annotator", "dave": "viewer"}


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@dataclass
class World:
    project: Project
    environment: Environment
    rubric: Rubric
    run: Run
    trajectory: Trajectory
    memberships: dict[str, Membership]
    tokens: dict[str, tuple[ApiToken, str]]
    finished_run: Run  # stopped, with a checkpoint: can be resumed and forked
    queue: PreferenceQueue  # carol (annotator) and bob are its annotators
    snapshot: PreferenceSnapshot
    invitation: Invitation
    reward_model: RewardModel  # ready and reliable
    queued_model: RewardModel  # queued for training (not sent): can be cancelled
    judge: QueueJudge  # an LLM judge queued on `queue` (not sent): can be cancelled
    checkpoint: Checkpoint  # of finished_run: a run can start from it
    comment: Comment  # a thread carol (annotator) started on `trajectory`: she, bob and alice may resolve it
    spare_project: Project | None = None  # the same people, no active run: its owner may delete it
    training_snapshot: PreferenceSnapshot | None = None  # enough pairs to train a reward model on


# The world is built once for the module's ~800 tests, inside a transaction that is rolled back when the
# module ends; each test runs in a savepoint of it (pytest-django's `db`) and is rolled back to it, as
# Django's TestCase.setUpTestData does, and gets its own copies of the objects. Building it per test was
# the biggest single cost of `make test-fast`.
@pytest.fixture(scope="module")
def _world_once(django_db_setup, django_db_blocker, tmp_path_factory):
    from tests.conftest import story_once

    with story_once(django_db_blocker) as story:
        world = build_world(**story, tmp_path=tmp_path_factory.mktemp("world"))
        yield {"world": world, "users": story["users"]}


@pytest.fixture
def _story(db, _world_once):
    return copy.deepcopy(_world_once)


@pytest.fixture
def world(_story) -> World:
    return _story["world"]


@pytest.fixture
def users(_story):
    return _story["users"]


@pytest.fixture
def project(world):
    return world.project


@pytest.fixture
def environment(world):
    return world.environment


@pytest.fixture
def rubric(world):
    return world.rubric


@pytest.fixture
def run(world):
    return world.run


def build_world(users, project, environment, rubric, run, tmp_path) -> World:
    trajectory = Trajectory.objects.create(
        run=run, step=1, task_id="t-1", prompt="What is 2 + 3?", reward=1.0
    )
    Turn.objects.create(trajectory=trajectory, index=0, role="user", text="What is 2 + 3?")
    Turn.objects.create(trajectory=trajectory, index=1, role="assistant", text="<answer>5</answer>")
    insert_metrics(run.pk, [(1, None, None, {"reward/mean": 0.5})])
    # A checkpoint directory as trainers/learn/checkpoint.py writes one (the bytes need not be a model here).
    (tmp_path / "step-000001").mkdir()
    (tmp_path / "step-000001" / "model.safetensors").write_bytes(b"weights")
    run.checkpoints.create(step=1, path=str(tmp_path / "step-000001"))
    finished_run, _ = run_create(
        project=project,
        name="finished",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )
    Run.objects.filter(pk=finished_run.pk).update(status="SUCCEEDED")
    finished_run.checkpoints.create(step=3, path="/tmp/ckpt-3")
    review_services.tag_add(trajectory=trajectory, user=users["carol"], name="reviewed")
    comment = review_services.comment_create(trajectory=trajectory, author=users["carol"], body="odd answer?")
    make_group(finished_run, rewards=[1.0, 0.0])
    queue = review_services.queue_create(
        project=project,
        user=users["bob"],
        name="which is better",
        runs=[finished_run],
        annotators=[users["carol"], users["bob"]],
        overlap=2,
    )
    assignment = review_services.next_pair(queue=queue, annotator=users["carol"])
    review_services.judgement_submit(pair=assignment.pair, annotator=users["carol"], choice="a")
    snapshot = review_services.snapshot_create(queue, users["bob"])
    # bob disagrees with carol on that pair after the snapshot: a disagreement to read and settle
    review_services.next_pair(queue=queue, annotator=users["bob"])
    review_services.judgement_submit(pair=assignment.pair, annotator=users["bob"], choice="b")
    reward_model = RewardModel.objects.create(
        project=project,
        name="prefs",
        version=1,
        snapshot=snapshot,
        status="ready",
        path="/tmp/reward-model",
        metrics={"held_out_accuracy": 0.9, "n_eval": 60},
    )
    queued_model = RewardModel.objects.create(project=project, name="prefs", version=2, snapshot=snapshot)
    judge = QueueJudge.objects.create(queue=queue, criterion_name="tone", criterion={"kind": "llm_judge"})
    invitation, _raw = invitation_create(project=project, created_by=users["alice"], role="viewer")
    secret_set(project=project, name="JUDGE_KEY", value="sk-test", user=users["alice"])
    return World(
        spare_project=make_project(users),
        training_snapshot=direct_snapshot(
            project=project, rows=preference_texts(4), user=users["bob"], version=2
        ),
        invitation=invitation,
        reward_model=reward_model,
        queued_model=queued_model,
        judge=judge,
        checkpoint=finished_run.checkpoints.get(step=3),
        comment=comment,
        queue=queue,
        snapshot=snapshot,
        finished_run=finished_run,
        project=project,
        environment=environment,
        rubric=rubric,
        run=run,
        trajectory=trajectory,
        memberships={
            m.user.username: m for m in Membership.objects.filter(project=project).select_related("user")
        },
        tokens={name: api_token_create(user=user, name=f"{name}'s script") for name, user in users.items()},
    )


@dataclass(frozen=True)
class Endpoint:
    method: str
    url: Callable[[World, str], str]  # (world, principal) -> url
    need: str  # "auth": any signed-in user; else a project capability
    ok: int = 200
    body: Callable[[World], dict[str, Any]] | None = None
    content_type: str = "application/json"  # of a successful reply


def _p(world: World) -> str:
    return f"/api/projects/{world.project.slug}"


ENDPOINTS: dict[str, Endpoint] = {
    # projects
    "projects-list": Endpoint("GET", lambda w, who: "/api/projects/", "auth"),
    "projects-create": Endpoint(
        "POST", lambda w, who: "/api/projects/", "auth", 201, lambda w: {"name": "Another"}
    ),
    "project-get": Endpoint("GET", lambda w, who: f"{_p(w)}/", "read"),
    # the owner's, of a project with no active run (the world's first run is queued: that refusal is in
    # tests/webapp/experiments/test_deletion.py)
    "project-delete": Endpoint(
        "DELETE", lambda w, who: f"/api/projects/{w.spare_project.slug}/", "manage", 202
    ),
    # members
    "members-list": Endpoint("GET", lambda w, who: f"{_p(w)}/members/", "read"),
    "members-add": Endpoint(
        "POST",
        lambda w, who: f"{_p(w)}/members/",
        "manage",
        201,
        lambda w: {"username": "eve", "role": "viewer"},
    ),
    "member-update": Endpoint(
        "PATCH",
        lambda w, who: f"{_p(w)}/members/{w.memberships['dave'].pk}/",
        "manage",
        200,
        lambda w: {"role": "annotator"},
    ),
    "member-remove": Endpoint(
        "DELETE", lambda w, who: f"{_p(w)}/members/{w.memberships['dave'].pk}/", "manage", 204
    ),
    # secrets: researchers and owners store values runs need; nobody reads them back
    "secrets-list": Endpoint("GET", lambda w, who: f"{_p(w)}/secrets/", "launch"),
    "secrets-set": Endpoint(
        "POST",
        lambda w, who: f"{_p(w)}/secrets/",
        "launch",
        201,
        lambda w: {"name": "OTHER_KEY", "value": "v"},
    ),
    "secret-delete": Endpoint("DELETE", lambda w, who: f"{_p(w)}/secrets/JUDGE_KEY/", "launch", 204),
    # invitations
    "invitations-list": Endpoint("GET", lambda w, who: f"{_p(w)}/invitations/", "manage"),
    "invitations-create": Endpoint(
        "POST", lambda w, who: f"{_p(w)}/invitations/", "manage", 201, lambda w: {"role": "annotator"}
    ),
    "invitation-revoke": Endpoint(
        "DELETE", lambda w, who: f"{_p(w)}/invitations/{w.invitation.pk}/", "manage", 204
    ),
    # environments
    "environments-list": Endpoint("GET", lambda w, who: f"{_p(w)}/environments/", "read"),
    "environments-create": Endpoint(
        "POST",
        lambda w, who: f"{_p(w)}/environments/",
        "launch",
        201,
        lambda w: {"name": "countdown", "kind": "countdown", "config": {"num_numbers": 4}},
    ),
    "environment-preview": Endpoint(
        "POST",
        lambda w, who: f"{_p(w)}/environments/preview/",
        "launch",
        200,
        lambda w: {"kind": "countdown", "config": {"num_numbers": 3}},
    ),
    "environment-get": Endpoint("GET", lambda w, who: f"{_p(w)}/environments/{w.environment.pk}/", "read"),
    "environment-update": Endpoint(
        "PATCH",
        lambda w, who: f"{_p(w)}/environments/{w.environment.pk}/",
        "launch",
        200,
        lambda w: {"config": {"max_turns": 6}, "note": "longer episodes"},
    ),
    "environment-versions": Endpoint(
        "GET", lambda w, who: f"{_p(w)}/environments/{w.environment.pk}/versions/", "read"
    ),
    # rubrics
    "rubrics-list": Endpoint("GET", lambda w, who: f"{_p(w)}/rubrics/", "read"),
    "rubrics-create": Endpoint(
        "POST",
        lambda w, who: f"{_p(w)}/rubrics/",
        "launch",
        201,
        lambda w: {"name": "exact", "criteria": [{"name": "exact", "kind": "exact_match", "weight": 1.0}]},
    ),
    "rubric-get": Endpoint("GET", lambda w, who: f"{_p(w)}/rubrics/{w.rubric.pk}/", "read"),
    "rubric-update": Endpoint(
        "PATCH",
        lambda w, who: f"{_p(w)}/rubrics/{w.rubric.pk}/",
        "launch",
        200,
        lambda w: {"aggregation": "group_normalized_sum"},
    ),
    "rubric-versions": Endpoint("GET", lambda w, who: f"{_p(w)}/rubrics/{w.rubric.pk}/versions/", "read"),
    # checking a rubric's LLM judges runs a model on the server: a launcher's (this rubric has none to run)
    "rubric-judge-check": Endpoint(
        "POST",
        lambda w, who: f"{_p(w)}/rubrics/{w.rubric.pk}/judge-check/",
        "launch",
        200,
        lambda w: {"environment": w.environment.pk},
    ),
    # runs
    "runs-list": Endpoint("GET", lambda w, who: f"{_p(w)}/runs/", "read"),
    "runs-create": Endpoint(
        "POST",
        lambda w, who: f"{_p(w)}/runs/",
        "launch",
        201,
        lambda w: {
            "name": "second",
            "environment": w.environment.pk,
            "rubric": w.rubric.pk,
            "preset": "dapo",
        },
    ),
    "project-trajectories": Endpoint(
        "GET", lambda w, who: f"{_p(w)}/trajectories/?q=answer&status=ok", "read"
    ),
    "runs-create-from-checkpoint": Endpoint(
        "POST",
        lambda w, who: f"{_p(w)}/runs/",
        "launch",
        201,
        lambda w: {
            "name": "from a checkpoint",
            "environment": w.environment.pk,
            "rubric": w.rubric.pk,
            "from_checkpoint": w.checkpoint.pk,
        },
    ),
    "run-get": Endpoint("GET", lambda w, who: f"/api/runs/{w.run.pk}/", "read"),
    "run-update": Endpoint(
        "PATCH",
        lambda w, who: f"/api/runs/{w.run.pk}/",
        "launch",
        body=lambda w: {"tags": ["baseline"], "note": "first try"},
    ),
    # bob launched the finished run: he and the owner may delete it (tests/webapp/experiments/test_deletion.py
    # has the other researcher's 403)
    "run-delete": Endpoint("DELETE", lambda w, who: f"/api/runs/{w.finished_run.pk}/", "launch", 202),
    "run-cancel": Endpoint("POST", lambda w, who: f"/api/runs/{w.run.pk}/cancel/", "launch"),
    "run-resume": Endpoint(
        "POST", lambda w, who: f"/api/runs/{w.finished_run.pk}/resume/", "launch", 201, lambda w: {}
    ),
    "run-fork": Endpoint(
        "POST",
        lambda w, who: f"/api/runs/{w.finished_run.pk}/fork/",
        "launch",
        201,
        lambda w: {"name": "lower lr", "overrides": {"learning_rate": 1e-7}},
    ),
    "run-checkpoints": Endpoint("GET", lambda w, who: f"/api/runs/{w.run.pk}/checkpoints/", "read"),
    "checkpoint-weights": Endpoint(
        "GET",
        lambda w, who: f"/api/runs/{w.run.pk}/checkpoints/{w.run.checkpoints.get(step=1).pk}/weights/",
        "read",
        content_type="application/octet-stream",
    ),
    "run-event-log": Endpoint(
        "GET", lambda w, who: f"/api/runs/{w.run.pk}/event-log/", "read", content_type="application/x-ndjson"
    ),
    "run-trajectories": Endpoint(
        "GET", lambda w, who: f"/api/runs/{w.run.pk}/trajectories/?min_reward=0.5", "read"
    ),
    "run-trajectory": Endpoint(
        "GET", lambda w, who: f"/api/runs/{w.run.pk}/trajectories/{w.trajectory.pk}/", "read"
    ),
    "run-trajectory-atif": Endpoint(
        "GET", lambda w, who: f"/api/runs/{w.run.pk}/trajectories/{w.trajectory.pk}/atif/", "read"
    ),
    "run-atif": Endpoint(
        "GET", lambda w, who: f"/api/runs/{w.run.pk}/atif/", "read", content_type="application/x-ndjson"
    ),
    "run-metrics": Endpoint("GET", lambda w, who: f"/api/runs/{w.run.pk}/metrics/?keys=reward/mean", "read"),
    "run-groups": Endpoint("GET", lambda w, who: f"/api/runs/{w.run.pk}/groups/?split=train", "read"),
    # registries
    "kinds-environments": Endpoint("GET", lambda w, who: "/api/kinds/environments/", "auth"),
    "kinds-criteria": Endpoint("GET", lambda w, who: "/api/kinds/criteria/", "auth"),
    "presets": Endpoint("GET", lambda w, who: "/api/presets/", "auth"),
    "parts": Endpoint("GET", lambda w, who: "/api/parts/?queue=cpu", "auth"),
    # review: comments and tags on a trajectory
    "trajectory-comments-list": Endpoint(
        "GET", lambda w, who: f"/api/trajectories/{w.trajectory.pk}/comments/", "read"
    ),
    "trajectory-comments-create": Endpoint(
        "POST",
        lambda w, who: f"/api/trajectories/{w.trajectory.pk}/comments/",
        "annotate",
        201,
        lambda w: {"body": "@alice the reward looks right", "turn_index": 1},
    ),
    "comment-thread-resolve": Endpoint(
        "POST",
        lambda w, who: f"/api/comments/{w.comment.pk}/resolve/",
        "annotate",
        200,
        lambda w: {"resolved": True},
    ),
    "trajectory-tags-list": Endpoint(
        "GET", lambda w, who: f"/api/trajectories/{w.trajectory.pk}/tags/", "read"
    ),
    "trajectory-tags-add": Endpoint(
        "POST",
        lambda w, who: f"/api/trajectories/{w.trajectory.pk}/tags/",
        "annotate",
        201,
        lambda w: {"name": "odd"},
    ),
    "trajectory-tag-remove": Endpoint(
        "DELETE", lambda w, who: f"/api/trajectories/{w.trajectory.pk}/tags/reviewed/", "annotate", 204
    ),
    # review: turn judgements on a trajectory (per-turn preferences)
    "trajectory-turn-judgements-list": Endpoint(
        "GET", lambda w, who: f"/api/trajectories/{w.trajectory.pk}/turn-judgements/", "read"
    ),
    "trajectory-turn-judgements-create": Endpoint(
        "POST",
        lambda w, who: f"/api/trajectories/{w.trajectory.pk}/turn-judgements/",
        "annotate",
        201,
        lambda w: {"verdict": "wrong", "turn_index": 1},
    ),
    "trajectory-turn-judgements-withdraw": Endpoint(
        "DELETE", lambda w, who: f"/api/trajectories/{w.trajectory.pk}/turn-judgements/", "annotate", 204
    ),
    # review: preference queues (carol annotates the one queue) and their datasets
    "preference-queues-list": Endpoint("GET", lambda w, who: f"{_p(w)}/preference-queues/", "annotate"),
    "preference-queue-get": Endpoint(
        "GET", lambda w, who: f"/api/preference-queues/{w.queue.pk}/", "annotate"
    ),
    "preference-snapshots-list": Endpoint(
        "GET", lambda w, who: f"/api/preference-queues/{w.queue.pk}/snapshots/", "launch"
    ),
    "preference-snapshots-create": Endpoint(
        "POST",
        lambda w, who: f"/api/preference-queues/{w.queue.pk}/snapshots/",
        "launch",
        201,
        lambda w: {"complete_only": True},
    ),
    "preference-queue-disagreements": Endpoint(
        "GET", lambda w, who: f"/api/preference-queues/{w.queue.pk}/disagreements/?show=all", "adjudicate"
    ),
    "preference-pair-adjudication": Endpoint(
        "POST",
        lambda w, who: f"/api/preference-queues/{w.queue.pk}/pairs/{w.queue.pairs.get().pk}/adjudication/",
        "adjudicate",
        200,
        lambda w: {"choice": "a", "rationale": "A is right"},
    ),
    "queue-judge-cancel": Endpoint(
        "POST", lambda w, who: f"/api/preference-queues/{w.queue.pk}/judges/{w.judge.pk}/cancel/", "launch"
    ),
    "preference-snapshot-export": Endpoint(
        "GET",
        lambda w, who: f"/api/preference-snapshots/{w.snapshot.pk}/export/?format=dpo",
        "launch",
        content_type="application/x-ndjson",
    ),
    "preference-snapshot-dpo-runs": Endpoint(
        "POST",
        lambda w, who: f"/api/preference-snapshots/{w.snapshot.pk}/dpo-runs/",
        "launch",
        201,
        lambda w: {"name": "dpo", "config": {"max_steps": 3}},
    ),
    "preference-snapshot-reward-models": Endpoint(
        "POST",
        lambda w, who: f"/api/preference-snapshots/{w.training_snapshot.pk}/reward-models/",
        "launch",
        201,
        lambda w: {"name": "prefs", "base_checkpoint": w.checkpoint.pk},
    ),
    # learned reward models
    "reward-model-get": Endpoint("GET", lambda w, who: f"/api/reward-models/{w.reward_model.pk}/", "read"),
    "reward-model-cancel": Endpoint(
        "POST", lambda w, who: f"/api/reward-models/{w.queued_model.pk}/cancel/", "launch"
    ),
    "reward-model-register": Endpoint(
        "POST",
        lambda w, who: f"/api/reward-models/{w.reward_model.pk}/register/",
        "launch",
        201,
        lambda w: {"rubric": w.rubric.pk, "weight": 0.5},
    ),
    # tokens: each caller manages their own
    "tokens-list": Endpoint("GET", lambda w, who: "/api/tokens/", "auth"),
    "tokens-create": Endpoint("POST", lambda w, who: "/api/tokens/", "auth", 201, lambda w: {"name": "ci"}),
    "token-revoke": Endpoint(
        "DELETE",
        lambda w, who: f"/api/tokens/{w.tokens[who if who in w.tokens else 'alice'][0].pk}/",
        "auth",
        204,
    ),
}


def expected_status(endpoint: Endpoint, principal: str) -> int:
    if principal == "anonymous":
        return 401
    if endpoint.need == "auth":
        return endpoint.ok
    if principal not in ROLES:
        return 404
    return endpoint.ok if endpoint.need in ROLE_CAPABILITIES[ROLES[principal]] else 403


def state() -> dict[str, Any]:
    """Everything a refused call must leave as it was."""
    return {
        "counts": [
            m.objects.count()
            for m in (
                Project,
                Membership,
                Environment,
                EnvironmentVersion,
                Rubric,
                RubricVersion,
                Run,
                ApiToken,
                Invitation,
                TurnJudgement,
            )
        ],
        "invitations": sorted(Invitation.objects.values_list("pk", "revoked_at")),
        "roles": sorted(Membership.objects.values_list("user__username", "role")),
        "runs": sorted(Run.objects.values_list("pk", "status", "cancel_requested")),
        "revoked": ApiToken.objects.exclude(revoked_at=None).count(),
        "secrets": sorted(ProjectSecret.objects.values_list("name", "updated_at")),
        "names": sorted(
            [
                *Environment.objects.values_list("name", "description"),
                *Rubric.objects.values_list("name", "description"),
            ]
        ),
        "review": [
            m.objects.count()
            for m in (Comment, Tag, TrajectoryTag, Notification, PreferenceSnapshot, Activity, Adjudication)
        ],
    }


def call(client: APIClient, endpoint: Endpoint, world: World, principal: str):
    body = endpoint.body(world) if endpoint.body else None
    return client.generic(
        endpoint.method,
        endpoint.url(world, principal),
        data=None if body is None else json.dumps(body),
        content_type="application/json",
    )


@pytest.mark.parametrize("principal", PRINCIPALS)
@pytest.mark.parametrize("name", list(ENDPOINTS))
def test_permission_matrix_with_session(name, principal, world, users):
    endpoint = ENDPOINTS[name]
    client = APIClient()
    if principal != "anonymous":
        client.force_login(users[principal])
    expected = expected_status(endpoint, principal)
    before = state()

    response = call(client, endpoint, world, principal)

    assert response.status_code == expected, (name, principal, response.content[:300])
    content_type = endpoint.content_type if response.status_code < 400 else "application/json"
    assert response.status_code == 204 or response["Content-Type"].startswith(content_type)
    if expected >= 400:
        body = response.json()
        assert body["error"] in {"not_authenticated", "not_found", "forbidden", "permission_denied"}, body
        assert state() == before, f"{principal} was refused {name} but something changed"


@pytest.mark.parametrize("principal", PRINCIPALS)
@pytest.mark.parametrize("name", list(ENDPOINTS))
def test_permission_matrix_with_api_token(name, principal, world):
    """Scripts get exactly the same answers with `Authorization: Bearer rsu_…`."""
    endpoint = ENDPOINTS[name]
    client = APIClient()
    if principal != "anonymous":
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {world.tokens[principal][1]}")
    before = state()

    response = call(client, endpoint, world, principal)

    expected = expected_status(endpoint, principal)
    assert response.status_code == expected, (name, principal, response.content[:300])
    if expected >= 400:
        assert state() == before


def test_every_api_route_is_in_the_matrix():
    """A new endpoint must be added to ENDPOINTS (and so to the matrix) before it can ship."""
    from django.urls import get_resolver

    api = next(p for p in get_resolver().url_patterns if str(p.pattern) == "api/")
    # Public: the schema and its readers; token sign-in, whose credential is the password
    # (tests/webapp/accounts/test_token_sign_in.py).
    documented = {"schema", "docs", "redoc", "token-sign-in"}
    routes = {p.name for p in api.url_patterns} - documented
    covered = {
        "projects": {"projects-list", "projects-create"},
        "project": {"project-get", "project-delete"},
        "members": {"members-list", "members-add"},
        "member": {"member-update", "member-remove"},
        "secrets": {"secrets-list", "secrets-set"},
        "secret": {"secret-delete"},
        "invitations": {"invitations-list", "invitations-create"},
        "invitation": {"invitation-revoke"},
        "environments": {"environments-list", "environments-create"},
        "environment-preview": {"environment-preview"},
        "environment": {"environment-get", "environment-update"},
        "environment-versions": {"environment-versions"},
        "rubrics": {"rubrics-list", "rubrics-create"},
        "rubric": {"rubric-get", "rubric-update"},
        "rubric-versions": {"rubric-versions"},
        "rubric-judge-check": {"rubric-judge-check"},
        "runs": {"runs-list", "runs-create", "runs-create-from-checkpoint"},
        "run": {"run-get", "run-update", "run-delete"},
        "trajectories": {"project-trajectories"},
        "run-cancel": {"run-cancel"},
        "run-resume": {"run-resume"},
        "run-fork": {"run-fork"},
        "run-checkpoints": {"run-checkpoints"},
        "checkpoint-weights": {"checkpoint-weights"},
        "run-event-log": {"run-event-log"},
        "run-trajectories": {"run-trajectories"},
        "run-trajectory": {"run-trajectory"},
        "run-trajectory-atif": {"run-trajectory-atif"},
        "run-atif": {"run-atif"},
        "run-metrics": {"run-metrics"},
        "run-groups": {"run-groups"},
        "environment-kinds": {"kinds-environments"},
        "criterion-kinds": {"kinds-criteria"},
        "presets": {"presets"},
        "parts": {"parts"},
        "tokens": {"tokens-list", "tokens-create"},
        "token": {"token-revoke"},
        "trajectory-comments": {"trajectory-comments-list", "trajectory-comments-create"},
        "comment-thread-resolve": {"comment-thread-resolve"},
        "trajectory-tags": {"trajectory-tags-list", "trajectory-tags-add"},
        "trajectory-tag": {"trajectory-tag-remove"},
        "trajectory-turn-judgements": {
            "trajectory-turn-judgements-list",
            "trajectory-turn-judgements-create",
            "trajectory-turn-judgements-withdraw",
        },
        "preference-queues": {"preference-queues-list"},
        "preference-queue": {"preference-queue-get"},
        "preference-queue-snapshots": {"preference-snapshots-list", "preference-snapshots-create"},
        "preference-snapshot-export": {"preference-snapshot-export"},
        "preference-snapshot-dpo-runs": {"preference-snapshot-dpo-runs"},
        "preference-snapshot-reward-models": {"preference-snapshot-reward-models"},
        "reward-model": {"reward-model-get"},
        "reward-model-register": {"reward-model-register"},
        "reward-model-cancel": {"reward-model-cancel"},
        "queue-judge-cancel": {"queue-judge-cancel"},
        "preference-queue-disagreements": {"preference-queue-disagreements"},
        "preference-pair-adjudication": {"preference-pair-adjudication"},
    }
    assert routes == set(covered)
    assert set().union(*covered.values()) == set(ENDPOINTS)


def test_methods_an_endpoint_does_not_have_are_405_for_members(world, users):
    client = APIClient()
    client.force_login(users["alice"])
    assert client.put(f"/api/runs/{world.run.pk}/", {}, format="json").status_code == 405
    assert (
        client.put(
            f"/api/projects/{world.project.slug}/environments/{world.environment.pk}/", {}, format="json"
        ).status_code
        == 405
    )


def test_session_writes_need_the_csrf_token(world, users):
    """The browser's session cookie alone cannot write: the CSRF token must come with it."""
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(users["alice"])

    refused = client.post("/api/projects/", {"name": "Sneaky"}, format="json")
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]
    assert not Project.objects.filter(name="Sneaky").exists()

    client.get("/api/projects/")  # reads are fine without it
    from django.middleware.csrf import _get_new_csrf_string, _mask_cipher_secret

    secret = _get_new_csrf_string()
    client.cookies["csrftoken"] = secret
    accepted = client.post(
        "/api/projects/", {"name": "Proper"}, format="json", HTTP_X_CSRFTOKEN=_mask_cipher_secret(secret)
    )
    assert accepted.status_code == 201, accepted.content


def test_api_tokens_do_not_need_csrf(world):
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {world.tokens['bob'][1]}")
    assert client.post("/api/projects/", {"name": "From a script"}, format="json").status_code == 201


@pytest.mark.parametrize(
    "header",
    ["Bearer rsu_not-a-real-token", "Bearer rsu_"],
)
def test_a_bad_user_token_is_401_not_anonymous(header, world):
    response = APIClient().get("/api/projects/", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert response.json()["error"] == "authentication_failed"
    assert response["WWW-Authenticate"] == "Bearer"


def test_a_revoked_token_stops_working(world):
    token, raw = world.tokens["bob"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/api/projects/").status_code == 200
    assert client.delete(f"/api/tokens/{token.pk}/").status_code == 204
    assert client.get("/api/projects/").status_code == 401


def test_a_run_ingestion_token_is_not_a_user_token(project, environment, rubric, users):
    from webapp.experiments.services import run_create

    _run, run_token = run_create(
        project=project,
        name="r",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )
    response = APIClient().get(f"/api/projects/{project.slug}/", HTTP_AUTHORIZATION=f"Bearer {run_token}")
    assert response.status_code == 401


def test_nobody_can_revoke_someone_elses_token(world):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {world.tokens['eve'][1]}")
    alices = world.tokens["alice"][0]
    assert client.delete(f"/api/tokens/{alices.pk}/").status_code == 404
    alices.refresh_from_db()
    assert alices.revoked_at is None


def test_run_ids_of_other_projects_are_404_even_for_owners_elsewhere(world, users):
    """eve owns a project of her own; that gives her nothing in alice's."""
    from webapp.projects.services import project_create

    project_create(name="Eve's", owner=users["eve"])
    client = APIClient()
    client.force_login(users["eve"])
    assert client.get(f"/api/runs/{world.run.pk}/").status_code == 404
    assert client.get(f"/api/runs/{world.run.pk}/trajectories/{world.trajectory.pk}/").status_code == 404
    assert [p["name"] for p in client.get("/api/projects/").json()["results"]] == ["Eve's"]


def test_a_trajectory_is_reached_only_through_its_own_run(world, users, project, environment, rubric):
    from webapp.experiments.services import run_create

    other_run, _ = run_create(
        project=project,
        name="other",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )
    client = APIClient()
    client.force_login(users["alice"])
    assert client.get(f"/api/runs/{other_run.pk}/trajectories/{world.trajectory.pk}/").status_code == 404

"""The API tests' world: one project with something behind every id an endpoint takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.webapp.factories import make_trajectory, turn
from tests.webapp.review_factories import make_group
from webapp.accounts.services import api_token_create
from webapp.experiments.models import Run
from webapp.experiments.services import run_create
from webapp.projects.models import Membership
from webapp.projects.services import invitation_create, secret_set
from webapp.review import services as review_services
from webapp.review.models import QueueJudge
from webapp.rewards.models import RewardModel
from webapp.rollouts.ingest import insert_metrics


@dataclass
class World:
    """alice's personal token, the run's ingestion token, and the path parameters of every operation
    (keyed by the OpenAPI path: `/api/runs/{id}/` → `{"id": run.pk}`)."""

    personal_token: str
    run_token: str
    path_parameters: dict[str, dict[str, Any]]  # operation path → its parameters

    def parameters_for(self, path: str) -> dict[str, Any]:
        return self.path_parameters[path]

    def url(self, path: str) -> str:
        """The OpenAPI path with this world's ids filled in."""
        return path.format(**self.parameters_for(path)) if "{" in path else path

    def authorization(self, path: str) -> str:
        return f"Bearer {self.run_token if path.endswith('/events') else self.personal_token}"


@pytest.fixture
def world(users, project, environment, rubric, run) -> World:
    alice = users["alice"]
    trajectory = make_trajectory(
        run, step=1, turns=[turn("user", "What is 3 + 4?"), turn("assistant", "<answer>7</answer>")]
    )
    insert_metrics(run.pk, [(1, None, None, {"reward/mean": 0.5})])
    run.checkpoints.create(step=1, path="/tmp/ckpt-1")
    stopped, _ = run_create(
        project=project,
        name="stopped",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=alice,
        dispatch=False,
    )
    Run.objects.filter(pk=stopped.pk).update(status="SUCCEEDED")
    stopped.checkpoints.create(step=3, path="/tmp/ckpt-3")
    review_services.tag_add(trajectory=trajectory, user=alice, name="reviewed")
    comment = review_services.comment_create(trajectory=trajectory, author=alice, body="a thread to resolve")
    make_group(stopped, rewards=[1.0, 0.0])
    queue = review_services.queue_create(
        project=project,
        user=alice,
        name="which is better",
        runs=[stopped],
        annotators=[users["carol"], alice],
        overlap=2,
    )
    assignment = review_services.next_pair(queue=queue, annotator=users["carol"])
    review_services.judgement_submit(pair=assignment.pair, annotator=users["carol"], choice="a")
    snapshot = review_services.snapshot_create(queue, alice)
    # alice then disagrees: a disagreement to list and settle
    review_services.next_pair(queue=queue, annotator=alice)
    review_services.judgement_submit(pair=assignment.pair, annotator=alice, choice="b")
    reward_model = RewardModel.objects.create(
        project=project,
        name="prefs",
        version=1,
        snapshot=snapshot,
        status="ready",
        path="/tmp/reward-model",
        metrics={"held_out_accuracy": 0.9, "n_eval": 60},
    )
    _token, personal = api_token_create(user=alice, name="fuzzing")
    spare, _raw = api_token_create(user=alice, name="to revoke")
    dave = Membership.objects.get(project=project, user=users["dave"])
    invitation, _invitation_token = invitation_create(project=project, created_by=alice, role="viewer")
    secret_set(project=project, name="JUDGE_KEY", value="sk-test", user=alice)
    run.ingest_token_nonce = Run.objects.get(pk=run.pk).ingest_token_nonce
    slug = project.slug
    p = "/api/projects/{slug}"
    return World(
        personal_token=personal,
        run_token=run.ingest_token(),
        path_parameters={
            f"{p}/": {"slug": slug},
            f"{p}/members/": {"slug": slug},
            f"{p}/members/{{id}}/": {"slug": slug, "id": dave.pk},
            f"{p}/invitations/": {"slug": slug},
            f"{p}/secrets/": {"slug": slug},
            f"{p}/secrets/{{name}}/": {"slug": slug, "name": "JUDGE_KEY"},
            f"{p}/invitations/{{id}}/": {"slug": slug, "id": invitation.pk},
            f"{p}/environments/": {"slug": slug},
            f"{p}/environments/preview/": {"slug": slug},
            f"{p}/environments/{{id}}/": {"slug": slug, "id": environment.pk},
            f"{p}/environments/{{id}}/versions/": {"slug": slug, "id": environment.pk},
            f"{p}/rubrics/": {"slug": slug},
            f"{p}/rubrics/{{id}}/": {"slug": slug, "id": rubric.pk},
            f"{p}/rubrics/{{id}}/versions/": {"slug": slug, "id": rubric.pk},
            f"{p}/rubrics/{{id}}/judge-check/": {"slug": slug, "id": rubric.pk},
            f"{p}/runs/": {"slug": slug},
            f"{p}/trajectories/": {"slug": slug},
            f"{p}/external-runs/": {"slug": slug},
            f"{p}/preference-queues/": {"slug": slug},
            "/api/runs/{id}/": {"id": run.pk},
            "/api/runs/{id}/cancel/": {"id": run.pk},
            "/api/runs/{id}/resume/": {"id": stopped.pk},
            "/api/runs/{id}/fork/": {"id": stopped.pk},
            "/api/runs/{id}/checkpoints/": {"id": run.pk},
            "/api/runs/{id}/checkpoints/{checkpoint_id}/weights/": {
                "id": run.pk,
                "checkpoint_id": run.checkpoints.get(step=1).pk,
            },
            "/api/runs/{id}/event-log/": {"id": run.pk},
            "/api/runs/{id}/trajectories/": {"id": run.pk},
            "/api/runs/{id}/trajectories/{trajectory_id}/": {"id": run.pk, "trajectory_id": trajectory.pk},
            "/api/runs/{id}/trajectories/{trajectory_id}/atif/": {
                "id": run.pk,
                "trajectory_id": trajectory.pk,
            },
            "/api/runs/{id}/atif/": {"id": run.pk},
            "/api/runs/{id}/metrics/": {"id": run.pk},
            "/api/runs/{id}/groups/": {"id": run.pk},
            "/api/runs/{run_id}/events": {"run_id": run.pk},
            "/api/trajectories/{id}/comments/": {"id": trajectory.pk},
            "/api/comments/{id}/resolve/": {"id": comment.pk},
            "/api/trajectories/{id}/tags/": {"id": trajectory.pk},
            "/api/trajectories/{id}/turn-judgements/": {"id": trajectory.pk},
            "/api/trajectories/{id}/tags/{name}/": {"id": trajectory.pk, "name": "reviewed"},
            "/api/preference-queues/{id}/": {"id": queue.pk},
            "/api/preference-queues/{id}/snapshots/": {"id": queue.pk},
            "/api/preference-queues/{id}/disagreements/": {"id": queue.pk},
            "/api/preference-queues/{id}/pairs/{pair_id}/adjudication/": {
                "id": queue.pk,
                "pair_id": assignment.pair.pk,
            },
            "/api/preference-snapshots/{id}/export/": {"id": snapshot.pk},
            "/api/preference-snapshots/{id}/dpo-runs/": {"id": snapshot.pk},
            "/api/preference-snapshots/{id}/reward-models/": {"id": snapshot.pk},
            "/api/reward-models/{id}/": {"id": reward_model.pk},
            "/api/reward-models/{id}/register/": {"id": reward_model.pk},
            "/api/reward-models/{id}/cancel/": {"id": reward_model.pk},
            "/api/preference-queues/{id}/judges/{judge_id}/cancel/": {
                "id": queue.pk,
                "judge_id": QueueJudge.objects.create(queue=queue, criterion_name="tone").pk,
            },
            "/api/tokens/{id}/": {"id": spare.pk},
        },
    )

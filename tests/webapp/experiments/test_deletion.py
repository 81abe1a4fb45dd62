"""Deleting a run or a project: gone from every page at once, its rows purged in short batches, nothing of
any other run touched, files removed only where the deployment keeps them."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.webapp.factories import make_run
from tests.webapp.review_factories import make_trajectory
from webapp.core.purge import deletion_plan, purge
from webapp.experiments.models import Checkpoint, Run, RunStatus
from webapp.experiments.services.deletion import purge_deleted
from webapp.projects.models import Project
from webapp.review.models import Activity, ActivityVerb, Comment, Notification
from webapp.review.services.collaboration import comment_create
from webapp.rollouts.ingest import ingest_batch
from webapp.rollouts.models import MetricChunk, Trajectory, Turn

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def new_run(project, environment, rubric, users):
    """new_run("bob", name=..., status=...): a run launched by one of the story's people."""

    def make(who: str, name: str = "run", **fields) -> Run:
        return make_run(project, environment, rubric, users[who], name, **fields)

    return make


def finished(run: Run, status: str = RunStatus.SUCCEEDED) -> Run:
    Run.objects.filter(pk=run.pk).update(status=status)
    run.refresh_from_db()
    return run


def fill(run: Run, users, *, trajectories: int = 5) -> None:
    """A run's worth of what a run records: trajectories with turns, a discussion with a reply and a
    mention, metric chunks, a checkpoint with its files under the run's directory."""
    made = [make_trajectory(run, step=1, group=i, reward=0.5) for i in range(trajectories)]
    first = comment_create(trajectory=made[0], author=users["alice"], body="look @bob")
    comment_create(trajectory=made[0], author=users["bob"], body="agreed", reply_to=first)
    for step in range(3):
        ingest_batch(
            run=run,
            payload={
                "events": [
                    {"seq": step + 1, "type": "metrics", "step": step, "values": {"loss": 1.0, "kl": 0.1}}
                ]
            },
        )
    directory = Run.artifacts_path(run.pk) / "checkpoint-1"
    directory.mkdir(parents=True)
    (directory / "weights.bin").write_bytes(b"0" * 64)
    Checkpoint.objects.create(run=run, step=1, path=str(directory))


def counts(run_id: int) -> dict[str, int]:
    return {
        "trajectories": Trajectory.objects.filter(run_id=run_id).count(),
        "turns": Turn.objects.filter(trajectory__run_id=run_id).count(),
        "comments": Comment.objects.filter(trajectory__run_id=run_id).count(),
        "chunks": MetricChunk.objects.filter(run_id=run_id).count(),
        "checkpoints": Checkpoint.objects.filter(run_id=run_id).count(),
        "runs": Run.all_objects.filter(pk=run_id).count(),
    }


def test_the_plan_reaches_every_table_of_a_run_deepest_first():
    tables = [step.model._meta.label for step in deletion_plan(Run)]
    for deep, shallow in [
        ("rollouts.Turn", "rollouts.Trajectory"),
        ("review.Notification", "review.Comment"),
    ]:
        assert tables.index(deep) < tables.index(shallow)
    assert {
        "rollouts.MetricChunk",
        "rollouts.MetricTile",
        "rollouts.MetricFold",
        "experiments.Checkpoint",
    } <= set(tables)
    assert "rollouts.MetricPoint" not in tables  # a view over the chunks, nothing to delete


def test_a_deleted_run_is_gone_at_once_and_its_rows_go_in_batches(new_run, signed_in, project, users):
    doomed = finished(new_run("bob", name="doomed"))
    kept = finished(new_run("bob", name="kept"))
    fill(doomed, users)
    fill(kept, users)
    child = new_run("bob", name="child")
    Run.objects.filter(pk=child.pk).update(parent=doomed, status=RunStatus.FAILED)

    bob = signed_in("bob")
    answer = bob.delete(f"/api/runs/{doomed.pk}/")
    assert answer.status_code == 202, answer.content
    assert "freed in the background" in answer.json()["detail"]
    # Gone from every read at once, before any row was purged.
    assert bob.get(f"/api/runs/{doomed.pk}/").status_code == 404
    assert doomed.pk not in [
        r["id"] for r in bob.get(f"/api/projects/{project.slug}/runs/").json()["results"]
    ]
    assert counts(doomed.pk)["trajectories"] == 5

    # Purged in batches of two rows: every table in several short transactions, all of it in the end.
    assert not purge(Run, doomed.pk, batch_rows=2, budget_s=0)  # one batch, then the budget is spent
    while not purge(Run, doomed.pk, batch_rows=2, budget_s=0):
        pass
    assert counts(doomed.pk) == dict.fromkeys(counts(doomed.pk), 0)
    assert not Run.artifacts_path(doomed.pk).exists()
    assert Notification.objects.filter(comment__trajectory__run_id=doomed.pk).count() == 0
    # Nothing of the other run went, and the child run lost only its link.
    assert counts(kept.pk) == {
        "trajectories": 5,
        "turns": 15,
        "comments": 2,
        "chunks": 6,
        "checkpoints": 1,
        "runs": 1,
    }
    assert Run.artifacts_path(kept.pk).exists()
    child.refresh_from_db()
    assert child.parent_id is None
    line = Activity.objects.get(verb=ActivityVerb.RUN_DELETED)
    assert (line.actor, line.data["name"]) == (users["bob"], "doomed")


def test_the_activity_page_names_a_deleted_run_without_a_link_that_would_404(
    new_run, signed_in, project, users
):
    from webapp.review.services.activity import log_activity

    doomed = finished(new_run("bob", name="doomed"))
    kept = finished(new_run("bob", name="kept"))
    fill(doomed, users)
    for run in (doomed, kept):
        log_activity(project, users["bob"], ActivityVerb.RUN_LAUNCHED, run_id=run.pk, name=run.name)
    bob = signed_in("bob")
    assert bob.delete(f"/api/runs/{doomed.pk}/").status_code == 202

    page = bob.get(reverse("review:activity", args=[project.slug])).content.decode()
    assert f"/runs/{doomed.pk}/" not in page  # neither the launch line nor the comments on its trajectories
    assert '“doomed” <span class="muted">(deleted)</span>' in page
    assert "(deleted with its run)" in page
    assert f"/runs/{kept.pk}/" in page  # the other run's line still links
    home = bob.get(reverse("projects:home", args=[project.slug])).content.decode()
    assert f"/runs/{doomed.pk}/" not in home


def test_who_may_delete_a_run_and_when(new_run, signed_in, project, users):
    bobs = finished(new_run("bob", name="bob's"))
    alices = finished(new_run("alice", name="alice's"))
    active = new_run("bob", name="running")
    Run.objects.filter(pk=active.pk).update(status=RunStatus.RUNNING)

    refused = signed_in("bob").delete(f"/api/runs/{alices.pk}/")
    assert refused.status_code == 403
    assert "delete a run someone else launched" in refused.json()["detail"]
    assert signed_in("carol").delete(f"/api/runs/{bobs.pk}/").status_code == 403  # an annotator
    assert signed_in("eve").delete(f"/api/runs/{bobs.pk}/").status_code == 404  # an outsider
    still_running = signed_in("bob").delete(f"/api/runs/{active.pk}/")
    assert still_running.status_code == 400
    assert "still active" in str(still_running.json())
    assert signed_in("alice").delete(f"/api/runs/{bobs.pk}/").status_code == 202  # the owner may
    assert Run.objects.filter(pk__in=[alices.pk, active.pk]).count() == 2


def test_a_run_another_run_trains_from_stays(new_run, signed_in, project, users):
    parent = finished(new_run("bob", name="parent"))
    checkpoint = Checkpoint.objects.create(run=parent, step=5, path="/somewhere/else")
    heir = new_run("bob", name="heir")
    Run.objects.filter(pk=heir.pk).update(parent_checkpoint=checkpoint, status=RunStatus.RUNNING)
    answer = signed_in("bob").delete(f"/api/runs/{parent.pk}/")
    assert answer.status_code == 400
    assert f"Run {heir.pk} is training from this run's checkpoint" in str(answer.json())


def test_files_outside_the_deployments_directories_are_never_removed(new_run, project, users, tmp_path):
    run = finished(new_run("bob"))
    outside = tmp_path / "my-model"
    outside.mkdir()
    Checkpoint.objects.create(run=run, step=1, path=str(outside))  # a user's own model directory
    Run.objects.filter(pk=run.pk).update(deleting_at="2026-01-01T00:00:00Z")
    assert purge_deleted(budget_s=30)["runs"] == [run.pk]
    assert outside.is_dir()
    assert settings.RUN_ARTIFACTS_DIR.is_dir()


def test_deleting_a_project_frees_its_slug_and_purges_everything(
    new_run, signed_in, client_for, project, users
):
    run = finished(new_run("bob"))
    fill(run, users)
    assert signed_in("bob").delete(f"/api/projects/{project.slug}/").status_code == 403
    page = client_for("alice")
    wrong = page.post(f"/p/{project.slug}/delete/", {"confirm_name": "not it"}, follow=True)
    assert "nothing was deleted" in wrong.content.decode()
    gone = page.post(f"/p/{project.slug}/delete/", {"confirm_name": project.name}, follow=True)
    assert "freed in the background" in gone.content.decode()
    assert page.get(f"/p/{project.slug}/").status_code == 404
    again = signed_in("alice").post("/api/projects/", {"name": "Agents"}, format="json")
    assert again.status_code == 201 and again.json()["slug"] == project.slug  # the name is free again

    with CaptureQueriesContext(connection):
        while purge_deleted(budget_s=30)["projects"] != [project.pk]:
            pass
    assert not Project.all_objects.filter(pk=project.pk).exists()
    assert counts(run.pk) == dict.fromkeys(counts(run.pk), 0)
    assert not Run.artifacts_path(run.pk).exists()


def test_a_project_with_an_active_run_is_not_deleted(new_run, signed_in, project, users):
    active = new_run("bob")
    Run.objects.filter(pk=active.pk).update(status=RunStatus.QUEUED)
    answer = signed_in("alice").delete(f"/api/projects/{project.slug}/")
    assert answer.status_code == 400
    assert f"Runs still active ({active.pk})" in str(answer.json())
    assert Project.objects.filter(pk=project.pk).exists()


def test_the_run_page_offers_delete_only_to_who_may_once_it_ended(new_run, client_for, project, users):
    run = new_run("bob")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
    page = client_for("bob").get(f"/p/{project.slug}/runs/{run.pk}/").content.decode()
    assert 'data-run-action="delete" hidden' in page  # not while it runs (the live page shows it after)
    finished(run)
    assert (
        'data-run-action="delete">'
        in client_for("bob").get(f"/p/{project.slug}/runs/{run.pk}/").content.decode()
    )
    assert "Delete run" not in client_for("carol").get(f"/p/{project.slug}/runs/{run.pk}/").content.decode()
    answer = client_for("bob").post(f"/p/{project.slug}/runs/{run.pk}/delete/", follow=True)
    assert "freed in the background" in answer.content.decode()
    assert client_for("bob").get(f"/p/{project.slug}/runs/{run.pk}/").status_code == 404


def test_a_project_with_queues_snapshots_and_reward_models_is_purged_whole(
    new_run, signed_in, project, users
):
    """What PROTECTs what (a reward model its snapshot, a run its environment version) orders the purge."""
    from tests.webapp.review_factories import make_group
    from webapp.experiments.models import EnvironmentVersion
    from webapp.review import services as review
    from webapp.review.models import PreferenceSnapshot
    from webapp.rewards.models import RewardModel

    run = finished(new_run("bob"))
    make_group(run, rewards=[1.0, 0.0])
    queue = review.queue_create(
        project=project, user=users["bob"], name="q", runs=[run], annotators=[users["carol"]], overlap=1
    )
    assignment = review.next_pair(queue=queue, annotator=users["carol"])
    review.judgement_submit(pair=assignment.pair, annotator=users["carol"], choice="a")
    snapshot = review.snapshot_create(queue, users["bob"])
    RewardModel.objects.create(project=project, name="prefs", version=1, snapshot=snapshot, status="ready")

    assert signed_in("alice").delete(f"/api/projects/{project.slug}/").status_code == 202
    while purge_deleted(budget_s=30)["projects"] != [project.pk]:
        pass
    assert not Project.all_objects.filter(pk=project.pk).exists()
    for model in (
        Run.all_objects,
        EnvironmentVersion.objects,
        PreferenceSnapshot.objects,
        RewardModel.objects,
    ):
        assert not model.filter(pk__isnull=False).exists(), model.model


def test_a_deleted_runs_checkpoints_and_trajectories_are_gone_before_the_purge(
    new_run, signed_in, client_for, project, environment, rubric, users
):
    run = finished(new_run("bob"))
    fill(run, users)
    checkpoint = Checkpoint.objects.get(run=run)
    trajectory = Trajectory.objects.filter(run=run).first()
    bob = signed_in("bob")
    assert bob.delete(f"/api/runs/{run.pk}/").status_code == 202
    assert bob.get(f"/api/runs/{run.pk}/checkpoints/{checkpoint.pk}/weights/").status_code == 404
    assert client_for("bob").get(f"/p/{project.slug}/trajectories/{trajectory.pk}/").status_code == 404
    started = bob.post(
        f"/api/projects/{project.slug}/runs/",
        {
            "name": "from it",
            "environment": environment.pk,
            "rubric": rubric.pk,
            "from_checkpoint": checkpoint.pk,
        },
        format="json",
    )
    assert started.status_code == 400, started.content  # not a checkpoint one can start from any more

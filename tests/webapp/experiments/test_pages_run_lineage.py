"""Resume and fork from the run page: new runs linked to their parent and checkpoint."""

from __future__ import annotations

import pytest

from tests.webapp.html_forms import form_data
from webapp.experiments.models import Checkpoint, Run


@pytest.fixture
def stopped_run(run):
    Run.objects.filter(pk=run.pk).update(status="LOST", current_step=7)
    Checkpoint.objects.create(run=run, step=5, path="/ckpt/5")
    Checkpoint.objects.create(run=run, step=7, path="/ckpt/7")
    return Run.objects.get(pk=run.pk)


def test_resume_continues_from_the_latest_checkpoint_with_the_same_config(
    client_for, stopped_run, django_capture_on_commit_callbacks
):
    page = client_for("bob").get(f"/p/{stopped_run.project.slug}/runs/{stopped_run.pk}/").content.decode()
    assert "Resume" in page and "Fork…" in page
    with django_capture_on_commit_callbacks(execute=False):
        response = client_for("bob").post(f"/p/{stopped_run.project.slug}/runs/{stopped_run.pk}/resume/")
    resumed = Run.objects.get(parent=stopped_run)
    assert response.status_code == 302 and response["Location"].endswith(f"/runs/{resumed.pk}/")
    assert resumed.lineage == "resume" and resumed.parent_checkpoint.step == 7
    assert resumed.environment_version == stopped_run.environment_version
    assert {k: v for k, v in resumed.resolved_config.items()} == stopped_run.resolved_config


def test_resume_from_a_chosen_checkpoint(client_for, stopped_run, django_capture_on_commit_callbacks):
    early = Checkpoint.objects.get(run=stopped_run, step=5)
    with django_capture_on_commit_callbacks(execute=False):
        client_for("bob").post(
            f"/p/{stopped_run.project.slug}/runs/{stopped_run.pk}/resume/", {"checkpoint": early.pk}
        )
    assert Run.objects.get(parent=stopped_run).parent_checkpoint == early


def test_an_active_run_cannot_be_resumed_and_nothing_is_written(client_for, run):
    Checkpoint.objects.create(run=run, step=1, path="/ckpt/1")
    response = client_for("bob").post(f"/p/{run.project.slug}/runs/{run.pk}/resume/", follow=True)
    assert "still active" in response.content.decode()
    assert Run.objects.count() == 1


def test_fork_changes_knobs_and_keeps_the_pinned_versions(
    client_for, stopped_run, django_capture_on_commit_callbacks
):
    url = f"/p/{stopped_run.project.slug}/runs/{stopped_run.pk}/fork/"
    page = client_for("bob").get(url)
    data = form_data(page.content.decode(), "fork-form")
    data["knob-learning_rate"] = "0.0005"
    data["name"] = "higher lr"
    with django_capture_on_commit_callbacks(execute=False):
        response = client_for("bob").post(url, data)
    fork = Run.objects.get(parent=stopped_run)
    assert response.status_code == 302
    assert fork.lineage == "fork" and fork.name == "higher lr" and fork.parent_checkpoint.step == 7
    assert fork.resolved_config["learning_rate"] == 0.0005
    assert fork.rubric_version == stopped_run.rubric_version


def test_fork_shows_knob_errors_and_writes_nothing(client_for, stopped_run):
    url = f"/p/{stopped_run.project.slug}/runs/{stopped_run.pk}/fork/"
    data = form_data(client_for("bob").get(url).content.decode(), "fork-form")
    data["knob-group_size"] = "0"
    response = client_for("bob").post(url, data)
    assert response.status_code == 200 and "errorlist" in response.content.decode()
    assert Run.objects.count() == 1


@pytest.mark.parametrize("who, status", [("eve", 404), ("dave", 403), ("carol", 403)])
def test_only_launch_capable_members_resume_or_fork(client_for, stopped_run, who, status):
    base = f"/p/{stopped_run.project.slug}/runs/{stopped_run.pk}"
    assert client_for(who).post(f"{base}/resume/").status_code == status
    assert client_for(who).get(f"{base}/fork/").status_code == status
    assert Run.objects.count() == 1


def test_a_dpo_run_page_says_what_it_trains_on_and_a_grpo_run_starts_from_its_checkpoint(
    client_for, project, users, run, environment, rubric, django_capture_on_commit_callbacks
):
    from tests.webapp.review_factories import make_group
    from webapp.experiments.services import run_create_dpo
    from webapp.review import services as review

    make_group(run, rewards=[1.0, 0.0])
    queue = review.queue_create(
        project=project, user=users["bob"], name="q", runs=[run], annotators=[users["carol"]]
    )
    assignment = review.next_pair(queue=queue, annotator=users["carol"])
    review.judgement_submit(pair=assignment.pair, annotator=users["carol"], choice="a")
    snapshot = review.snapshot_create(queue, users["bob"])
    dpo, _ = run_create_dpo(
        project=project,
        snapshot=snapshot,
        name="dpo",
        params={"max_steps": 3},
        user=users["bob"],
        dispatch=False,
    )
    Run.objects.filter(pk=dpo.pk).update(status="SUCCEEDED")
    checkpoint = Checkpoint.objects.create(run=dpo, step=3, path="/ckpt/dpo-3")
    client = client_for("bob")
    page = client.get(f"/p/{project.slug}/runs/{dpo.pk}/").content.decode()
    assert "DPO trains on preference pairs" in page and f"?from_checkpoint={checkpoint.pk}" in page
    assert f"/p/{project.slug}/runs/{dpo.pk}/fork/" not in page or 'data-run-action="fork" hidden' in page

    form_page = client.get(f"/p/{project.slug}/runs/new/?from_checkpoint={checkpoint.pk}").content.decode()
    assert "data-start-checkpoint" in form_page
    data = form_data(form_page, "run-form")
    data.update(name="grpo from dpo", environment=str(environment.pk), rubric=str(rubric.pk))
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(f"/p/{project.slug}/runs/new/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    grpo = Run.objects.get(name="grpo from dpo")
    assert (grpo.lineage, grpo.parent_id, grpo.parent_checkpoint_id) == ("init", dpo.pk, checkpoint.pk)
    assert grpo.resolved_config["model"] == "/ckpt/dpo-3" and grpo.kind == "rl"


def test_the_one_click_dpo_run_takes_its_step_count_from_beside_the_button(
    client_for, project, users, run, django_capture_on_commit_callbacks
):
    from tests.webapp.review_factories import make_group
    from webapp.review import services as review

    make_group(run, rewards=[1.0, 0.0])
    queue = review.queue_create(
        project=project, user=users["bob"], name="q", runs=[run], annotators=[users["carol"]]
    )
    assignment = review.next_pair(queue=queue, annotator=users["carol"])
    review.judgement_submit(pair=assignment.pair, annotator=users["carol"], choice="a")
    snapshot = review.snapshot_create(queue, users["bob"])
    client = client_for("bob")
    queue_page = client.get(f"/p/{project.slug}/review/queues/{queue.pk}/").content.decode()
    url = f"/p/{project.slug}/review/snapshots/{snapshot.pk}/dpo-run/"
    assert f'action="{url}"' in queue_page and 'name="max_steps" value="20"' in queue_page

    response = client.post(url, {"max_steps": "0"}, follow=True)
    assert response.redirect_chain[-1][0].endswith(f"/review/queues/{queue.pk}/")
    assert [str(m) for m in response.context["messages"]] == ["Steps must be 1 or more (got 0)."]
    assert not Run.objects.filter(kind="dpo").exists()

    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(url, {"max_steps": "3"})
    dpo = Run.objects.get(kind="dpo")
    assert response["Location"].endswith(f"/runs/{dpo.pk}/")
    assert dpo.max_steps == 3 and dpo.resolved_config["max_steps"] == 3 and dpo.overrides == {"max_steps": 3}

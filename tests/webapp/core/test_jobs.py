"""Cancel for background jobs (webapp.core.jobs) through the pages and the API: a queued reward model or
judge is dropped at once, a running one asked to stop (the button stops offering itself), one that ended
is refused with the reason. The worker's side, on real processes: tests/workers/test_job_cancel.py."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.webapp.review_factories import make_group
from tests.webapp.rewards_factories import direct_snapshot, preference_texts
from webapp.core.jobs import job_cancel_requested, job_cancelled
from webapp.review import services as review_services
from webapp.review.models import QueueJudge
from webapp.rewards import services
from webapp.rewards.models import RewardModel


@pytest.fixture
def queued_model(project, users):
    snapshot = direct_snapshot(project=project, rows=preference_texts(6), user=users["bob"])
    return services.reward_model_train(snapshot=snapshot, user=users["bob"], name="style", dispatch=False)


@pytest.fixture
def judge(project, run, users):
    make_group(run, group=0, rewards=[1.0, 0.0])
    queue = review_services.queue_create(
        project=project, user=users["bob"], name="judged", runs=[run], annotators=[users["carol"]]
    )
    return QueueJudge.objects.create(queue=queue, criterion_name="tone", criterion={"kind": "llm_judge"})


def detail(model: RewardModel) -> str:
    return reverse("rewards:reward_model_detail", args=[model.project.slug, model.pk])


def test_a_queued_reward_model_is_cancelled_at_once_from_its_page(
    client_for, queued_model, django_capture_on_commit_callbacks
):
    bob = client_for("bob")
    page = bob.get(detail(queued_model)).content.decode()
    assert "Cancel training" in page
    with django_capture_on_commit_callbacks(execute=True):  # revokes its task (none was sent here)
        response = bob.post(
            reverse("rewards:reward_model_cancel", args=[queued_model.project.slug, queued_model.pk]),
            follow=True,
        )
    queued_model.refresh_from_db()
    assert queued_model.status == "cancelled" and queued_model.finished_at
    page = response.content.decode()
    assert "style v1 cancelled." in page and "Cancel training" not in page and "Train again" in page
    # A viewer may look, not cancel.
    assert (
        client_for("dave")
        .post(reverse("rewards:reward_model_cancel", args=[queued_model.project.slug, queued_model.pk]))
        .status_code
        == 403
    )


def test_a_training_reward_model_is_asked_to_stop_and_the_button_is_not_offered_twice(
    client_for, signed_in, queued_model
):
    assert services.reward_model_claim(queued_model.pk, worker="cpu@box")
    api = signed_in("bob")
    answer = api.post(f"/api/reward-models/{queued_model.pk}/cancel/")
    assert answer.status_code == 200 and answer.json() == {"result": "cancel_requested", "status": "training"}
    assert job_cancel_requested(RewardModel, queued_model.pk)  # what the worker's watcher polls
    page = client_for("bob").get(detail(queued_model)).content.decode()
    assert "cancel requested" in page and "Cancel training" not in page
    assert api.get(f"/api/reward-models/{queued_model.pk}/").json()["cancel_requested"] is True

    assert job_cancelled(RewardModel, queued_model.pk)  # the worker stopped it
    assert not services.reward_model_fail(queued_model.pk, error="late")  # a late failure changes nothing
    queued_model.refresh_from_db()
    assert queued_model.status == "cancelled" and not queued_model.error_message
    again = api.post(f"/api/reward-models/{queued_model.pk}/cancel/")
    assert again.status_code == 400 and "A cancelled job cannot be cancelled." in str(again.json())


def test_a_judge_is_cancelled_from_the_queue_page_and_through_the_api(client_for, signed_in, judge):
    slug, queue = judge.queue.project.slug, judge.queue
    bob = client_for("bob")
    panel = bob.get(reverse("review:queue_judges", args=[slug, queue.pk])).content.decode()
    assert reverse("review:queue_judge_cancel", args=[slug, queue.pk, judge.pk]) in panel

    assert review_services.queue_judge_claim(judge.pk, worker="cpu@box")
    answer = signed_in("bob").post(f"/api/preference-queues/{queue.pk}/judges/{judge.pk}/cancel/")
    assert answer.json() == {"result": "cancel_requested", "status": "running"}
    panel = bob.get(reverse("review:queue_judges", args=[slug, queue.pk])).content.decode()
    assert "cancel requested" in panel and "queue_judge_cancel" not in panel
    assert reverse("review:queue_judge_cancel", args=[slug, queue.pk, judge.pk]) not in panel

    assert (
        signed_in("bob").post(f"/api/preference-queues/{queue.pk}/judges/999999/cancel/").status_code == 404
    )
    assert signed_in("carol").post(
        f"/api/preference-queues/{queue.pk}/judges/{judge.pk}/cancel/"
    ).status_code in (
        403,
        404,
    )

"""LLM judges as annotators of a preference queue: asking one, what its answers count for, the queue page.

The worker's own run (the bundled model answering every pair in both orders) is tests/workers/
test_judge_queue.py; here answers are written through the same service the worker writes them with.
alice owns the project, bob researches, carol annotates.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.urls import reverse

from tests.webapp.review_factories import make_group
from webapp.experiments.services import rubric_create
from webapp.projects.models import Membership
from webapp.projects.services import project_create
from webapp.review import services
from webapp.review.models import Activity, JudgeStatus, QueueJudge

JUDGE_RUBRIC = {
    "aggregation": "weighted_sum",
    "criteria": [
        {"name": "<b>tone</b>", "kind": "llm_judge", "weight": 1.0, "params": {"model": "smollm2-135m"}},
        {"name": "format", "kind": "regex", "weight": 0.2, "params": {"pattern": "<answer>"}},
    ],
}


@pytest.fixture
def judged_rubric(project, users):
    return rubric_create(project=project, name="style", spec=JUDGE_RUBRIC, user=users["alice"]).latest_version


@pytest.fixture
def queue(project, run, users):
    for group in range(4):
        make_group(run, group=group, rewards=[1.0, 0.0])
    return services.queue_create(
        project=project, user=users["bob"], name="q", runs=[run], annotators=[users["carol"]], seed=3
    )


def ask(queue, users, version, **kwargs) -> QueueJudge:
    return services.queue_judge_start(
        queue=queue,
        user=users["bob"],
        rubric_version=version,
        criterion_name="<b>tone</b>",
        dispatch=False,
        **kwargs,
    )


def answer_all(judge: QueueJudge, pick) -> None:
    """Record the judge's answers as the worker does: pick(pair, a_first) -> "a" / "b" / ""."""
    pairs = list(judge.queue.pairs.order_by("position"))
    services.queue_judge_record(
        judge.pk,
        [(pair.pk, a_first, pick(pair, a_first), "reply") for pair in pairs for a_first in (True, False)],
    )


def test_asking_a_judge_queues_it_once_and_a_failed_one_can_be_asked_again(queue, users, judged_rubric):
    judge = ask(queue, users, judged_rubric)
    assert (judge.status, judge.pairs_total, judge.in_snapshots) == (JudgeStatus.QUEUED, 4, False)
    assert judge.label == "judge: <b>tone</b> (style v1)" and judge.model_name == "smollm2-135m"
    assert judge.criterion["params"] == {"model": "smollm2-135m"}
    with pytest.raises(ValidationError, match="already queued"):
        ask(queue, users, judged_rubric)
    with pytest.raises(ValidationError, match="not an LLM judge"):
        services.queue_judge_start(
            queue=queue,
            user=users["bob"],
            rubric_version=judged_rubric,
            criterion_name="format",
            dispatch=False,
        )
    with pytest.raises(ValidationError, match="no criterion named"):
        services.queue_judge_start(
            queue=queue,
            user=users["bob"],
            rubric_version=judged_rubric,
            criterion_name="nope",
            dispatch=False,
        )

    assert services.queue_judge_claim(judge.pk, worker="w1") and not services.queue_judge_claim(
        judge.pk, worker="w2"
    )
    pair = queue.pairs.order_by("position").first()
    assert services.queue_judge_record(judge.pk, [(pair.pk, True, "a", "1"), (pair.pk, False, "a", "2")]) == 1
    assert services.queue_judge_fail(judge.pk, error="the model is gone")
    again = ask(queue, users, judged_rubric, in_snapshots=True)
    assert again.pk == judge.pk and again.status == JudgeStatus.QUEUED and again.error_message == ""
    assert again.in_snapshots and again.verdicts.count() == 2  # what it answered is kept


def test_a_judge_of_another_projects_rubric_is_refused(queue, users):
    other = project_create(name="Other", owner=users["eve"])
    foreign = rubric_create(project=other, name="theirs", spec=JUDGE_RUBRIC, user=users["eve"]).latest_version
    with pytest.raises(ValidationError, match="rubric of this project"):
        ask(queue, users, foreign)


def test_a_judges_votes_enter_snapshots_only_when_asked(queue, users, judged_rubric):
    judge = ask(queue, users, judged_rubric)
    services.queue_judge_claim(judge.pk, worker="w")
    # The judge prefers b whatever the order; carol judges two pairs, a.
    answer_all(judge, lambda pair, a_first: "b")
    for _ in range(2):
        assignment = services.next_pair(queue=queue, annotator=users["carol"])
        services.judgement_submit(pair=assignment.pair, annotator=users["carol"], choice="a")

    without = services.snapshot_create(queue, users["bob"])
    assert without.provenance["counts"]["included"] == 2 and without.provenance["judges"] == []
    assert without.provenance["annotators"] == ["carol"]

    services.queue_judge_set_in_snapshots(judge=judge, in_snapshots=True)
    with_judge = services.snapshot_create(queue, users["bob"])
    counts = with_judge.provenance["counts"]
    # Two pairs are the judge's alone (b wins); on carol's two, a vs b is a split vote, left out.
    assert counts["included"] == 2 and counts["excluded_no_majority"] == 2 and counts["judge_votes"] == 4
    assert counts["judgements"] == 2 and with_judge.provenance["judges"] == [judge.label]
    rows = list(with_judge.pairs.all())
    assert all(
        row.provenance["judges"] == [judge.label] and row.provenance["annotators"] == [] for row in rows
    )
    # "complete" counts people: the judge takes none of a pair's places.
    complete = services.snapshot_create(queue, users["bob"], complete_only=True)
    assert complete.provenance["counts"]["included"] == 0


def test_a_lost_judge_is_failed_with_the_reason(queue, users, judged_rubric):
    judge = ask(queue, users, judged_rubric)
    services.queue_judge_claim(judge.pk, worker="gone@nowhere")
    QueueJudge.objects.filter(pk=judge.pk).update(started_at="2000-01-01T00:00:00Z")
    assert services.queue_judges_reap_lost() == [judge.pk]
    judge.refresh_from_db()
    assert judge.status == JudgeStatus.FAILED and "gone@nowhere stopped reporting" in judge.error_message


def test_the_queue_page_shows_the_judge_beside_the_humans_with_kappa_and_bias(
    client_for, project, run, queue, users, judged_rubric
):
    # Someone whose name is markup, annotating every pair beside carol.
    zed = get_user_model().objects.create_user("<i>zed</i>", "zed@example.com", "pw")
    Membership.objects.create(project=project, user=zed, role="annotator")
    queue = services.queue_create(
        project=project,
        user=users["bob"],
        name="both",
        runs=[run],
        annotators=[users["carol"], zed],
        overlap=2,
    )
    for person in (users["carol"], zed):
        while (assignment := services.next_pair(queue=queue, annotator=person)) is not None:
            # Both always press "left": position bias 100 %.
            choice = services.choice_from_side("left", left_is_a=assignment.left_is_a)
            services.judgement_submit(pair=assignment.pair, annotator=person, choice=choice)
    judge = ask(queue, users, judged_rubric)
    services.queue_judge_claim(judge.pk, worker="w")
    # The judge always names Response 2 (the second shown): A when B was first, B when A was first.
    answer_all(judge, lambda pair, a_first: "b" if a_first else "a")
    services.queue_judge_finish(judge.pk)

    html = (
        client_for("bob").get(reverse("review:queue_detail", args=[project.slug, queue.pk])).content.decode()
    )
    assert "<b>tone</b>" not in html and "<i>zed</i>" not in html
    label = "judge: &lt;b&gt;tone&lt;/b&gt; (style v1)"
    assert label in html and "&lt;i&gt;zed&lt;/i&gt;" in html
    assert 'data-status="done"' in html and "4 of 4" in html
    # Its orders always disagree: every verdict is a tie, consistency 0 %.
    assert "order-consistent" in html and "0 of 4 pairs" in html
    assert "data-judge-kappa" in html and "vs humans" in html
    # Position bias: each person 4 left of 4; the judge 0 % left in each order and over both.
    bias = html[html.index('id="position-bias"') :]
    rows = [row for row in bias.split("<tr data-bias>")[1:]]
    assert len(rows) == 5  # carol, zed, and the judge over both orders, A first, B first
    assert any("carol" in row and ">100%<" in row for row in rows)
    assert sum(label in row and ">0%<" in row for row in rows) == 3
    assert any("A first" in row for row in rows) and any("B first" in row for row in rows)
    assert 'class="badge judge-badge"' in html


def test_the_judges_panel_offers_the_projects_judge_criteria_and_says_when_there_are_none(
    client_for, project, queue, users, judged_rubric
):
    client = client_for("bob")
    page = client.get(reverse("review:queue_detail", args=[project.slug, queue.pk])).content.decode()
    assert 'id="judge-form"' in page and f'value="{judged_rubric.pk}:&lt;b&gt;tone&lt;/b&gt;"' in page
    response = client.post(
        reverse("review:queue_judge_start", args=[project.slug, queue.pk]),
        {"criterion": f"{judged_rubric.pk}:<b>tone</b>", "worker_queue": "cpu"},
    )
    assert response.status_code == 302
    judge = QueueJudge.objects.get()
    assert judge.status == JudgeStatus.QUEUED and not judge.in_snapshots
    panel = client.get(reverse("review:queue_judges", args=[project.slug, queue.pk]), HTTP_HX_REQUEST="true")
    assert "hx-trigger" in panel.content.decode() and "HX-Refresh" not in panel
    services.queue_judge_fail(judge.pk, error="Could not load the judge model '/gone': <no such file>")
    panel = client.get(reverse("review:queue_judges", args=[project.slug, queue.pk]), HTTP_HX_REQUEST="true")
    assert panel["HX-Refresh"] == "true"  # the judge ended: the page reloads with its agreement
    assert (
        "Could not load the judge model" in panel.content.decode()
        and "&lt;no such file&gt;" in panel.content.decode()
    )


def test_asking_a_judge_is_in_the_activity_log_escaped(client, queue, users, judged_rubric):
    ask(queue, users, judged_rubric)
    activity = Activity.objects.get(project=queue.project, verb="judge.asked")
    assert (activity.actor, activity.queue, activity.data["pairs"]) == (users["bob"], queue, 4)
    client.force_login(users["carol"])
    page = client.get(reverse("review:activity", args=[queue.project.slug])).content.decode()
    assert "asked an LLM judge to annotate" in page
    assert "“judge: &lt;b&gt;tone&lt;/b&gt; (style v1)”, 4 pairs in both orders" in page
    assert "<b>tone</b>" not in page

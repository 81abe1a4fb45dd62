"""A preference queue as the judge check's truth: each pair the annotators decided gives its chosen
response as "right" and the other as "wrong"; an undecided pair (a split vote, a tie) gives nothing."""

from __future__ import annotations

from tests.webapp.factories import make_trajectory, turn
from webapp.review.judge_check import judge_check, samples_from_queue
from webapp.review.models import Judgement, PreferencePair, PreferenceQueue


def answered(run, sample: int, text: str):
    return make_trajectory(
        run,
        sample=sample,
        prompt="What is 3 + 4?",
        turns=[turn("user", "What is 3 + 4?"), turn("assistant", text)],
    )


def test_a_queues_decided_pairs_are_the_truth(project, run, users):
    queue = PreferenceQueue.objects.create(project=project, name="sums")
    right, wrong, other = (
        answered(run, 0, "<answer>7</answer>"),
        answered(run, 1, "<answer>12</answer>"),
        answered(run, 2, "7"),
    )
    decided = PreferencePair.objects.create(
        queue=queue, position=0, a=wrong, b=right, prompt="What is 3 + 4?"
    )
    split = PreferencePair.objects.create(queue=queue, position=1, a=right, b=other)
    for name, pair, choice in (
        ("carol", decided, "b"),
        ("bob", decided, "b"),
        ("carol", split, "a"),
        ("bob", split, "tie"),
    ):
        Judgement.objects.create(pair=pair, annotator=users[name], choice=choice, left_is_a=True)

    samples = samples_from_queue(queue)
    assert [(s.response, s.right) for s in samples] == [
        ("<answer>7</answer>", True),
        ("<answer>12</answer>", False),
    ]
    assert samples[0].prompt == "What is 3 + 4?"


def test_a_queue_nobody_decided_says_there_is_no_truth(project):
    queue = PreferenceQueue.objects.create(project=project, name="empty")
    spec = {"criteria": [{"name": "judge", "kind": "llm_judge", "params": {"model": "smollm2-135m"}}]}
    (check,) = judge_check(spec=spec, queue=queue)
    assert check.agreement is None and "no pair its annotators decided" in check.skipped
    assert judge_check(spec={"criteria": [{"name": "c", "kind": "exact_match"}]}, queue=queue) == []


def test_the_api_checks_against_a_queue_and_says_what_is_wrong(signed_in, project):
    from webapp.experiments.services import rubric_create

    rubric = rubric_create(
        project=project,
        name="judged",
        spec={"criteria": [{"name": "judge", "kind": "llm_judge", "params": {"model": "smollm2-135m"}}]},
        user=project.created_by,
    )
    queue = PreferenceQueue.objects.create(project=project, name="empty")
    url = f"/api/projects/{project.slug}/rubrics/{rubric.pk}/judge-check/"
    answer = signed_in("bob").post(url, {"queue": queue.pk}, format="json")
    assert answer.status_code == 200
    assert answer.json() == [
        {
            "criterion": "judge",
            "untrusted": False,
            "skipped": "the queue has no pair its annotators decided (A or B) yet",
            "agreement": None,
        }
    ]
    neither = signed_in("bob").post(url, {}, format="json")
    assert neither.status_code == 400 and "environment" in str(neither.json())
    assert signed_in("dave").post(url, {"queue": queue.pk}, format="json").status_code == 403

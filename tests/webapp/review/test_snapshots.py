"""Preference dataset snapshots: what a queue's judgements freeze into, for exports and reward models."""

from __future__ import annotations

import pytest

from tests.webapp.review_factories import make_group, make_trajectory
from webapp.review import services
from webapp.review.models import Activity, PreferenceSnapshot, SnapshotPair
from webapp.rollouts.models import Trajectory, Turn


def judge_all(queue, annotator, choose):
    """Let `annotator` judge every pair they are given; choose(pair) -> canonical choice."""
    judged = []
    while (assignment := services.next_pair(queue=queue, annotator=annotator)) is not None:
        services.judgement_submit(
            pair=assignment.pair, annotator=annotator, choice=choose(assignment.pair), rationale="why"
        )
        judged.append(assignment.pair)
    return judged


@pytest.fixture
def two_group_queue(run, users, project):
    make_group(run, group=0, rewards=[1.0, 0.0])
    make_group(run, group=1, rewards=[0.2, 0.9], tool=True)
    return services.queue_create(
        project=project,
        user=users["bob"],
        name="q",
        runs=[run],
        annotators=[users["carol"], users["bob"]],
        overlap=2,
        seed=3,
    )


def test_snapshot_freezes_majority_pairs_with_text_and_provenance(two_group_queue, users):
    queue = two_group_queue
    judge_all(queue, users["carol"], lambda pair: "a")
    judge_all(queue, users["bob"], lambda pair: "a" if pair.a.group_index == 0 else "tie")

    snapshot = services.snapshot_create(queue, users["bob"])

    rows = services.snapshot_pairs(snapshot)
    # group 0: a, a -> chosen a. group 1: a, tie -> one of two is not a majority: left out.
    assert len(rows) == 1
    row = rows[0]
    assert row["prompt"] == "What is 0 + 2?"
    assert row["chosen"] == "<answer>answer 0.0</answer>" and row["rejected"] == "<answer>answer 0.1</answer>"
    assert row["chosen_reward"] == 1.0 and row["rejected_reward"] == 0.0
    assert row["prompt_messages"][-1] == {"role": "user", "content": "What is 0 + 2?"}
    assert row["chosen_messages"] == [{"role": "assistant", "content": "<answer>answer 0.0</answer>"}]
    provenance = row["provenance"]
    assert provenance["snapshot_version"] == 1 and provenance["queue_id"] == queue.pk
    assert provenance["annotators"] == ["bob", "carol"]
    assert provenance["votes"] == {"chosen": 2, "rejected": 0, "tie": 0, "both_bad": 0}
    assert Trajectory.objects.get(pk=provenance["chosen_trajectory"]).sample_index == 0
    assert snapshot.provenance["counts"] == {
        "pairs_in_queue": 2,
        "judged_pairs": 2,
        "judgements": 4,
        "excluded_no_majority": 1,
        "included": 1,
    }
    assert snapshot.provenance["runs"][0]["name"] == "first run" and snapshot.provenance["steps"] == [1]
    assert Activity.objects.filter(verb="snapshot.created").count() == 1


def test_snapshots_are_versioned_and_frozen(two_group_queue, users):
    queue = two_group_queue
    judge_all(queue, users["carol"], lambda pair: "b")
    first = services.snapshot_create(queue, users["bob"])
    frozen = services.snapshot_pairs(first)
    assert sorted(r["chosen"] for r in frozen) == [
        "<answer>answer 0.1</answer>",
        'assistant: <tool>{"name": "add"}</tool>\ntool (add): answer 1.1\nassistant: <answer>answer 1.1</answer>',
    ]
    Turn.objects.update(text="rewritten later")  # the snapshot keeps the text it froze
    second = services.snapshot_create(queue, users["bob"])
    assert (first.version, second.version) == (1, 2)
    assert services.snapshot_pairs(first) == frozen
    assert SnapshotPair.objects.filter(snapshot=second).count() == 2
    assert {r["chosen"] for r in services.snapshot_pairs(second)} == {
        "rewritten later",
        "assistant: rewritten later\ntool (add): answer 1.1\nassistant: rewritten later",
    }
    assert PreferenceSnapshot.objects.filter(queue=queue).count() == 2


def test_a_multi_turn_response_is_a_transcript(run, users, project):
    make_trajectory(run, group=0, sample=0, reward=1.0, answer="6", tool=True)
    make_trajectory(run, group=0, sample=1, reward=0.0, answer="5")
    queue = services.queue_create(
        project=project, user=users["bob"], name="q", runs=[run], annotators=[users["carol"]]
    )
    judge_all(queue, users["carol"], lambda pair: "a")
    row = services.snapshot_pairs(services.snapshot_create(queue, users["bob"]))[0]
    assert (
        row["chosen"]
        == 'assistant: <tool>{"name": "add"}</tool>\ntool (add): 6\nassistant: <answer>6</answer>'
    )
    assert [m["role"] for m in row["chosen_messages"]] == ["assistant", "tool", "assistant"]
    assert row["rejected"] == "<answer>5</answer>"


def test_complete_only_waits_for_every_annotator(two_group_queue, users):
    judge_all(two_group_queue, users["carol"], lambda pair: "a")
    snapshot = services.snapshot_create(two_group_queue, users["bob"], complete_only=True)
    assert services.snapshot_pairs(snapshot) == []
    assert snapshot.provenance["counts"]["excluded_incomplete"] == 2
    assert len(services.snapshot_pairs(services.snapshot_create(two_group_queue, users["bob"]))) == 2


@pytest.mark.parametrize(
    ("choices", "expected"),
    [
        (["a"], "a"),
        (["b", "b", "a"], "b"),
        (["a", "b"], None),
        (["a", "tie"], None),
        (["tie"], None),
        (["both_bad", "a", "a"], "a"),
    ],
)
def test_majority(choices, expected):
    assert services.majority(choices) == expected

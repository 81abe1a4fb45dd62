"""Preference queues: building pairs from runs, assignment with expiring locks, judgements, progress."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone

from tests.webapp.review_factories import make_group, make_trajectory
from webapp.projects.access import access_project
from webapp.projects.models import Membership
from webapp.review import selectors, services
from webapp.review.models import Judgement, PairSlot, PreferencePair


def queue_of(project, users, run, **kwargs):
    options = {"name": "q", "runs": [run], "annotators": [users["carol"]], "seed": 11, **kwargs}
    return services.queue_create(project=project, user=users["bob"], **options)


def pair_keys(queue):
    return sorted(
        (p.a.sample_index, p.b.sample_index, p.a.group_index) for p in queue.pairs.select_related("a", "b")
    )


# --- building ------------------------------------------------------------------------------------------


def test_group_pairs_all_or_best_vs_worst(project, users, run):
    make_group(run, group=0, rewards=[0.5, 1.0, 0.0])
    make_group(run, group=1, rewards=[0.3])  # a group of one gives no pair
    assert pair_keys(queue_of(project, users, run)) == [(0, 1, 0), (0, 2, 0), (1, 2, 0)]
    best_worst = queue_of(project, users, run, name="bw", pairing="best_worst")
    assert pair_keys(best_worst) == [(1, 2, 0)]
    pair = best_worst.pairs.get()
    assert (
        pair.prompt == "What is 0 + 2?" and pair.a.sample_index < pair.b.sample_index
    )  # canonical: by sample


def test_distinct_rewards_skips_equal_rewards_and_steps_filter(project, users, run):
    make_group(run, step=1, group=0, rewards=[1.0, 1.0, 0.0])
    make_group(run, step=2, group=0, rewards=[1.0, 0.0])
    assert pair_keys(queue_of(project, users, run, distinct_rewards=True, steps=[1])) == [
        (0, 2, 0),
        (1, 2, 0),
    ]
    flat = queue_of(project, users, run, name="flat", pairing="best_worst", steps=[1])
    assert flat.pairs.count() == 1


def test_checkpoint_pairs_follow_one_eval_task_across_steps(project, users, run):
    for step, reward in [(0, 0.0), (10, 0.5), (20, 1.0)]:
        answer = f"{step // 10 + 2}"  # the policy's answer changes from step to step
        make_trajectory(run, step=step, split="eval", task_id="sum-1", seed=1, reward=reward, answer=answer)
        make_trajectory(
            run, step=step, split="eval", task_id="sum-1", seed=1, sample=1, reward=reward, answer=answer
        )  # 2nd sample ignored
    make_trajectory(run, step=0, group=1, split="eval", task_id="lonely", reward=0.0)
    make_group(run, step=0, group=5)  # train split: not in a checkpoint queue
    every = queue_of(project, users, run, source="checkpoints")
    steps = sorted((p.a.step, p.b.step) for p in every.pairs.select_related("a", "b"))
    assert steps == [(0, 10), (0, 20), (10, 20)]
    first_last = queue_of(project, users, run, name="fl", source="checkpoints", pairing="first_last")
    assert [(p.a.step, p.b.step) for p in first_last.pairs.select_related("a", "b")] == [(0, 20)]
    assert first_last.build_params["split"] == "eval"


def test_max_pairs_samples_down_reproducibly(project, users, run):
    make_group(run, rewards=[0.1 * i for i in range(8)])  # 28 pairs
    one = queue_of(project, users, run, max_pairs=5, seed=4)
    two = queue_of(project, users, run, name="again", max_pairs=5, seed=4)
    assert one.pairs.count() == 5 and one.build_params["candidate_pairs"] == 28
    assert pair_keys(one) == pair_keys(two)
    assert PairSlot.objects.filter(pair__queue=one).count() == 5


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": ""}, "name"),
        ({"runs": []}, "runs"),
        ({"overlap": 2}, "overlap"),  # one annotator cannot give two judgements per pair
        ({"annotators": []}, "annotators"),
        ({"source": "group", "pairing": "first_last"}, "pairing"),
        ({"lock_seconds": 1}, "lock_seconds"),
    ],
)
def test_invalid_queues_say_what_is_wrong(project, users, run, kwargs, field):
    make_group(run)
    with pytest.raises(ValidationError) as error:
        queue_of(project, users, run, **kwargs)
    assert field in error.value.message_dict


def test_only_annotators_of_this_project_can_be_assigned(project, users, run):
    make_group(run)
    with pytest.raises(ValidationError) as error:
        queue_of(project, users, run, annotators=[users["dave"], users["eve"]])
    assert error.value.message_dict["annotators"] == ["Not annotators in this project: dave, eve."]


def test_runs_without_pairs_are_refused(project, users, run):
    make_trajectory(run)
    with pytest.raises(ValidationError, match="no pairs"):
        queue_of(project, users, run)


# --- assignment -------------------------------------------------------------------------------------


@pytest.fixture
def frank(users, project):
    user = get_user_model().objects.create_user("frank", "frank@example.com", "pw")
    Membership.objects.create(project=project, user=user, role="annotator")
    return user


def test_next_pair_locks_a_pair_and_resume_returns_it_in_the_same_order(project, users, run):
    make_group(run, rewards=[1.0, 0.0, 0.5])
    queue = queue_of(project, users, run)
    carol = users["carol"]
    first = services.next_pair(queue=queue, annotator=carol)
    again = services.next_pair(queue=queue, annotator=carol)
    assert again.pair.pk == first.pair.pk and again.left_is_a == first.left_is_a
    assert (again.left.pk, again.right.pk) == (first.left.pk, first.right.pk)
    slot = PairSlot.objects.get(pair=first.pair)
    assert slot.holder == carol and slot.locked_until > timezone.now() + timedelta(seconds=590)


def test_a_locked_pair_goes_to_someone_else_only_after_the_lock_expires(project, users, run, frank):
    make_group(run, rewards=[1.0, 0.0])  # one pair, overlap 1
    queue = queue_of(project, users, run, annotators=[users["carol"], frank])
    held = services.next_pair(queue=queue, annotator=users["carol"])
    assert services.next_pair(queue=queue, annotator=frank) is None
    later = timezone.now() + timedelta(seconds=601)
    taken = services.next_pair(queue=queue, annotator=frank, now=later)
    assert taken.pair.pk == held.pair.pk
    with pytest.raises(ValidationError, match="lock on this pair expired"):
        services.judgement_submit(pair=held.pair, annotator=users["carol"], choice="a")
    services.judgement_submit(pair=taken.pair, annotator=frank, choice="b")
    assert Judgement.objects.get().annotator == frank


def test_an_expired_lock_nobody_took_still_counts(project, users, run):
    make_group(run, rewards=[1.0, 0.0])
    queue = queue_of(project, users, run)
    held = services.next_pair(queue=queue, annotator=users["carol"], now=timezone.now() - timedelta(hours=1))
    services.judgement_submit(pair=held.pair, annotator=users["carol"], choice="tie")
    assert PreferencePair.objects.get().judgement_count == 1


def test_overlap_gives_each_pair_to_n_different_annotators_and_never_twice_to_one(project, users, run, frank):
    make_group(run, group=0, rewards=[1.0, 0.0])
    make_group(run, group=1, rewards=[1.0, 0.0])
    queue = queue_of(project, users, run, annotators=[users["carol"], frank, users["bob"]], overlap=2)
    seen: dict[str, list[int]] = {}
    for annotator in (users["carol"], frank, users["bob"]):
        while (assignment := services.next_pair(queue=queue, annotator=annotator)) is not None:
            services.judgement_submit(pair=assignment.pair, annotator=annotator, choice="a")
            seen.setdefault(annotator.username, []).append(assignment.pair.pk)
    assert len(seen["carol"]) == len(set(seen["carol"])) == 2
    assert len(seen["frank"]) == 2 and "bob" not in seen  # both pairs were done after two judgements each
    assert [p.judgement_count for p in queue.pairs.all()] == [2, 2]
    progress = selectors.queue_progress(queue)
    assert (progress.done_pairs, progress.total_pairs, progress.judgements, progress.wanted) == (2, 2, 4, 4)
    assert {row.username: row.judged for row in progress.annotators} == {"carol": 2, "frank": 2, "bob": 0}


def test_left_right_order_is_random_per_pair_and_judgements_are_canonical(project, users, run):
    for group in range(12):
        make_group(run, group=group, rewards=[1.0, 0.0])
    queue = queue_of(project, users, run)
    carol = users["carol"]
    orders = []
    while (assignment := services.next_pair(queue=queue, annotator=carol)) is not None:
        orders.append(assignment.left_is_a)
        choice = services.choice_from_side("left", left_is_a=assignment.left_is_a)
        judgement = services.judgement_submit(pair=assignment.pair, annotator=carol, choice=choice)
        # the trajectory shown on the left is the one recorded as preferred
        preferred = assignment.pair.a if judgement.choice == "a" else assignment.pair.b
        assert preferred.pk == assignment.left.pk and judgement.left_is_a == assignment.left_is_a
        assert services.side_of_choice(judgement.choice, left_is_a=judgement.left_is_a) == "left"
    assert True in orders and False in orders


def test_changing_a_judgement_needs_no_lock_and_is_logged(project, users, run):
    make_group(run, rewards=[1.0, 0.0])
    queue = queue_of(project, users, run)
    carol = users["carol"]
    assignment = services.next_pair(queue=queue, annotator=carol)
    services.judgement_submit(pair=assignment.pair, annotator=carol, choice="a")
    services.judgement_submit(
        pair=assignment.pair, annotator=carol, choice="both_bad", rationale="both wrong"
    )
    judgement = Judgement.objects.get()
    assert judgement.choice == "both_bad" and judgement.rationale == "both wrong"
    assert PreferencePair.objects.get().judgement_count == 1
    verbs = list(queue.project.activities.values_list("verb", flat=True))
    assert verbs[:2] == ["judgement.changed", "judgement.recorded"]


def test_a_required_rationale_is_required(project, users, run):
    make_group(run, rewards=[1.0, 0.0])
    queue = queue_of(project, users, run, rationale_required=True)
    assignment = services.next_pair(queue=queue, annotator=users["carol"])
    with pytest.raises(ValidationError) as error:
        services.judgement_submit(pair=assignment.pair, annotator=users["carol"], choice="a", rationale="  ")
    assert "rationale" in error.value.message_dict
    assert not Judgement.objects.exists()


def test_annotators_see_only_their_queues(project, users, run):
    make_group(run, rewards=[1.0, 0.0])
    mine = queue_of(project, users, run, name="carol's")
    queue_of(project, users, run, name="bob's", annotators=[users["bob"]])
    assert [q.name for q in selectors.queue_list(access=access_project(users["carol"], project.slug))] == [
        mine.name
    ]
    assert len(selectors.queue_list(access=access_project(users["bob"], project.slug))) == 2


@pytest.mark.django_db(transaction=True)
def test_concurrent_annotators_never_get_the_same_pair(project, users, run):
    """Eight annotators ask for pairs at once, each in its own thread and connection."""
    for group in range(6):
        make_group(run, group=group, rewards=[1.0, 0.0])
    people = [get_user_model().objects.create_user(f"ann{i}", f"ann{i}@example.com", "pw") for i in range(8)]
    for person in people:
        Membership.objects.create(project=project, user=person, role="annotator")
    queue = queue_of(project, users, run, annotators=people)
    got: dict[str, int | None] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(people))

    def ask(person):
        try:
            barrier.wait()
            assignment = services.next_pair(queue=queue, annotator=person)
            got[person.username] = assignment.pair.pk if assignment else None
        except BaseException as exc:  # reported below; a thread's exception would be lost otherwise
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=ask, args=(p,)) for p in people]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    pairs = [pair for pair in got.values() if pair is not None]
    assert len(pairs) == 6 and len(set(pairs)) == 6  # six pairs, six annotators served, two left waiting
    assert PairSlot.objects.filter(holder__isnull=False).count() == 6


# --- one lock per pair; pairs worth asking about ---------------------------------------------------------


def test_each_pair_gets_its_own_lock_counted_from_when_it_is_handed_out(project, users, run):
    for group in range(3):
        make_group(run, group=group, rewards=[1.0, 0.0])
    queue = queue_of(project, users, run)
    carol, start = users["carol"], timezone.now()
    locks = []
    for minute in range(3):
        now = start + timedelta(minutes=minute)
        assignment = services.next_pair(queue=queue, annotator=carol, now=now)
        locks.append(assignment.locked_until)
        assert assignment.locked_until == now + timedelta(seconds=queue.lock_seconds)
        services.judgement_submit(pair=assignment.pair, annotator=carol, choice="a")
        assert not PairSlot.objects.filter(holder=carol, judged=False).exists()  # no lock left behind
    assert len(set(locks)) == 3


def test_reopening_a_held_pair_renews_its_lock_and_one_lock_is_held_at_a_time(project, users, run):
    for group in range(2):
        make_group(run, group=group, rewards=[1.0, 0.0])
    queue = queue_of(project, users, run)
    carol, start = users["carol"], timezone.now()
    held = services.next_pair(queue=queue, annotator=carol, now=start)
    later = start + timedelta(minutes=7)
    again = services.assignment_for(pair=held.pair, annotator=carol, renew=True, now=later)
    assert again.locked_until == later + timedelta(seconds=queue.lock_seconds)
    # a second tab's claim: the other pair's slot taken by hand; the next hand-out keeps only one
    other = PairSlot.objects.exclude(pair=held.pair).get()
    PairSlot.objects.filter(pk=other.pk).update(holder=carol, locked_until=later)
    services.next_pair(queue=queue, annotator=carol, now=later)
    assert PairSlot.objects.filter(holder=carol, judged=False).count() == 1


def test_a_pair_of_word_for_word_identical_responses_is_never_offered(project, users, run):
    make_trajectory(run, group=0, sample=0, reward=1.0, answer="4")
    make_trajectory(run, group=0, sample=1, reward=0.0, answer="4")  # same words, another reward
    make_trajectory(run, group=0, sample=2, reward=0.5, answer="5")
    queue = queue_of(project, users, run)
    assert pair_keys(queue) == [(0, 2, 0), (1, 2, 0)]
    assert queue.build_params["identical_skipped"] == 1
    with pytest.raises(ValidationError, match="only identical responses"):
        queue_of(project, users, run, name="same", steps=[1], pairing="best_worst", distinct_rewards=False)


def test_equal_rewards_are_skipped_unless_asked_for(project, users, run):
    make_group(run, group=0, rewards=[1.0, 1.0, 0.0])  # different answers, two equal rewards
    assert pair_keys(queue_of(project, users, run)) == [(0, 2, 0), (1, 2, 0)]
    assert len(pair_keys(queue_of(project, users, run, name="all", distinct_rewards=False))) == 3

"""Writes for preference datasets: freezing a queue's judgements into a versioned snapshot."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from django.db import transaction
from django.db.models import Max, Prefetch
from django.utils import timezone

from trainers.learn.turn_credit import judged_turn_rewards
from trainers.texts import trajectory_text
from webapp.experiments.models import Run
from webapp.review.models import (
    ActivityVerb,
    Adjudication,
    Choice,
    PreferencePair,
    PreferenceQueue,
    PreferenceSnapshot,
    SnapshotPair,
    TurnJudgement,
    TurnVerdict,
)
from webapp.review.selectors import QueueVotes, queue_votes
from webapp.review.services.activity import log_activity
from webapp.review.tally import MAJORITY_RULE, RULE, majority

__all__ = ["MAJORITY_RULE", "RULE", "majority", "snapshot_create", "snapshot_pairs"]
from webapp.rollouts.models import Trajectory, Turn

# --- dataset snapshots ---------------------------------------------------------------------------------


def snapshot_create(
    queue: PreferenceQueue, user, *, complete_only: bool = False, include_turns: bool = False
) -> PreferenceSnapshot:
    """Freeze the queue's current judgements into the next version of its preference dataset.

    Each judged pair the tally decides for a side (webapp.review.tally.RULE: the adjudication where
    someone settled the pair, else the majority) becomes one row: the prompt, the chosen and the rejected
    response (text and chat messages), their rewards and the row's provenance. With `complete_only`,
    pairs that have fewer than `overlap` judgements wait for the next snapshot (a settled pair does not
    wait). With `include_turns`, the turn judgements on the queue's trajectories add step-level rows
    after them (`turn_rows`): the data of a step-level reward model.
    """
    with transaction.atomic():
        queue = PreferenceQueue.objects.select_for_update().get(pk=queue.pk)
        version = (queue.snapshots.aggregate(top=Max("version"))["top"] or 0) + 1
        votes = queue_votes(queue)
        winners, counts = _tally(queue, votes, complete_only=complete_only)
        trajectories = _trajectories({pair.a_id for pair, _ in winners} | {pair.b_id for pair, _ in winners})
        rows = [
            _pair_row(index, pair, side, votes, trajectories) for index, (pair, side) in enumerate(winners)
        ]
        if include_turns:
            turn_rows = _turn_rows(queue, start=len(rows))
            counts["turn_rows"] = len(turn_rows)
            rows += turn_rows
        snapshot = _snapshot_write(
            queue,
            user,
            version=version,
            rows=rows,
            votes=votes,
            trajectories=list(trajectories.values()),
            counts=counts,
            options={"complete_only": complete_only, "include_turns": include_turns},
        )
    return snapshot


def _tally(
    queue: PreferenceQueue, votes: QueueVotes, *, complete_only: bool
) -> tuple[list[tuple[PreferencePair, str]], Counter]:
    """The judged pairs that enter the dataset, with their chosen side, and the counts of what was left out
    and why."""
    pairs = list(PreferencePair.objects.filter(queue=queue, pk__in=list(votes.votes)).order_by("position"))
    people = sum(votes.people(pair.pk) for pair in pairs)
    counts: Counter = Counter(pairs_in_queue=queue.pairs.count(), judged_pairs=len(pairs), judgements=people)
    if votes.judge_labels:
        counts["judge_votes"] = sum(len(v) for v in votes.votes.values()) - people
    winners: list[tuple[PreferencePair, str]] = []
    for pair in pairs:
        decision = votes.decision(pair.pk)
        # "complete" counts people: a judge never takes one of the pair's `overlap` places
        if complete_only and not decision.adjudicated and votes.people(pair.pk) < queue.overlap:
            counts["excluded_incomplete"] += 1
            continue
        if decision.adjudicated:
            counts["adjudicated"] += 1
        if decision.side is None:
            counts[f"excluded_{decision.outcome}"] += 1
            continue
        winners.append((pair, decision.side))
    counts["included"] = len(winners)
    return winners, counts


def _trajectories(ids: set[int]) -> dict[int, Trajectory]:
    return (
        Trajectory.objects.filter(pk__in=ids)
        .select_related("run")
        .prefetch_related(Prefetch("turns", queryset=Turn.objects.order_by("index")))
        .in_bulk()
    )


def _adjudication_provenance(adjudication: Adjudication) -> dict[str, Any]:
    return {
        "choice": adjudication.choice,
        "rationale": adjudication.rationale,
        "by": adjudication.adjudicated_by.username if adjudication.adjudicated_by else None,
        "at": adjudication.adjudicated_at.isoformat(),
        "overridden": adjudication.overridden,
    }


def _pair_row(
    index: int, pair: PreferencePair, side: str, votes: QueueVotes, trajectories: dict[int, Trajectory]
) -> SnapshotPair:
    chosen = trajectories[pair.a_id if side == Choice.A else pair.b_id]
    rejected = trajectories[pair.b_id if side == Choice.A else pair.a_id]
    chosen_text = trajectory_text(chosen.prompt, chosen.turns.all())
    rejected_text = trajectory_text(rejected.prompt, rejected.turns.all())
    choices = votes.choices(pair.pk)
    voters = votes.votes.get(pair.pk, [])
    provenance: dict[str, Any] = {
        "pair_id": pair.pk,
        "task_id": chosen.task_id,
        "seed": chosen.seed,
        "chosen_trajectory": chosen.pk,
        "rejected_trajectory": rejected.pk,
        "chosen_run": chosen.run_id,
        "rejected_run": rejected.run_id,
        "chosen_step": chosen.step,
        "rejected_step": rejected.step,
        "votes": {
            "chosen": choices.count(side),
            "rejected": choices.count(Choice.B if side == Choice.A else Choice.A),
            "tie": choices.count(Choice.TIE),
            "both_bad": choices.count(Choice.BOTH_BAD),
        },
        "annotators": sorted({vote.voter for vote in voters if not vote.is_judge}),
    }
    if votes.judge_labels:
        provenance["judges"] = [vote.voter for vote in voters if vote.is_judge]
    if pair.pk in votes.adjudications:
        provenance["adjudication"] = _adjudication_provenance(votes.adjudications[pair.pk])
    return SnapshotPair(
        index=index,
        prompt=pair.prompt or chosen_text.prompt,
        chosen=chosen_text.response,
        rejected=rejected_text.response,
        prompt_messages=chosen_text.prompt_messages,
        chosen_messages=chosen_text.response_messages,
        rejected_messages=rejected_text.response_messages,
        chosen_reward=chosen.reward,
        rejected_reward=rejected.reward,
        provenance=provenance,
    )


def _snapshot_write(
    queue: PreferenceQueue,
    user,
    *,
    version: int,
    rows: list[SnapshotPair],
    votes: QueueVotes,
    trajectories: list[Trajectory],
    counts: Counter,
    options: dict[str, bool],
) -> PreferenceSnapshot:
    run_ids = sorted({t.run_id for t in trajectories})
    runs = dict(Run.objects.filter(pk__in=run_ids).values_list("id", "name"))
    snapshot = PreferenceSnapshot.objects.create(
        project=queue.project,
        queue=queue,
        version=version,
        created_by=user,
        provenance={
            "queue": {
                "id": queue.pk,
                "name": queue.name,
                "source": queue.source,
                "pairing": queue.pairing,
                "overlap": queue.overlap,
                "build": queue.build_params,
            },
            "version": version,
            "annotators": sorted(
                {
                    vote.voter
                    for pair_votes in votes.votes.values()
                    for vote in pair_votes
                    if not vote.is_judge
                }
            ),
            "judges": votes.judge_labels,
            "runs": [{"id": run_id, "name": runs.get(run_id, "")} for run_id in run_ids],
            "steps": sorted({t.step for t in trajectories}),
            "rule": RULE,
            **options,
            "counts": dict(counts),
            "created_by": getattr(user, "username", None),
            "created_at": timezone.now().isoformat(),
        },
    )
    for row in rows:
        row.snapshot = snapshot
    SnapshotPair.objects.bulk_create(rows, batch_size=500)
    log_activity(
        queue.project, user, ActivityVerb.SNAPSHOT_CREATED, queue=queue, version=version, pairs=len(rows)
    )
    return snapshot


def snapshot_pairs(snapshot: PreferenceSnapshot) -> list[dict[str, Any]]:
    """The snapshot's rows as plain dicts, in order: prompt, chosen, rejected (strings), chosen_reward,
    rejected_reward, prompt_messages / chosen_messages / rejected_messages ([{role, content}]) and
    provenance (the row's, plus the snapshot's queue id and version)."""
    dataset = {
        "queue_id": snapshot.queue_id,
        "snapshot_id": snapshot.pk,
        "snapshot_version": snapshot.version,
    }
    return [
        {
            "prompt": row.prompt,
            "chosen": row.chosen,
            "rejected": row.rejected,
            "chosen_reward": row.chosen_reward,
            "rejected_reward": row.rejected_reward,
            "prompt_messages": row.prompt_messages,
            "chosen_messages": row.chosen_messages,
            "rejected_messages": row.rejected_messages,
            "provenance": {**dataset, **row.provenance},
        }
        for row in snapshot.pairs.order_by("index")
    ]


# --- step-level rows from turn judgements ----------------------------------------------------------------

TURN_ROWS_RULE = (
    "turns: a turn preference becomes a row (the winner's conversation up to its turn chosen, the "
    "other's up to the same turn rejected); a trajectory's 'went wrong' marks become its judged "
    "per-turn rewards (trainers.learn.turn_credit) and each labelled turn a row between the conversation up to "
    "it and up to the previous assistant turn — chosen the later one for a positive label, the earlier "
    "for a negative one. A reward model trained on them and scored per turn (learned_reward, per_turn) "
    "gives a marked turn a negative reward."
)


def _prefix(trajectory: Trajectory, upto: int | None) -> Any:
    """The trajectory's conversation up to and including turn `upto` (None: before the first assistant
    turn), rendered as the per-turn learned reward renders it."""
    turns = list(trajectory.turns.all())
    if upto is None:
        first = next((i for i, t in enumerate(turns) if t.role == "assistant"), len(turns))
        kept = turns[:first]
    else:
        kept = [t for t in turns if t.index <= upto]
    return trajectory_text(trajectory.prompt, kept)


def _turn_row(
    index: int,
    chosen: tuple[Trajectory, int | None],
    rejected: tuple[Trajectory, int | None],
    **provenance: Any,
) -> SnapshotPair:
    chosen_text, rejected_text = _prefix(*chosen), _prefix(*rejected)
    return SnapshotPair(
        index=index,
        prompt=chosen_text.prompt,
        chosen=chosen_text.response,
        rejected=rejected_text.response,
        prompt_messages=chosen_text.prompt_messages,
        chosen_messages=chosen_text.response_messages,
        rejected_messages=rejected_text.response_messages,
        chosen_reward=None,
        rejected_reward=None,
        provenance={
            "kind": "turn",
            "task_id": chosen[0].task_id,
            "chosen_trajectory": chosen[0].pk,
            "rejected_trajectory": rejected[0].pk,
            "chosen_run": chosen[0].run_id,
            "rejected_run": rejected[0].run_id,
            "chosen_step": chosen[0].step,
            "rejected_step": rejected[0].step,
            **provenance,
        },
    )


def _turn_rows(queue: PreferenceQueue, *, start: int) -> list[SnapshotPair]:
    """Step-level rows from the turn judgements on the queue's trajectories (TURN_ROWS_RULE)."""
    ids = set(queue.pairs.values_list("a_id", flat=True)) | set(queue.pairs.values_list("b_id", flat=True))
    judgements = list(
        TurnJudgement.objects.filter(trajectory_id__in=ids)
        .select_related("annotator")
        .order_by("trajectory_id", "created_at", "id")
    )
    needed = ids & ({j.trajectory_id for j in judgements} | {j.other_id for j in judgements if j.other_id})
    trajectories = (
        Trajectory.objects.filter(pk__in=needed)
        .prefetch_related(Prefetch("turns", queryset=Turn.objects.order_by("index")))
        .in_bulk()
    )
    rows: list[SnapshotPair] = []
    for j in judgements:
        if j.verdict == TurnVerdict.BETTER and j.other_id in trajectories:
            rows.append(
                _turn_row(
                    start + len(rows),
                    (trajectories[j.trajectory_id], j.turn_index),
                    (trajectories[j.other_id], j.other_turn_index),
                    turn_index=j.turn_index,
                    label="better",
                    annotators=[j.annotator.username],
                )
            )
    marks: dict[int, list[TurnJudgement]] = defaultdict(list)
    for j in judgements:
        if j.verdict == TurnVerdict.WRONG:
            marks[j.trajectory_id].append(j)
    for trajectory_id, mine in marks.items():
        trajectory = trajectories[trajectory_id]
        assistant = [t.index for t in trajectory.turns.all() if t.role == "assistant"]
        labels = judged_turn_rewards(assistant, wrong_marks=[j.turn_index for j in mine])
        annotators = sorted({j.annotator.username for j in mine})
        for position, turn in enumerate(assistant):
            label = labels.get(turn, 0.0)
            if label == 0.0:
                continue
            after, before = (trajectory, turn), (trajectory, assistant[position - 1] if position else None)
            chosen, rejected = (after, before) if label > 0 else (before, after)
            rows.append(
                _turn_row(
                    start + len(rows), chosen, rejected, turn_index=turn, label=label, annotators=annotators
                )
            )
    return rows

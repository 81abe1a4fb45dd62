"""Writes for preference queues: pairing trajectories, assigning annotators, handing out pairs under
expiring locks, recording judgements."""

from __future__ import annotations

import itertools
import random
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, Prefetch, Q
from django.utils import timezone

from trainers.texts import trajectory_text
from webapp.experiments.models import Run
from webapp.projects.access import Capability
from webapp.projects.models import Membership, Project
from webapp.review.models import (
    ActivityVerb,
    Choice,
    Judgement,
    Pairing,
    PairSlot,
    PairSource,
    PreferencePair,
    PreferenceQueue,
)
from webapp.review.services.activity import log_activity
from webapp.review.services.collaboration import MAX_COMMENT
from webapp.rollouts.models import Split, Trajectory, Turn

MAX_QUEUE_PAIRS = 5_000
MAX_OVERLAP = 10
DEFAULT_LOCK_SECONDS = 600


# --- preference queues ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Candidate:
    id: int
    run_id: int
    step: int
    group_index: int
    sample_index: int
    reward: float


def _group_pairs(
    runs: Sequence[Run], *, pairing: str, distinct_rewards: bool, steps: Sequence[int] | None, split: str
) -> list[tuple[int, int]]:
    """Pairs of siblings: trajectories of one (run, step, split, group)."""
    selected = Trajectory.objects.filter(run__in=runs, split=split)
    if steps:
        selected = selected.filter(step__in=list(steps))
    rows = selected.order_by("run_id", "step", "group_index", "sample_index", "id").values_list(
        "id", "run_id", "step", "group_index", "sample_index", "reward"
    )
    pairs: list[tuple[int, int]] = []
    for _, members in itertools.groupby(
        (_Candidate(*row) for row in rows.iterator()), key=lambda c: (c.run_id, c.step, c.group_index)
    ):
        group = list(members)
        if len(group) < 2:
            continue
        if pairing == Pairing.BEST_WORST:
            best = max(group, key=lambda c: (c.reward, -c.sample_index))
            worst = min(group, key=lambda c: (c.reward, c.sample_index))
            candidates = [(best, worst)] if best.id != worst.id else []
        else:
            candidates = list(itertools.combinations(group, 2))
        for first, second in candidates:
            if distinct_rewards and first.reward == second.reward:
                continue
            a, b = sorted((first, second), key=lambda c: c.sample_index)
            pairs.append((a.id, b.id))
    return pairs


def _checkpoint_pairs(
    runs: Sequence[Run], *, pairing: str, distinct_rewards: bool, steps: Sequence[int] | None
) -> list[tuple[int, int]]:
    """Pairs of the same evaluation task (task id and seed) at different steps: one trajectory per
    (run, step) — the first sample — and then every two of them, or the earliest against the latest."""
    selected = Trajectory.objects.filter(run__in=runs, split=Split.EVAL)
    if steps:
        selected = selected.filter(step__in=list(steps))
    rows = selected.order_by("task_id", "seed", "step", "run_id", "sample_index", "id").values_list(
        "task_id", "seed", "id", "run_id", "step", "group_index", "sample_index", "reward"
    )
    pairs: list[tuple[int, int]] = []
    for _, members in itertools.groupby(rows.iterator(), key=lambda r: (r[0], r[1])):
        per_checkpoint: dict[tuple[int, int], _Candidate] = {}
        for row in members:
            candidate = _Candidate(*row[2:])
            per_checkpoint.setdefault((candidate.step, candidate.run_id), candidate)
        ordered = [per_checkpoint[key] for key in sorted(per_checkpoint)]
        if len(ordered) < 2:
            continue
        if pairing == Pairing.FIRST_LAST:
            candidates = [(ordered[0], ordered[-1])] if ordered[0].step != ordered[-1].step else []
        else:
            candidates = [
                (x, y)
                for x, y in itertools.combinations(ordered, 2)
                if (x.step, x.run_id) != (y.step, y.run_id)
            ]
        for earlier, later in candidates:
            if distinct_rewards and earlier.reward == later.reward:
                continue
            pairs.append((earlier.id, later.id))
    return pairs


def _without_identical_responses(candidates: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The candidate pairs whose two responses differ as the annotation page shows them (the messages
    after the prompt): a pair of word-for-word identical responses asks the annotator nothing."""
    ids = {a for a, _ in candidates} | {b for _, b in candidates}
    in_order = Turn.objects.order_by("index")
    responses = {
        trajectory.pk: trajectory_text(trajectory.prompt, trajectory.turns.all()).response_messages
        for trajectory in Trajectory.objects.filter(pk__in=ids)
        .prefetch_related(Prefetch("turns", queryset=in_order))
        .iterator(chunk_size=500)
    }
    return [(a, b) for a, b in candidates if responses.get(a) != responses.get(b)]


VALID_PAIRINGS: dict[str, tuple[str, ...]] = {
    PairSource.GROUP: (Pairing.ALL, Pairing.BEST_WORST),
    PairSource.CHECKPOINTS: (Pairing.ALL, Pairing.FIRST_LAST),
}


def _validate_annotators(project: Project, annotators: Sequence) -> list:
    annotators = list(dict.fromkeys(annotators))
    if not annotators:
        raise ValidationError({"annotators": ["Assign at least one annotator."]})
    memberships = {m.user_id: m for m in Membership.objects.filter(project=project, user__in=annotators)}
    unfit = [
        u.username
        for u in annotators
        if u.pk not in memberships or not memberships[u.pk].can(Capability.ANNOTATE)
    ]
    if unfit:
        raise ValidationError({"annotators": [f"Not annotators in this project: {', '.join(unfit)}."]})
    return annotators


def _candidate_pairs(
    runs: Sequence[Run],
    *,
    source: str,
    pairing: str,
    distinct_rewards: bool,
    steps: Sequence[int] | None,
    split: str,
) -> tuple[list[tuple[int, int]], int]:
    """The pairs a queue may hold, and how many more were dropped for identical responses."""
    if source == PairSource.GROUP:
        candidates = _group_pairs(
            runs, pairing=pairing, distinct_rewards=distinct_rewards, steps=steps, split=split
        )
    else:
        candidates = _checkpoint_pairs(runs, pairing=pairing, distinct_rewards=distinct_rewards, steps=steps)
    distinct = _without_identical_responses(candidates)
    if not distinct:
        raise ValidationError(
            {
                "runs": [
                    "These runs give no pairs with these settings (no group of two or more, "
                    "no evaluation task seen at two steps, or only identical responses)."
                ]
            }
        )
    return distinct, len(candidates) - len(distinct)


@transaction.atomic
def queue_create(
    *,
    project: Project,
    user,
    name: str,
    runs: Sequence[Run],
    annotators: Sequence,
    source: str = PairSource.GROUP,
    pairing: str = Pairing.ALL,
    overlap: int = 1,
    instructions: str = "",
    rationale_required: bool = False,
    distinct_rewards: bool = True,
    steps: Sequence[int] | None = None,
    split: str = Split.TRAIN,
    max_pairs: int = 1000,
    lock_seconds: int = DEFAULT_LOCK_SECONDS,
    seed: int | None = None,
) -> PreferenceQueue:
    """Build a queue of pairs from runs of the project.

    `source=group`: siblings of a GRPO group (all pairs, or best vs worst reward) on `split`;
    `source=checkpoints`: the same evaluation task at two steps (all pairs, or earliest vs latest).
    More candidate pairs than `max_pairs` are sampled down (with the queue's seed); the pairs' order is
    shuffled too, so an annotator does not meet every pair of one group in a row.
    """
    errors: dict[str, list[str]] = {}
    name = (name or "").strip()
    if not name:
        errors["name"] = ["A queue needs a name."]
    elif len(name) > 120:
        errors["name"] = ["At most 120 characters."]
    elif PreferenceQueue.objects.filter(project=project, name=name).exists():
        errors["name"] = [f"A queue named {name!r} already exists in this project."]
    runs = list(runs)
    if not runs:
        errors["runs"] = ["Choose at least one run."]
    elif any(run.project_id != project.pk for run in runs):
        errors["runs"] = ["Runs must belong to this project."]
    if source not in VALID_PAIRINGS:
        errors["source"] = [f"Choose one of: {', '.join(PairSource.values)}."]
    elif pairing not in VALID_PAIRINGS[source]:
        errors["pairing"] = [f"With {source} pairs choose one of: {', '.join(VALID_PAIRINGS[source])}."]
    if split not in Split.values:
        errors["split"] = [f"Choose one of: {', '.join(Split.values)}."]
    if not 1 <= overlap <= MAX_OVERLAP:
        errors["overlap"] = [f"Between 1 and {MAX_OVERLAP} annotators per pair."]
    if not 1 <= max_pairs <= MAX_QUEUE_PAIRS:
        errors["max_pairs"] = [f"Between 1 and {MAX_QUEUE_PAIRS}."]
    if not 30 <= lock_seconds <= 24 * 3600:
        errors["lock_seconds"] = ["Between 30 seconds and a day."]
    try:
        annotators = _validate_annotators(project, annotators)
    except ValidationError as error:
        errors.update(error.message_dict)
        annotators = []
    if annotators and overlap > len(annotators):
        errors["overlap"] = [
            f"Overlap {overlap} needs at least {overlap} annotators; {len(annotators)} assigned."
        ]
    if errors:
        raise ValidationError(errors)

    steps = sorted(set(steps)) if steps else None
    candidates, identical = _candidate_pairs(
        runs, source=source, pairing=pairing, distinct_rewards=distinct_rewards, steps=steps, split=split
    )
    seed = secrets.randbits(31) if seed is None else seed
    rng = random.Random(seed)
    found = len(candidates)
    if found > max_pairs:
        candidates = rng.sample(candidates, max_pairs)
    rng.shuffle(candidates)

    queue = PreferenceQueue.objects.create(
        project=project,
        name=name,
        instructions=instructions.strip(),
        source=source,
        pairing=pairing,
        distinct_rewards=distinct_rewards,
        overlap=overlap,
        rationale_required=rationale_required,
        lock_seconds=lock_seconds,
        seed=seed,
        created_by=user,
        build_params={
            "runs": [run.pk for run in runs],
            "steps": steps,
            "split": split if source == PairSource.GROUP else Split.EVAL,
            "max_pairs": max_pairs,
            "candidate_pairs": found,
            "identical_skipped": identical,
        },
    )
    queue.runs.set(runs)
    queue.annotators.set(annotators)
    prompts = dict(Trajectory.objects.filter(pk__in={a for a, _ in candidates}).values_list("id", "prompt"))
    pairs = PreferencePair.objects.bulk_create(
        PreferencePair(queue=queue, position=i, a_id=a, b_id=b, prompt=prompts.get(a, ""))
        for i, (a, b) in enumerate(candidates)
    )
    PairSlot.objects.bulk_create(PairSlot(pair=pair, index=k) for pair in pairs for k in range(overlap))
    log_activity(project, user, ActivityVerb.QUEUE_CREATED, queue=queue, name=queue.name, pairs=len(pairs))
    return queue


def queue_assign(*, queue: PreferenceQueue, user, annotators: Sequence) -> None:
    """Replace the queue's annotators. Judgements already made stay, whoever made them."""
    annotators = _validate_annotators(queue.project, annotators)
    if queue.overlap > len(annotators):
        raise ValidationError(
            {"annotators": [f"Overlap {queue.overlap} needs at least {queue.overlap} annotators."]}
        )
    queue.annotators.set(annotators)


# --- assignment: locks with expiry -------------------------------------------------------------------


def left_is_a_for(queue: PreferenceQueue, pair_id: int, annotator_id: int) -> bool:
    """The left/right order one annotator sees one pair in: random, but the same every time."""
    return random.Random(f"{queue.seed}:{pair_id}:{annotator_id}").random() < 0.5


@dataclass
class Assignment:
    pair: PreferencePair
    slot: PairSlot | None  # None when revisiting a pair already judged
    left_is_a: bool
    locked_until: datetime | None
    judgement: Judgement | None = None

    @property
    def left(self) -> Trajectory:
        return self.pair.a if self.left_is_a else self.pair.b

    @property
    def right(self) -> Trajectory:
        return self.pair.b if self.left_is_a else self.pair.a


def _pair_with_trajectories(pair_id: int) -> PreferencePair:
    in_order = Turn.objects.order_by("index")
    return (
        PreferencePair.objects.select_related("queue", "a__run", "b__run")
        .prefetch_related(Prefetch("a__turns", queryset=in_order), Prefetch("b__turns", queryset=in_order))
        .get(pk=pair_id)
    )


def _renew(slot_id: int, annotator, until: datetime) -> bool:
    return bool(
        PairSlot.objects.filter(pk=slot_id, holder=annotator, judged=False).update(locked_until=until)
    )


def next_pair(*, queue: PreferenceQueue, annotator, now: datetime | None = None) -> Assignment | None:
    """The pair this annotator should judge now, locked for them until `now + queue.lock_seconds`: one
    lock per pair, counted from the moment the pair is handed out, and never more than one held at once.

    Resume first: a slot they still hold (even if its lock ran out, as long as nobody took it) is
    renewed and returned. Otherwise the first free slot — unheld, or its holder's lock expired — of a
    pair they have not judged is claimed with one conditional UPDATE; losing that race to another
    annotator just moves on to the next slot. None when nothing is left for them.
    """
    now = now or timezone.now()
    until = now + timedelta(seconds=queue.lock_seconds)
    judged = Judgement.objects.filter(pair__queue=queue, annotator=annotator).values("pair_id")
    # A slot held on a pair they judged (two tabs claimed two slots of one pair) goes back to the pool.
    PairSlot.objects.filter(pair__queue=queue, holder=annotator, judged=False, pair_id__in=judged).update(
        holder=None, locked_until=None
    )
    held = list(
        PairSlot.objects.filter(pair__queue=queue, holder=annotator, judged=False).order_by("pair__position")
    )
    for slot in held:
        if _renew(slot.pk, annotator, until):
            # One lock at a time: any other slot they hold (a second tab's claim) goes back to the pool.
            PairSlot.objects.filter(pk__in=[s.pk for s in held if s.pk != slot.pk], holder=annotator).update(
                holder=None, locked_until=None
            )
            slot.locked_until = until
            return Assignment(_pair_with_trajectories(slot.pair_id), slot, slot.left_is_a, until)

    free = (
        PairSlot.objects.filter(pair__queue=queue, judged=False)
        .filter(Q(holder__isnull=True) | Q(locked_until__lt=now))
        .exclude(pair_id__in=judged)
        .order_by("pair__position", "index")
        .values_list("pk", "pair_id")
    )
    seen_pairs: set[int] = set()
    for slot_id, pair_id in free.iterator():
        if pair_id in seen_pairs:
            continue
        seen_pairs.add(pair_id)
        left_is_a = left_is_a_for(queue, pair_id, annotator.pk)
        claimed = (
            PairSlot.objects.filter(pk=slot_id, judged=False)
            .filter(Q(holder__isnull=True) | Q(locked_until__lt=now))
            .update(holder=annotator, locked_until=until, left_is_a=left_is_a)
        )
        if claimed:
            slot = PairSlot.objects.get(pk=slot_id)
            return Assignment(_pair_with_trajectories(pair_id), slot, left_is_a, until)
        # Lost the race for this slot: the pair may still have another free one, so look again later.
        seen_pairs.discard(pair_id)
    return None


def assignment_for(
    *, pair: PreferencePair, annotator, renew: bool = False, now: datetime | None = None
) -> Assignment | None:
    """The pair as this annotator sees it: their judgement (to revisit and change) or their held slot —
    its lock renewed from `now` when `renew` (the page showing the pair again), as next_pair does."""
    judgement = Judgement.objects.filter(pair=pair, annotator=annotator).first()
    full = _pair_with_trajectories(pair.pk)
    if judgement is not None:
        return Assignment(full, None, judgement.left_is_a, None, judgement)
    slot = PairSlot.objects.filter(pair=pair, holder=annotator, judged=False).first()
    if slot is None:
        return None
    if renew:
        until = (now or timezone.now()) + timedelta(seconds=pair.queue.lock_seconds)
        if _renew(slot.pk, annotator, until):
            slot.locked_until = until
    return Assignment(full, slot, slot.left_is_a, slot.locked_until)


def choice_from_side(side: str, *, left_is_a: bool) -> str:
    """What the annotator pressed (left / right / tie / both_bad) in canonical A/B terms."""
    if side == "left":
        return Choice.A if left_is_a else Choice.B
    if side == "right":
        return Choice.B if left_is_a else Choice.A
    if side in (Choice.TIE, Choice.BOTH_BAD):
        return side
    raise ValidationError({"choice": ["Choose left, right, tie or both bad."]})


def judgement_submit(*, pair: PreferencePair, annotator, choice: str, rationale: str = "") -> Judgement:
    """Record (or change) an annotator's judgement of a pair, in canonical A/B terms.

    A first judgement needs the annotator to hold one of the pair's slots; it marks the slot judged
    with a conditional UPDATE, so a lock that expired and went to someone else is refused rather than
    counted twice. Changing an earlier judgement needs no lock.
    """
    queue = pair.queue
    if choice not in Choice.values:
        raise ValidationError({"choice": [f"Choose one of: {', '.join(Choice.values)}."]})
    rationale = (rationale or "").strip()
    if queue.rationale_required and not rationale:
        raise ValidationError({"rationale": ["This queue asks for a rationale with every judgement."]})
    if len(rationale) > MAX_COMMENT:
        raise ValidationError({"rationale": [f"At most {MAX_COMMENT} characters."]})
    with transaction.atomic():
        existing = Judgement.objects.select_for_update().filter(pair=pair, annotator=annotator).first()
        if existing is not None:
            if (existing.choice, existing.rationale) != (choice, rationale):
                before = existing.choice
                existing.choice, existing.rationale = choice, rationale
                existing.save(update_fields=["choice", "rationale", "updated_at"])
                log_activity(
                    queue.project,
                    annotator,
                    ActivityVerb.JUDGEMENT_CHANGED,
                    queue=queue,
                    pair=pair.pk,
                    before=before,
                    choice=choice,
                )
            return existing
        slot = PairSlot.objects.filter(pair=pair, holder=annotator, judged=False).first()
        if slot is None or not PairSlot.objects.filter(pk=slot.pk, holder=annotator, judged=False).update(
            judged=True, locked_until=None
        ):
            raise ValidationError(
                "Your lock on this pair expired and another annotator took it. Take the next pair."
            )
        judgement = Judgement.objects.create(
            pair=pair, annotator=annotator, choice=choice, rationale=rationale, left_is_a=slot.left_is_a
        )
        PreferencePair.objects.filter(pk=pair.pk).update(judgement_count=F("judgement_count") + 1)
        log_activity(
            queue.project,
            annotator,
            ActivityVerb.JUDGEMENT_RECORDED,
            queue=queue,
            pair=pair.pk,
            choice=choice,
        )
    return judgement

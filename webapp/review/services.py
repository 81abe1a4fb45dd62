"""Writes for review: comments, tags, flags, mentions, the activity log, preference queues, judgements and
dataset snapshots. Views call these after `webapp.projects.access` has checked the caller's role; the
rules that depend on who owns what (only the author edits a comment, only assigned annotators judge)
are checked here. Every write is atomic and records who did it in the project's Activity log.
"""

from __future__ import annotations

import itertools
import random
import re
import secrets
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F, Max, Prefetch, Q
from django.utils import timezone

from trainers.texts import trajectory_text
from webapp.experiments.models import Run
from webapp.projects.models import ROLE_CAPABILITIES, Membership, Project
from webapp.review.models import (
    Activity,
    ActivityVerb,
    Choice,
    Comment,
    Flag,
    FlagReason,
    Judgement,
    Notification,
    Pairing,
    PairSlot,
    PairSource,
    PreferencePair,
    PreferenceQueue,
    PreferenceSnapshot,
    SnapshotPair,
    Tag,
    TrajectoryTag,
    normalized_tag_name,
)
from webapp.rollouts.models import Split, Trajectory, Turn

MAX_COMMENT = 10_000
MAX_TAG = 50
MAX_QUEUE_PAIRS = 5_000
MAX_OVERLAP = 10
DEFAULT_LOCK_SECONDS = 600
# Django usernames: letters, digits and @ . + - _ ; a mention ends before trailing punctuation.
MENTION = re.compile(r"(?<![\w@.+-])@([\w.@+-]+)")


def _log(project: Project, actor, verb: str, *, trajectory=None, queue=None, **data: Any) -> Activity:
    return Activity.objects.create(project=project, actor=actor, verb=verb, trajectory=trajectory, queue=queue, data=data)


def _can(project: Project, user, capability: str) -> bool:
    role = Membership.objects.filter(project=project, user=user).values_list("role", flat=True).first()
    return role is not None and capability in ROLE_CAPABILITIES[role]


# --- comments and mentions --------------------------------------------------------------------------


def mentioned_usernames(body: str) -> list[str]:
    """`@name` tokens in order of appearance, without trailing sentence punctuation, each once."""
    names = [match.rstrip(".-+@") for match in MENTION.findall(body)]
    return list(dict.fromkeys(name for name in names if name))


def _notify_mentions(comment: Comment, actor) -> list[Notification]:
    names = mentioned_usernames(comment.body)
    if not names:
        return []
    lowered = {name.lower() for name in names}
    members = (
        Membership.objects.filter(project=comment.project)
        .exclude(user=actor)
        .select_related("user")
    )
    recipients = [m.user for m in members if m.user.username.lower() in lowered]
    created = []
    for recipient in recipients:
        notification, made = Notification.objects.get_or_create(
            recipient=recipient,
            comment=comment,
            defaults={"project": comment.project, "actor": actor, "trajectory": comment.trajectory},
        )
        if made:
            created.append(notification)
    return created


def _clean_body(body: str) -> str:
    body = (body or "").strip()
    if not body:
        raise ValidationError({"body": ["Write something first."]})
    if len(body) > MAX_COMMENT:
        raise ValidationError({"body": [f"At most {MAX_COMMENT} characters."]})
    return body


@transaction.atomic
def comment_create(*, trajectory: Trajectory, author, body: str, turn_index: int | None = None) -> Comment:
    body = _clean_body(body)
    if turn_index is not None and not trajectory.turns.filter(index=turn_index).exists():
        raise ValidationError({"turn_index": [f"This trajectory has no turn {turn_index}."]})
    project = trajectory.run.project
    comment = Comment.objects.create(project=project, trajectory=trajectory, turn_index=turn_index, author=author, body=body)
    _notify_mentions(comment, author)
    _log(project, author, ActivityVerb.COMMENT_ADDED, trajectory=trajectory, comment=comment.pk, turn_index=turn_index)
    return comment


@transaction.atomic
def comment_edit(*, comment: Comment, user, body: str) -> Comment:
    """Only the author edits; the previous text is kept in the activity log. New mentions notify."""
    if comment.author_id != user.pk:
        raise ValidationError("Only the author can edit a comment.")
    if comment.is_deleted:
        raise ValidationError("This comment was deleted.")
    body = _clean_body(body)
    if body == comment.body:
        return comment
    previous = comment.body
    comment.body, comment.edited_at = body, timezone.now()
    comment.save(update_fields=["body", "edited_at"])
    _notify_mentions(comment, user)
    _log(comment.project, user, ActivityVerb.COMMENT_EDITED, trajectory=comment.trajectory, comment=comment.pk, previous=previous)
    return comment


@transaction.atomic
def comment_delete(*, comment: Comment, user) -> Comment:
    """The author, or a project owner (moderation), deletes a comment: its text is gone, the row and the
    fact that it was deleted (by whom) stay."""
    if comment.author_id != user.pk and not _can(comment.project, user, "manage"):
        raise ValidationError("Only the author or a project owner can delete a comment.")
    if comment.is_deleted:
        return comment
    comment.body, comment.deleted_at = "", timezone.now()
    comment.save(update_fields=["body", "deleted_at"])
    Notification.objects.filter(comment=comment).delete()
    _log(comment.project, user, ActivityVerb.COMMENT_DELETED, trajectory=comment.trajectory, comment=comment.pk)
    return comment


# --- tags and flags ----------------------------------------------------------------------------------


def _clean_tag_name(name: str) -> str:
    name = normalized_tag_name(name)
    if not name:
        raise ValidationError({"name": ["A tag needs a name."]})
    if len(name) > MAX_TAG:
        raise ValidationError({"name": [f"At most {MAX_TAG} characters."]})
    return name


@transaction.atomic
def tag_add(*, trajectory: Trajectory, user, name: str) -> TrajectoryTag:
    """Tag a trajectory, creating the project's tag of that name (case-insensitive) on first use."""
    name = _clean_tag_name(name)
    project = trajectory.run.project
    tag = Tag.objects.filter(project=project, name__iexact=name).first()
    if tag is None:
        try:
            with transaction.atomic():
                tag = Tag.objects.create(project=project, name=name)
        except IntegrityError:  # created by someone else a moment ago
            tag = Tag.objects.get(project=project, name=name)
    link, created = TrajectoryTag.objects.get_or_create(trajectory=trajectory, tag=tag, defaults={"added_by": user})
    if created:
        _log(project, user, ActivityVerb.TAG_ADDED, trajectory=trajectory, tag=tag.name)
    return link


@transaction.atomic
def tag_remove(*, trajectory: Trajectory, user, tag: Tag) -> bool:
    deleted, _ = TrajectoryTag.objects.filter(trajectory=trajectory, tag=tag).delete()
    if deleted:
        _log(trajectory.run.project, user, ActivityVerb.TAG_REMOVED, trajectory=trajectory, tag=tag.name)
    return bool(deleted)


@transaction.atomic
def flag_raise(*, trajectory: Trajectory, user, reason: str, note: str = "") -> Flag:
    if reason not in FlagReason.values:
        raise ValidationError({"reason": [f"Choose one of: {', '.join(FlagReason.values)}."]})
    note = (note or "").strip()
    if len(note) > MAX_COMMENT:
        raise ValidationError({"note": [f"At most {MAX_COMMENT} characters."]})
    project = trajectory.run.project
    flag = Flag.objects.create(project=project, trajectory=trajectory, reason=reason, note=note, raised_by=user)
    _log(project, user, ActivityVerb.FLAG_RAISED, trajectory=trajectory, flag=flag.pk, reason=reason)
    return flag


@transaction.atomic
def flag_resolve(*, flag: Flag, user) -> Flag:
    """Resolve an open flag (conditional update: resolving twice records it once)."""
    now = timezone.now()
    if Flag.objects.filter(pk=flag.pk, resolved_at__isnull=True).update(resolved_at=now, resolved_by=user):
        _log(flag.project, user, ActivityVerb.FLAG_RESOLVED, trajectory=flag.trajectory, flag=flag.pk, reason=flag.reason)
    flag.refresh_from_db()
    return flag


def notifications_mark_read(*, user, ids: Iterable[int] | None = None) -> int:
    unread = Notification.objects.filter(recipient=user, read_at__isnull=True)
    if ids is not None:
        unread = unread.filter(pk__in=list(ids))
    return unread.update(read_at=timezone.now())


# --- preference queues ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Candidate:
    id: int
    run_id: int
    step: int
    group_index: int
    sample_index: int
    reward: float


def _group_pairs(runs: Sequence[Run], *, pairing: str, distinct_rewards: bool, steps: Sequence[int] | None,
                 split: str) -> list[tuple[int, int]]:
    """Pairs of siblings: trajectories of one (run, step, split, group)."""
    rows = Trajectory.objects.filter(run__in=runs, split=split)
    if steps:
        rows = rows.filter(step__in=list(steps))
    rows = rows.order_by("run_id", "step", "group_index", "sample_index", "id").values_list(
        "id", "run_id", "step", "group_index", "sample_index", "reward"
    )
    pairs: list[tuple[int, int]] = []
    for _, members in itertools.groupby((_Candidate(*row) for row in rows.iterator()), key=lambda c: (c.run_id, c.step, c.group_index)):
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


def _checkpoint_pairs(runs: Sequence[Run], *, pairing: str, distinct_rewards: bool,
                      steps: Sequence[int] | None) -> list[tuple[int, int]]:
    """Pairs of the same evaluation task (task id and seed) at different steps: one trajectory per
    (run, step) — the first sample — and then every two of them, or the earliest against the latest."""
    rows = Trajectory.objects.filter(run__in=runs, split=Split.EVAL)
    if steps:
        rows = rows.filter(step__in=list(steps))
    rows = rows.order_by("task_id", "seed", "step", "run_id", "sample_index", "id").values_list(
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
            candidates = [(x, y) for x, y in itertools.combinations(ordered, 2) if (x.step, x.run_id) != (y.step, y.run_id)]
        for earlier, later in candidates:
            if distinct_rewards and earlier.reward == later.reward:
                continue
            pairs.append((earlier.id, later.id))
    return pairs


VALID_PAIRINGS = {
    PairSource.GROUP: (Pairing.ALL, Pairing.BEST_WORST),
    PairSource.CHECKPOINTS: (Pairing.ALL, Pairing.FIRST_LAST),
}


def _validate_annotators(project: Project, annotators: Sequence) -> list:
    annotators = list(dict.fromkeys(annotators))
    if not annotators:
        raise ValidationError({"annotators": ["Assign at least one annotator."]})
    roles = dict(Membership.objects.filter(project=project, user__in=annotators).values_list("user_id", "role"))
    unfit = [u.username for u in annotators if "annotate" not in ROLE_CAPABILITIES.get(roles.get(u.pk, ""), ())]
    if unfit:
        raise ValidationError({"annotators": [f"Not annotators in this project: {', '.join(unfit)}."]})
    return annotators


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
    distinct_rewards: bool = False,
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
        errors["overlap"] = [f"Overlap {overlap} needs at least {overlap} annotators; {len(annotators)} assigned."]
    if errors:
        raise ValidationError(errors)

    steps = sorted(set(steps)) if steps else None
    if source == PairSource.GROUP:
        candidates = _group_pairs(runs, pairing=pairing, distinct_rewards=distinct_rewards, steps=steps, split=split)
    else:
        candidates = _checkpoint_pairs(runs, pairing=pairing, distinct_rewards=distinct_rewards, steps=steps)
    if not candidates:
        raise ValidationError({"runs": ["These runs give no pairs with these settings (no group of two or more, "
                                         "or no evaluation task seen at two steps)."]})
    seed = secrets.randbits(31) if seed is None else seed
    rng = random.Random(seed)
    found = len(candidates)
    if found > max_pairs:
        candidates = rng.sample(candidates, max_pairs)
    rng.shuffle(candidates)

    queue = PreferenceQueue.objects.create(
        project=project, name=name, instructions=instructions.strip(), source=source, pairing=pairing,
        distinct_rewards=distinct_rewards, overlap=overlap, rationale_required=rationale_required,
        lock_seconds=lock_seconds, seed=seed, created_by=user,
        build_params={"runs": [run.pk for run in runs], "steps": steps, "split": split if source == PairSource.GROUP else Split.EVAL,
                      "max_pairs": max_pairs, "candidate_pairs": found},
    )
    queue.runs.set(runs)
    queue.annotators.set(annotators)
    prompts = dict(Trajectory.objects.filter(pk__in={a for a, _ in candidates}).values_list("id", "prompt"))
    pairs = PreferencePair.objects.bulk_create(
        PreferencePair(queue=queue, position=i, a_id=a, b_id=b, prompt=prompts.get(a, ""))
        for i, (a, b) in enumerate(candidates)
    )
    PairSlot.objects.bulk_create(PairSlot(pair=pair, index=k) for pair in pairs for k in range(overlap))
    _log(project, user, ActivityVerb.QUEUE_CREATED, queue=queue, name=queue.name, pairs=len(pairs))
    return queue


def queue_assign(*, queue: PreferenceQueue, user, annotators: Sequence) -> None:
    """Replace the queue's annotators. Judgements already made stay, whoever made them."""
    annotators = _validate_annotators(queue.project, annotators)
    if queue.overlap > len(annotators):
        raise ValidationError({"annotators": [f"Overlap {queue.overlap} needs at least {queue.overlap} annotators."]})
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
    return bool(PairSlot.objects.filter(pk=slot_id, holder=annotator, judged=False).update(locked_until=until))


def next_pair(*, queue: PreferenceQueue, annotator, now: datetime | None = None) -> Assignment | None:
    """The pair this annotator should judge now, locked for them until `now + queue.lock_seconds`.

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
    for slot in PairSlot.objects.filter(pair__queue=queue, holder=annotator, judged=False).order_by("pair__position"):
        if _renew(slot.pk, annotator, until):
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


def assignment_for(*, pair: PreferencePair, annotator) -> Assignment | None:
    """The pair as this annotator sees it: their judgement (to revisit and change) or their held slot."""
    judgement = Judgement.objects.filter(pair=pair, annotator=annotator).first()
    full = _pair_with_trajectories(pair.pk)
    if judgement is not None:
        return Assignment(full, None, judgement.left_is_a, None, judgement)
    slot = PairSlot.objects.filter(pair=pair, holder=annotator, judged=False).first()
    if slot is not None:
        return Assignment(full, slot, slot.left_is_a, slot.locked_until)
    return None


def choice_from_side(side: str, *, left_is_a: bool) -> str:
    """What the annotator pressed (left / right / tie / both_bad) in canonical A/B terms."""
    if side == "left":
        return Choice.A if left_is_a else Choice.B
    if side == "right":
        return Choice.B if left_is_a else Choice.A
    if side in (Choice.TIE, Choice.BOTH_BAD):
        return side
    raise ValidationError({"choice": ["Choose left, right, tie or both bad."]})


def side_of_choice(choice: str, *, left_is_a: bool) -> str:
    if choice in (Choice.TIE, Choice.BOTH_BAD):
        return choice
    return "left" if (choice == Choice.A) == left_is_a else "right"


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
                _log(queue.project, annotator, ActivityVerb.JUDGEMENT_CHANGED, queue=queue, pair=pair.pk,
                     before=before, choice=choice)
            return existing
        slot = PairSlot.objects.filter(pair=pair, holder=annotator, judged=False).first()
        if slot is None or not PairSlot.objects.filter(pk=slot.pk, holder=annotator, judged=False).update(
            judged=True, locked_until=None
        ):
            raise ValidationError("Your lock on this pair expired and another annotator took it. Take the next pair.")
        judgement = Judgement.objects.create(
            pair=pair, annotator=annotator, choice=choice, rationale=rationale, left_is_a=slot.left_is_a
        )
        PreferencePair.objects.filter(pk=pair.pk).update(judgement_count=F("judgement_count") + 1)
        _log(queue.project, annotator, ActivityVerb.JUDGEMENT_RECORDED, queue=queue, pair=pair.pk, choice=choice)
    return judgement


def release_expired_locks(*, now: datetime | None = None) -> int:
    """Tidy-up only: next_pair already treats an expired lock as free."""
    now = now or timezone.now()
    return PairSlot.objects.filter(judged=False, locked_until__lt=now).update(holder=None, locked_until=None)


# --- dataset snapshots ---------------------------------------------------------------------------------

MAJORITY_RULE = ("majority: a pair enters the dataset when more than half of its judgements pick the same "
                 "side; pairs whose judgements end in tie, both bad or a split vote are left out")


def majority(choices: Sequence[str]) -> str | None:
    """The canonical side ("a" / "b") more than half of `choices` picked, else None."""
    votes = Counter(choices)
    for side in (Choice.A, Choice.B):
        if votes[side] * 2 > len(choices):
            return side
    return None


def _exclusion_reason(choices: Sequence[str]) -> str:
    votes = Counter(choices)
    if votes[Choice.TIE] * 2 > len(choices):
        return "tie"
    if votes[Choice.BOTH_BAD] * 2 > len(choices):
        return "both_bad"
    return "no_majority"


def snapshot_create(queue: PreferenceQueue, user, *, complete_only: bool = False) -> PreferenceSnapshot:
    """Freeze the queue's current judgements into the next version of its preference dataset.

    Each judged pair with a majority (see MAJORITY_RULE) becomes one row: the prompt, the chosen and the
    rejected response (text and chat messages), their rewards and the row's provenance. With
    `complete_only`, pairs that have fewer than `overlap` judgements wait for the next snapshot.
    """
    with transaction.atomic():
        queue = PreferenceQueue.objects.select_for_update().get(pk=queue.pk)
        version = (queue.snapshots.aggregate(top=Max("version"))["top"] or 0) + 1
        votes: dict[int, list[tuple[str, str]]] = defaultdict(list)
        for pair_id, choice, username in (
            Judgement.objects.filter(pair__queue=queue).order_by("pair_id", "created_at", "id")
            .values_list("pair_id", "choice", "annotator__username")
        ):
            votes[pair_id].append((choice, username))
        pairs = list(PreferencePair.objects.filter(queue=queue, pk__in=list(votes)).order_by("position"))
        counts = Counter(pairs_in_queue=queue.pairs.count(), judged_pairs=len(pairs),
                         judgements=sum(len(v) for v in votes.values()))
        winners: list[tuple[PreferencePair, str]] = []
        for pair in pairs:
            choices = [choice for choice, _ in votes[pair.pk]]
            if complete_only and len(choices) < queue.overlap:
                counts["excluded_incomplete"] += 1
                continue
            side = majority(choices)
            if side is None:
                counts[f"excluded_{_exclusion_reason(choices)}"] += 1
                continue
            winners.append((pair, side))
        counts["included"] = len(winners)

        trajectory_ids = {pair.a_id for pair, _ in winners} | {pair.b_id for pair, _ in winners}
        trajectories = Trajectory.objects.filter(pk__in=trajectory_ids).select_related("run").prefetch_related(
            Prefetch("turns", queryset=Turn.objects.order_by("index"))
        ).in_bulk()
        rows = []
        for index, (pair, side) in enumerate(winners):
            chosen = trajectories[pair.a_id if side == Choice.A else pair.b_id]
            rejected = trajectories[pair.b_id if side == Choice.A else pair.a_id]
            chosen_text = trajectory_text(chosen.prompt, chosen.turns.all())
            rejected_text = trajectory_text(rejected.prompt, rejected.turns.all())
            choices = [choice for choice, _ in votes[pair.pk]]
            rows.append(SnapshotPair(
                index=index,
                prompt=pair.prompt or chosen_text.prompt,
                chosen=chosen_text.response,
                rejected=rejected_text.response,
                prompt_messages=chosen_text.prompt_messages,
                chosen_messages=chosen_text.response_messages,
                rejected_messages=rejected_text.response_messages,
                chosen_reward=chosen.reward,
                rejected_reward=rejected.reward,
                provenance={
                    "pair_id": pair.pk,
                    "task_id": chosen.task_id,
                    "seed": chosen.seed,
                    "chosen_trajectory": chosen.pk,
                    "rejected_trajectory": rejected.pk,
                    "chosen_run": chosen.run_id,
                    "rejected_run": rejected.run_id,
                    "chosen_step": chosen.step,
                    "rejected_step": rejected.step,
                    "votes": {"chosen": choices.count(side), "rejected": choices.count(Choice.B if side == Choice.A else Choice.A),
                              "tie": choices.count(Choice.TIE), "both_bad": choices.count(Choice.BOTH_BAD)},
                    "annotators": sorted({username for _, username in votes[pair.pk]}),
                },
            ))
        run_ids = sorted({t.run_id for t in trajectories.values()})
        runs = dict(Run.objects.filter(pk__in=run_ids).values_list("id", "name"))
        snapshot = PreferenceSnapshot.objects.create(
            project=queue.project,
            queue=queue,
            version=version,
            created_by=user,
            provenance={
                "queue": {"id": queue.pk, "name": queue.name, "source": queue.source, "pairing": queue.pairing,
                          "overlap": queue.overlap, "build": queue.build_params},
                "version": version,
                "annotators": sorted({username for v in votes.values() for _, username in v}),
                "runs": [{"id": run_id, "name": runs.get(run_id, "")} for run_id in run_ids],
                "steps": sorted({t.step for t in trajectories.values()}),
                "rule": MAJORITY_RULE,
                "complete_only": complete_only,
                "counts": dict(counts),
                "created_by": getattr(user, "username", None),
                "created_at": timezone.now().isoformat(),
            },
        )
        for row in rows:
            row.snapshot = snapshot
        SnapshotPair.objects.bulk_create(rows, batch_size=500)
        _log(queue.project, user, ActivityVerb.SNAPSHOT_CREATED, queue=queue, version=version, pairs=len(rows))
    return snapshot


def snapshot_pairs(snapshot: PreferenceSnapshot) -> list[dict[str, Any]]:
    """The snapshot's rows as plain dicts, in order: prompt, chosen, rejected (strings), chosen_reward,
    rejected_reward, prompt_messages / chosen_messages / rejected_messages ([{role, content}]) and
    provenance (the row's, plus the snapshot's queue id and version)."""
    dataset = {"queue_id": snapshot.queue_id, "snapshot_id": snapshot.pk, "snapshot_version": snapshot.version}
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

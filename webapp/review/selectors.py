"""Reads for review pages. Callers have already resolved the project through webapp.projects.access."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Count, F, Max, Prefetch, Q, QuerySet

from trainers.learn.turn_credit import judged_turn_rewards
from webapp.experiments.models import Checkpoint, RubricVersion, Run
from webapp.projects.access import Capability, ProjectAccess
from webapp.projects.models import Membership, Project
from webapp.review import agreement, tally
from webapp.review.models import (
    Activity,
    Adjudication,
    Comment,
    Flag,
    Judgement,
    JudgeVerdict,
    Notification,
    PreferencePair,
    PreferenceQueue,
    PreferenceSnapshot,
    QueueJudge,
    Tag,
    TrajectoryTag,
    TurnJudgement,
    TurnVerdict,
    normalized_tag_name,
    side_of_choice,
)
from webapp.rollouts.models import Trajectory, Turn

RECENT_ACTIVITY = 15


# --- collaboration -------------------------------------------------------------------------------------


@dataclass
class Thread:
    """A comment and its replies, oldest first; `may_resolve`: whether the reader may resolve it."""

    root: Comment
    replies: list[Comment]
    may_resolve: bool = False

    @property
    def turn_index(self) -> int | None:
        return self.root.turn_index

    @property
    def size(self) -> int:
        return 1 + len(self.replies)


@dataclass
class CollaborationPanel:
    threads: list[Thread]
    tags: list[TrajectoryTag]
    flags: list[Flag]
    project_tags: list[Tag]

    @property
    def by_turn(self) -> list[tuple[int | None, list[Thread]]]:
        return threads_by_turn(self.threads)


def threads_by_turn(threads: list[Thread]) -> list[tuple[int | None, list[Thread]]]:
    """The threads on the whole trajectory first, then those on each turn, in turn order."""
    groups: dict[int | None, list[Thread]] = defaultdict(list)
    for thread in threads:
        groups[thread.turn_index].append(thread)
    return sorted(groups.items(), key=lambda item: -1 if item[0] is None else item[0])


def annotate_turn_threads(trajectory: Trajectory, turns: list[Turn]) -> None:
    """Give each turn shown its threads (`turn.comment_threads`): the marker and the thread beside it."""
    groups = dict(threads_by_turn(discussion_threads(trajectory)))
    for turn in turns:
        turn.comment_threads = groups.get(turn.index, [])  # type: ignore[attr-defined]


def discussion_threads(trajectory: Trajectory, reader=None, *, can_launch: bool = False) -> list[Thread]:
    """The trajectory's threads, oldest first, each with its replies; resolvable per Comment's rule."""
    threads: dict[int, Thread] = {}
    replies: list[Comment] = []
    for comment in comment_list(trajectory).select_related("resolved_by"):
        if comment.parent_id is None:
            may = comment.may_be_resolved_by(reader, can_launch=can_launch)
            threads[comment.pk] = Thread(root=comment, replies=[], may_resolve=may)
        else:
            replies.append(comment)
    for reply in replies:
        if reply.parent_id in threads:
            threads[reply.parent_id].replies.append(reply)
    return list(threads.values())


def collaboration_panel(
    trajectory: Trajectory, reader=None, *, can_launch: bool = False
) -> CollaborationPanel:
    """Everything the discussion panel of one trajectory shows to `reader`."""
    return CollaborationPanel(
        threads=discussion_threads(trajectory, reader, can_launch=can_launch),
        tags=list(trajectory_tag_list(trajectory)),
        flags=list(Flag.objects.filter(trajectory=trajectory).select_related("raised_by", "resolved_by")),
        project_tags=list(Tag.objects.filter(project_id=trajectory.run.project_id)),
    )


def recent_activity(*, project: Project, limit: int = RECENT_ACTIVITY) -> list[Activity]:
    return list(
        Activity.objects.filter(project=project)
        .select_related("project", "actor", "trajectory", "queue")
        .order_by("-created_at", "-id")[:limit]
    )


def unread_notification_count(user) -> int:
    if user is None or not user.is_authenticated:
        return 0
    return Notification.objects.filter(recipient=user, read_at__isnull=True).count()


def notification_list(user, *, limit: int = 100) -> list[Notification]:
    return list(
        Notification.objects.filter(recipient=user)
        .select_related("actor", "project", "comment", "trajectory")
        .order_by("-created_at", "-id")[:limit]
    )


def open_flags(*, project: Project) -> QuerySet[Flag]:
    return Flag.objects.filter(project=project, resolved_at__isnull=True).select_related(
        "trajectory", "raised_by"
    )


# --- queues --------------------------------------------------------------------------------------------


def queue_list(*, access: ProjectAccess) -> list[PreferenceQueue]:
    """The queues the member may see (PreferenceQueue.visible_to), with their progress."""
    queues = PreferenceQueue.objects.filter(project=access.project)
    if not access.can(Capability.LAUNCH):
        queues = queues.filter(annotators=access.membership.user_id)
    queues = queues.annotate(
        total_pairs=Count("pairs", distinct=True),
        done_pairs=Count("pairs", filter=Q(pairs__judgement_count__gte=F("overlap")), distinct=True),
    ).select_related("created_by")
    return list(queues.order_by("-created_at", "-id"))


@dataclass
class AnnotatorProgress:
    username: str
    judged: int
    available: int  # pairs this annotator could still judge (not done, not judged by them)
    last_at: object = None


@dataclass
class QueueProgress:
    total_pairs: int
    done_pairs: int
    judgements: int
    wanted: int  # total_pairs × overlap
    annotators: list[AnnotatorProgress] = field(default_factory=list)
    choices: dict[str, int] = field(default_factory=dict)

    @property
    def percent(self) -> int:
        return round(100 * self.judgements / self.wanted) if self.wanted else 0


def queue_progress(queue: PreferenceQueue) -> QueueProgress:
    pairs = PreferencePair.objects.filter(queue=queue)
    totals = pairs.aggregate(
        total=Count("id"),
        done=Count("id", filter=Q(judgement_count__gte=queue.overlap)),
    )
    judgements = Judgement.objects.filter(pair__queue=queue)
    per_user: dict[str, dict[str, Any]] = {
        row["annotator__username"]: dict(row)
        for row in judgements.values("annotator__username").annotate(n=Count("id"), last=Max("updated_at"))
    }
    open_pairs = totals["total"] - totals["done"]
    judged_open: defaultdict[str, int] = defaultdict(int)
    for username in judgements.filter(pair__judgement_count__lt=queue.overlap).values_list(
        "annotator__username", flat=True
    ):
        judged_open[username] += 1
    assigned = list(queue.annotators.order_by("username").values_list("username", flat=True))
    names = assigned + sorted(set(per_user) - set(assigned))
    rows = [
        AnnotatorProgress(
            username=name,
            judged=per_user.get(name, {}).get("n", 0),
            available=open_pairs - judged_open[name] if name in assigned else 0,
            last_at=per_user.get(name, {}).get("last"),
        )
        for name in names
    ]
    choices = dict(judgements.values_list("choice").annotate(n=Count("id")).order_by())
    return QueueProgress(
        total_pairs=totals["total"],
        done_pairs=totals["done"],
        judgements=judgements.count(),
        wanted=totals["total"] * queue.overlap,
        annotators=rows,
        choices=choices,
    )


def judged_pair_ids(queue: PreferenceQueue, annotator) -> list[int]:
    """The pairs this annotator judged, in the order they first judged them (for ← / → navigation)."""
    return list(
        Judgement.objects.filter(pair__queue=queue, annotator=annotator)
        .order_by("created_at", "id")
        .values_list("pair_id", flat=True)
    )


def queue_judgements(queue: PreferenceQueue) -> list[tuple[int, str, str]]:
    """(pair id, annotator username, canonical choice) for agreement statistics."""
    return list(
        Judgement.objects.filter(pair__queue=queue)
        .order_by("pair_id", "annotator__username")
        .values_list("pair_id", "annotator__username", "choice")
    )


def judge_components(queue: PreferenceQueue) -> dict[int, tuple[str, float | None, float | None]]:
    """For pairs whose trajectories carry an `llm_judge` component: pair id -> (criterion name, raw value
    on A, raw value on B). Pairs without one are left out."""
    # Only the pairs' trajectory ids, then only those trajectories' component lists, by id: a queue of
    # thousands of pairs loaded both whole trajectories (prompts included) as model rows per pair, most of
    # the queue page's time, and the planner merge-joins the two sides through the trajectory table when
    # they are joined in one query (ten times the by-id lookups on a year of data). Unordered: the default
    # orderings join the queue and the run.
    pairs = PreferencePair.objects.filter(queue=queue).order_by()
    sides = pairs.values("a_id").union(pairs.values("b_id"), all=True)
    judged: dict[int, dict[Any, dict]] = {}
    for trajectory_id, components in (
        Trajectory.objects.filter(pk__in=sides).order_by().values_list("pk", "components")
    ):
        if found_here := _llm_judge_components(components):
            judged[trajectory_id] = found_here
    found: dict[int, tuple[str, float | None, float | None]] = {}
    if not judged:
        return found
    for pair_id, a_id, b_id in pairs.values_list("pk", "a_id", "b_id"):
        judged_a, judged_b = judged.get(a_id, {}), judged.get(b_id, {})
        common = sorted(set(judged_a) & set(judged_b), key=str)
        if common:
            name = common[0]
            found[pair_id] = (
                str(name),
                _number(judged_a[name].get("raw")),
                _number(judged_b[name].get("raw")),
            )
    return found


def _llm_judge_components(components: Any) -> dict[Any, dict]:
    """A trajectory's `llm_judge` components by criterion name."""
    return {
        c.get("name"): c for c in components or [] if isinstance(c, dict) and c.get("kind") == "llm_judge"
    }


# --- LLM judges as annotators ------------------------------------------------------------------------


@dataclass(frozen=True)
class JudgeCriterion:
    """An `llm_judge` criterion of the latest version of a project rubric: what the queue page offers."""

    rubric_version: RubricVersion
    name: str
    model: str

    @property
    def key(self) -> str:
        return f"{self.rubric_version.pk}:{self.name}"

    @property
    def label(self) -> str:
        return f"{self.name} — {self.rubric_version} (model {self.model})"


def judge_criteria(project: Project) -> list[JudgeCriterion]:
    found = []
    versions = RubricVersion.objects.filter(rubric__project=project).select_related("rubric")
    latest: dict[int, RubricVersion] = {}
    for version in versions.order_by("rubric__name", "-number"):
        latest.setdefault(version.rubric_id, version)
    for version in latest.values():
        for criterion in (version.spec or {}).get("criteria") or []:
            if isinstance(criterion, dict) and criterion.get("kind") == "llm_judge" and criterion.get("name"):
                model = str((criterion.get("params") or {}).get("model") or "policy")
                found.append(JudgeCriterion(version, str(criterion["name"]), model))
    return found


def queue_judges(queue: PreferenceQueue) -> list[QueueJudge]:
    return list(
        QueueJudge.objects.filter(queue=queue).select_related("created_by").order_by("created_at", "id")
    )


Answers = dict[int, dict[int, tuple[str | None, str | None]]]


def judge_answers(queue: PreferenceQueue) -> Answers:
    """judge id -> pair id -> (canonical answer with A shown first, with B shown first): None where that
    order is not asked yet, "" where the reply named neither response."""
    answers: dict[int, dict[int, list[str | None]]] = defaultdict(dict)
    for judge_id, pair_id, left_is_a, choice in JudgeVerdict.objects.filter(judge__queue=queue).values_list(
        "judge_id", "pair_id", "left_is_a", "choice"
    ):
        answers[judge_id].setdefault(pair_id, [None, None])[0 if left_is_a else 1] = choice
    return {
        judge_id: {pair_id: (first, second) for pair_id, (first, second) in pairs.items()}
        for judge_id, pairs in answers.items()
    }


def judge_verdicts(judges: list[QueueJudge], answers: Answers) -> dict[str, dict[int, str]]:
    """judge label -> pair id -> the judge's verdict (QueueJudge.verdict_of), pairs without one left out."""
    verdicts: dict[str, dict[int, str]] = {}
    for judge in judges:
        pairs = answers.get(judge.pk, {})
        verdicts[judge.label] = {
            pair_id: verdict
            for pair_id, (first, second) in pairs.items()
            if (verdict := QueueJudge.verdict_of(first, second)) is not None
        }
    return verdicts


def queue_sides(
    queue: PreferenceQueue, judges: list[QueueJudge], answers: Answers
) -> list[tuple[str, str, str]]:
    """(annotator, order, side) of every judgement, for position bias: a person's side as they saw it
    (order ""); a judge's answer per order ("A first" / "B first"), left being the response shown first."""
    sides = [
        (username, "", side_of_choice(choice, left_is_a=left_is_a))
        for username, choice, left_is_a in Judgement.objects.filter(pair__queue=queue).values_list(
            "annotator__username", "choice", "left_is_a"
        )
    ]
    for judge in judges:
        for first, second in answers.get(judge.pk, {}).values():
            for choice, left_is_a, order in ((first, True, "A first"), (second, False, "B first")):
                if choice is not None:  # "": the reply named neither response, undecided
                    side = side_of_choice(choice, left_is_a=left_is_a) if choice else "neither"
                    sides.append((judge.label, order, side))
    return sides


def queue_agreement(queue: PreferenceQueue) -> agreement.AgreementSummary:
    """The queue page's agreement section: people, the run scores' LLM judge and the queue's judges."""
    judges = queue_judges(queue)
    answers = judge_answers(queue)
    return agreement.summarize(
        queue_judgements(queue),
        overlap=queue.overlap,
        judge_scores=judge_components(queue),
        judges=judge_verdicts(judges, answers),
        judge_answers={judge.label: answers[judge.pk] for judge in judges if judge.pk in answers},
        sides=queue_sides(queue, judges, answers),
    )


# --- votes, decisions and disagreements -------------------------------------------------------------------


@dataclass(frozen=True)
class Vote:
    """One vote on a pair: a person's judgement (with the layout they saw), or the verdict of an LLM judge
    the queue counts in snapshots (QueueJudge.in_snapshots)."""

    voter: str
    choice: str  # canonical: a, b, tie, both_bad
    rationale: str = ""
    is_judge: bool = False
    left_is_a: bool | None = None
    at: Any = None

    @property
    def side(self) -> str:
        """The choice as the voter saw it (left / right / tie / both bad); a judge saw both orders."""
        if self.left_is_a is None:
            return self.choice
        return side_of_choice(self.choice, left_is_a=self.left_is_a)


@dataclass
class QueueVotes:
    """Every vote of a queue by pair, the LLM judges that vote, and the pairs someone settled."""

    votes: dict[int, list[Vote]]
    judge_labels: list[str]
    adjudications: dict[int, Adjudication]

    def choices(self, pair_id: int) -> list[str]:
        return [vote.choice for vote in self.votes.get(pair_id, [])]

    def people(self, pair_id: int) -> int:
        return sum(not vote.is_judge for vote in self.votes.get(pair_id, []))

    def decision(self, pair_id: int) -> tally.Decision:
        settled = self.adjudications.get(pair_id)
        return tally.decide(self.choices(pair_id), settled.choice if settled else None)


def queue_votes(queue: PreferenceQueue, *, pair: PreferencePair | None = None) -> QueueVotes:
    """The votes the tally counts: every person's judgement, in the order they were made, then one vote per
    pair of each judge the queue's manager let into snapshots (its verdict over both orders). With `pair`,
    that pair's only."""
    judgements = Judgement.objects.filter(pair__queue=queue)
    settled = Adjudication.objects.filter(pair__queue=queue)
    if pair is not None:
        judgements, settled = judgements.filter(pair=pair), settled.filter(pair=pair)
    votes: dict[int, list[Vote]] = defaultdict(list)
    for pair_id, username, choice, rationale, left_is_a, at in judgements.order_by(
        "pair_id", "created_at", "id"
    ).values_list("pair_id", "annotator__username", "choice", "rationale", "left_is_a", "updated_at"):
        votes[pair_id].append(Vote(username, choice, rationale, left_is_a=left_is_a, at=at))
    judges = list(QueueJudge.objects.filter(queue=queue, in_snapshots=True).order_by("created_at", "id"))
    for label, verdicts in judge_verdicts(judges, judge_answers(queue)).items():
        for pair_id, choice in verdicts.items():
            if pair is None or pair_id == pair.pk:
                votes[pair_id].append(Vote(label, choice, is_judge=True))
    adjudications = {a.pair_id: a for a in settled.select_related("adjudicated_by")}
    return QueueVotes(dict(votes), sorted(judge.label for judge in judges), adjudications)


@dataclass
class Disagreement:
    """A pair its voters split on, as the disagreements page shows it: both responses, every vote with its
    rationale, what a snapshot exports for it now, and the adjudication if someone settled it."""

    pair: PreferencePair
    votes: list[Vote]
    decision: tally.Decision
    adjudication: Adjudication | None
    a_text: Any = None
    b_text: Any = None


@dataclass
class Disagreements:
    pairs: list[Disagreement]
    open: int
    settled: int
    kappa_before: float | None
    kappa_after: float | None
    kappa_kind: str  # "Cohen's κ", "Fleiss' κ" or "" when the queue has one judgement per pair


def disagreement_counts(queue: PreferenceQueue) -> tuple[int, int]:
    """(open, settled): how many pairs the queue's voters split on are still to settle, and settled."""
    tallied = queue_votes(queue)
    split = [pair_id for pair_id in tallied.votes if tally.is_split(tallied.choices(pair_id))]
    settled = sum(pair_id in tallied.adjudications for pair_id in split)
    return len(split) - settled, settled


def disagreements(queue: PreferenceQueue, *, show: str = "open") -> Disagreements:
    """The pairs of the queue whose votes are split (tally.is_split), open ones first; `show` "open",
    "settled" or "all". κ before and after adjudication: the people's agreement as they voted, and with
    each settled pair's votes replaced by its decision (agreement.settled)."""
    from trainers.texts import trajectory_text

    tallied = queue_votes(queue)
    split = [pair_id for pair_id in tallied.votes if tally.is_split(tallied.choices(pair_id))]
    settled_ids = {pair_id for pair_id in split if pair_id in tallied.adjudications}
    wanted = {
        "open": [p for p in split if p not in settled_ids],
        "settled": [p for p in split if p in settled_ids],
    }.get(show, split)
    in_order = Turn.objects.order_by("index")
    pairs = (
        PreferencePair.objects.filter(pk__in=wanted)
        .select_related("a", "b")
        .prefetch_related(Prefetch("a__turns", queryset=in_order), Prefetch("b__turns", queryset=in_order))
        .order_by("position")
    )
    rows = [
        Disagreement(
            pair,
            tallied.votes[pair.pk],
            tallied.decision(pair.pk),
            tallied.adjudications.get(pair.pk),
            trajectory_text(pair.a.prompt, pair.a.turns.all()),
            trajectory_text(pair.b.prompt, pair.b.turns.all()),
        )
        for pair in pairs
    ]
    rows.sort(key=lambda row: (row.adjudication is not None, row.pair.position))
    people = queue_judgements(queue)
    decisions = {pair_id: a.choice for pair_id, a in tallied.adjudications.items()}
    before, kind = agreement.people_kappa(people, overlap=queue.overlap)
    after, _ = agreement.people_kappa(agreement.settled(people, decisions), overlap=queue.overlap)
    return Disagreements(rows, len(split) - len(settled_ids), len(settled_ids), before, after, kind)


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def snapshot_list(queue: PreferenceQueue) -> QuerySet[PreferenceSnapshot]:
    return (
        PreferenceSnapshot.objects.filter(queue=queue)
        .select_related("created_by")
        .annotate(rows=Count("pairs"))
        .order_by("-version")
    )


def membership_role(project: Project, user) -> str | None:
    return Membership.objects.filter(project=project, user=user).values_list("role", flat=True).first()


# --- one trajectory's comments and tags (the collaboration panel and the JSON API) -----------------------


def comment_list(trajectory: Trajectory) -> QuerySet[Comment]:
    """The trajectory's comments, oldest first (deleted ones keep their row, with the body cleared)."""
    return Comment.objects.filter(trajectory=trajectory).select_related("author").order_by("created_at", "id")


def trajectory_tag_list(trajectory: Trajectory) -> QuerySet[TrajectoryTag]:
    return (
        TrajectoryTag.objects.filter(trajectory=trajectory)
        .select_related("tag", "added_by")
        .order_by("tag__name")
    )


def trajectory_tag_named(trajectory: Trajectory, name: str) -> TrajectoryTag | None:
    """The trajectory's tag of this name, matched as tag_add matches names (case and spacing ignored)."""
    name = normalized_tag_name(name)
    if not name:
        return None
    return trajectory_tag_list(trajectory).filter(tag__name__iexact=name).first()


def preference_queue_queryset() -> QuerySet[PreferenceQueue]:
    # Ordered so every database lists a queue's runs and annotators the same way.
    return PreferenceQueue.objects.select_related("project", "created_by").prefetch_related(
        Prefetch("runs", queryset=Run.objects.order_by("pk")),
        Prefetch("annotators", queryset=get_user_model().objects.order_by("username")),
    )


def preference_snapshot_queryset() -> QuerySet[PreferenceSnapshot]:
    return PreferenceSnapshot.objects.select_related("project", "queue")


# --- per-turn preferences ------------------------------------------------------------------------------


@dataclass
class TurnJudgements:
    """A trajectory's turn judgements as the trajectory page, the diff and the API read them."""

    rewards: dict[int, float]  # judged per-turn reward, per assistant turn (trainers.learn.turn_credit)
    marks: dict[int, int]  # turn → how many annotators marked "went wrong here"
    preferences: dict[int, tuple[int, int]]  # turn → (times preferred, times another was preferred)
    mine: int | None  # the turn the reader marked as wrong, if any
    judgements: list[Any] = field(default_factory=list)

    def annotate(self, turns: list[Any]) -> list[Any]:
        """Give each turn (a Turn row or a diff row with `.index`) what the pages print beside it:
        `judged_reward`, `wrong_marks`, `preference_votes` (won, lost) and `my_mark`."""
        for turn in turns:
            index = getattr(turn, "index", None)
            turn.judged_reward = self.rewards.get(index) if index is not None else None
            turn.wrong_marks = self.marks.get(index, 0) if index is not None else 0
            turn.preference_votes = self.preferences.get(index) if index is not None else None
            turn.my_mark = index is not None and index == self.mine
        return turns


def turn_judgements(trajectory: Trajectory, reader=None) -> TurnJudgements:
    """Every turn judgement on the trajectory, and the per-turn rewards they attribute to its turns."""
    rows = list(
        TurnJudgement.objects.filter(Q(trajectory=trajectory) | Q(other=trajectory))
        .select_related("annotator")
        .order_by("created_at", "id")
    )
    wrong = [
        j.turn_index for j in rows if j.verdict == TurnVerdict.WRONG and j.trajectory_id == trajectory.pk
    ]
    won = [j.turn_index for j in rows if j.verdict == TurnVerdict.BETTER and j.trajectory_id == trajectory.pk]
    lost = [
        j.other_turn_index
        for j in rows
        if j.verdict == TurnVerdict.BETTER and j.other_id == trajectory.pk and j.other_turn_index is not None
    ]
    assistant = []
    if rows:
        assistant = list(
            Turn.objects.filter(trajectory=trajectory, role="assistant").values_list("index", flat=True)
        )
    marks: dict[int, int] = defaultdict(int)
    for t in wrong:
        marks[t] += 1
    preferences: dict[int, tuple[int, int]] = {}
    for t in set(won) | set(lost):
        preferences[t] = (won.count(t), lost.count(t))
    mine = next(
        (
            j.turn_index
            for j in rows
            if reader is not None
            and j.annotator_id == reader.pk
            and j.verdict == TurnVerdict.WRONG
            and j.trajectory_id == trajectory.pk
        ),
        None,
    )
    return TurnJudgements(
        rewards=judged_turn_rewards(assistant, wrong_marks=wrong, won=won, lost=lost),
        marks=dict(marks),
        preferences=preferences,
        mine=mine,
        judgements=rows,
    )


def dpo_start_checkpoints(queue: PreferenceQueue, *, limit: int = 20) -> list[Checkpoint]:
    """The kept checkpoints a one-click DPO run on this queue's data may start from (the policies of the
    queue's runs, newest first): the GRPO policy whose rollouts were judged, rather than the base model."""
    return list(
        Checkpoint.objects.filter(run__in=queue.runs.all(), deleted=False)
        .select_related("run")
        .order_by("-run__created_at", "-step")[:limit]
    )

from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.projects.models import Capability, Membership, Project
from webapp.rollouts.models import Trajectory


def normalized_tag_name(name: str | None) -> str:
    """A tag name as it is stored and looked up: runs of whitespace become one space, ends trimmed."""
    return " ".join((name or "").split())


class Tag(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="tags")
    name = models.CharField(max_length=50)
    color = models.CharField(max_length=7, default="#6b7280")

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="unique_tag_name")]

    def __str__(self) -> str:
        return self.name


class TrajectoryTag(models.Model):
    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="tag_links")
    tag = models.ForeignKey(Tag, on_delete=models.CASCADE, related_name="trajectory_links")
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    added_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["trajectory", "tag"], name="tag_once_per_trajectory")]

    def __str__(self) -> str:
        return f"{self.tag} on {self.trajectory_id}"


class Comment(models.Model):
    """A comment on a trajectory, or on one of its turns when turn_index is set.

    A comment without `parent` starts a thread; replies point at the thread's first comment (`parent`)
    and share its turn. A thread is resolved on its first comment."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="comments")
    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="comments")
    turn_index = models.PositiveIntegerField(null=True, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="replies"
    )
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="comments"
    )
    body = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    edited_at = models.DateTimeField(null=True, blank=True)
    # Deleting keeps the row (replies and the activity log still point at it) and clears the body.
    deleted_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["created_at"]
        indexes = [models.Index(fields=["trajectory", "created_at"], name="comment_traj_time")]

    def __str__(self) -> str:
        return f"comment by {self.author} on {self.trajectory_id}"

    @property
    def is_deleted(self) -> bool:
        return self.deleted_at is not None

    @property
    def is_resolved(self) -> bool:
        return self.resolved_at is not None

    @property
    def thread_root(self) -> Comment:
        return self.parent if self.parent_id else self

    def may_be_resolved_by(self, user, *, can_launch: bool) -> bool:
        """Who settles a thread: whoever started it, and the project's owners and researchers
        (`can_launch`: the LAUNCH capability). The one rule the page, the service and the API ask."""
        root = self.thread_root
        return bool(user and user.pk is not None and (root.author_id == user.pk or can_launch))


# --- working together -----------------------------------------------------------------------------


class FlagReason(models.TextChoices):
    REWARD_WRONG = "reward_wrong", "Reward looks wrong"
    ENV_BUG = "env_bug", "Environment bug"
    UNSAFE = "unsafe", "Unsafe or harmful output"
    INTERESTING = "interesting", "Interesting example"
    OTHER = "other", "Other"


class Flag(models.Model):
    """A trajectory raised for attention ("the reward looks wrong here"); open until someone resolves it."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="flags")
    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="flags")
    reason = models.CharField(max_length=16, choices=FlagReason.choices, default=FlagReason.OTHER)
    note = models.TextField(blank=True)
    raised_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["project", "resolved_at"], name="flag_project_open")]

    def __str__(self) -> str:
        return f"{self.get_reason_display()} on {self.trajectory_id}"

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None


class NotificationReason(models.TextChoices):
    MENTION = "mention", "mentioned you"
    REPLY = "reply", "replied to your comment"


class Notification(models.Model):
    """Someone @mentioned the recipient in a comment, or replied to the recipient's comment (a mention in a
    reply counts once, as the mention). Read when the recipient opens it (or marks all read)."""

    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications"
    )
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="notifications")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    comment = models.ForeignKey(Comment, null=True, on_delete=models.CASCADE, related_name="notifications")
    trajectory = models.ForeignKey(Trajectory, null=True, on_delete=models.CASCADE, related_name="+")
    reason = models.CharField(
        max_length=8, choices=NotificationReason.choices, default=NotificationReason.MENTION
    )
    created_at = models.DateTimeField(auto_now_add=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["recipient", "read_at"], name="notification_unread")]
        constraints = [
            models.UniqueConstraint(
                fields=["recipient", "comment"], name="one_mention_notification_per_comment"
            )
        ]

    def __str__(self) -> str:
        return f"{self.actor} {self.get_reason_display()} ({self.recipient})"


class ActivityVerb(models.TextChoices):
    COMMENT_ADDED = "comment.added", "commented on"
    COMMENT_EDITED = "comment.edited", "edited a comment on"
    COMMENT_DELETED = "comment.deleted", "deleted a comment on"
    COMMENT_REPLIED = "comment.replied", "replied to a comment on"
    THREAD_RESOLVED = "thread.resolved", "resolved a thread on"
    THREAD_REOPENED = "thread.reopened", "reopened a thread on"
    TAG_ADDED = "tag.added", "tagged"
    TAG_REMOVED = "tag.removed", "removed a tag from"
    FLAG_RAISED = "flag.raised", "flagged"
    FLAG_RESOLVED = "flag.resolved", "resolved a flag on"
    QUEUE_CREATED = "queue.created", "created the preference queue"
    JUDGEMENT_RECORDED = "judgement.recorded", "judged a pair in"
    JUDGEMENT_CHANGED = "judgement.changed", "changed a judgement in"
    SNAPSHOT_CREATED = "snapshot.created", "exported a preference dataset from"
    RUN_LAUNCHED = "run.launched", "launched the run"
    RUN_CANCELLED = "run.cancelled", "cancelled the run"
    RUN_DELETED = "run.deleted", "deleted the run"
    ENVIRONMENT_VERSIONED = "environment.versioned", "saved the environment"
    RUBRIC_VERSIONED = "rubric.versioned", "saved the rubric"
    REWARD_MODEL_TRAINED = "reward_model.trained", "started training the reward model"
    REWARD_MODEL_REGISTERED = "reward_model.added", "added a learned reward to the rubric"
    TURN_JUDGED = "turn.judged", "judged a turn of"
    TURN_JUDGEMENT_CLEARED = "turn.cleared", "withdrew a turn judgement on"
    JUDGE_ASKED = "judge.asked", "asked an LLM judge to annotate"
    PAIR_ADJUDICATED = "pair.adjudicated", "settled a disagreement in"
    MEMBER_JOINED = "member.joined", "joined the project"
    MEMBER_INVITED = "member.invited", "invited a new member"
    INVITATION_REVOKED = "invitation.revoked", "revoked an invitation"


class ActivityKind(models.TextChoices):
    """What the activity page filters by."""

    DISCUSSION = "discussion", "Comments, tags and flags"
    ANNOTATION = "annotation", "Judgements, queues and datasets"
    EXPERIMENTS = "experiments", "Runs, environments, rubrics, reward models"
    MEMBERS = "members", "Members and invitations"


KIND_OF_VERB: dict[str, str] = {
    **{
        verb: ActivityKind.DISCUSSION
        for verb in ActivityVerb.values
        if verb.split(".")[0] in ("comment", "thread", "tag", "flag")
    },
    **{
        verb: ActivityKind.ANNOTATION
        for verb in ActivityVerb.values
        if verb.split(".")[0] in ("queue", "judgement", "snapshot", "turn", "judge", "pair")
    },
    **{
        verb: ActivityKind.EXPERIMENTS
        for verb in ActivityVerb.values
        if verb.split(".")[0] in ("run", "environment", "rubric", "reward_model")
    },
    **{
        verb: ActivityKind.MEMBERS
        for verb in ActivityVerb.values
        if verb.split(".")[0] in ("member", "invitation")
    },
}

# Many in a row by one person (in one queue) read as one line: "carol judged 30 pairs in queue 2".
GROUPED_VERBS: dict[str, str] = {
    ActivityVerb.JUDGEMENT_RECORDED: "judged {n} pairs in",
    ActivityVerb.JUDGEMENT_CHANGED: "changed {n} judgements in",
    ActivityVerb.TURN_JUDGED: "judged {n} turns, the latest on",
    ActivityVerb.TURN_JUDGEMENT_CLEARED: "withdrew {n} turn judgements, the latest on",
    ActivityVerb.TAG_ADDED: "tagged {n} trajectories, the latest",
}


class Activity(models.Model):
    """Who changed what, when: the project's audit trail and the "recent activity" on its home page.

    `data` keeps what the change was (a tag's name, a comment's previous body, a judgement's choice)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="activities")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    verb = models.CharField(max_length=24, choices=ActivityVerb.choices)
    trajectory = models.ForeignKey(
        Trajectory, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    queue = models.ForeignKey(
        "PreferenceQueue", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-created_at"], name="activity_project_recent")]

    def __str__(self) -> str:
        return f"{self.actor} {self.verb}"

    @property
    def kind(self) -> str:
        return KIND_OF_VERB.get(self.verb, ActivityKind.EXPERIMENTS)

    def target(self) -> tuple[str, str] | None:
        """(url, name) of the run, environment, rubric or reward model the activity is about, if any; None
        for a run deleted since (`activity_feed.mark_deleted_targets`): the line names it, unlinked."""
        from django.urls import reverse

        data = self.data or {}
        slug = self.project.slug
        if getattr(self, "run_deleted", False):
            return None
        for key, route in (
            ("run_id", "experiments:run_detail"),
            ("environment_id", "experiments:environment_detail"),
            ("rubric_id", "experiments:rubric_detail"),
            ("reward_model_id", "rewards:reward_model_detail"),
        ):
            if isinstance(data.get(key), int):
                return reverse(route, args=[slug, data[key]]), str(data.get("name", ""))
        return None

    @property
    def detail(self) -> str:
        """A few words on what changed: the tag, the flag's reason, the dataset version. Never a judgement's
        choice: annotators read this log too, and must not see each other's votes."""
        data = self.data or {}
        if "role" in data:  # members: "as annotator, added by alice"
            added = f", added by {data['added_by']}" if data.get("added_by") else ""
            via = (
                ", through an invitation"
                if self.verb == ActivityVerb.MEMBER_JOINED and "invitation_id" in data
                else ""
            )
            return f"as {data['role']}{added}{via}"
        if "judge" in data:
            return f"“{data['judge']}”, {data.get('pairs', 0)} pairs in both orders"
        if "tag" in data:
            return f"“{data['tag']}”"
        if "reason" in data and data["reason"] in FlagReason.values:
            return FlagReason(data["reason"]).label.lower()
        if "version" in data and "pairs" in data:
            return f"v{data['version']}, {data['pairs']} pairs"
        if "version" in data:
            return f"v{data['version']}"
        if "pairs" in data:
            return f"{data['pairs']} pairs"
        return ""


class ActivityVisit(models.Model):
    """When a member last opened the project's activity page: the page marks what is new since."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    seen_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "user"], name="one_activity_visit_per_member")
        ]

    def __str__(self) -> str:
        return f"{self.user} saw {self.project} activity at {self.seen_at}"


# --- preference annotation ------------------------------------------------------------------------


class PairSource(models.TextChoices):
    GROUP = "group", "Siblings of one GRPO group"
    CHECKPOINTS = "checkpoints", "Same evaluation task across steps"


class Pairing(models.TextChoices):
    ALL = "all", "All pairs"
    BEST_WORST = "best_worst", "Best vs worst reward (per group)"
    FIRST_LAST = "first_last", "Earliest vs latest step (per task)"


class Choice(models.TextChoices):
    """Stored in canonical order: A and B are the pair's `a` and `b`, whatever side they were shown on."""

    A = "a", "A is better"
    B = "b", "B is better"
    TIE = "tie", "Tie"
    BOTH_BAD = "both_bad", "Both bad"


def side_of_choice(choice: str, *, left_is_a: bool) -> str:
    """A stored (canonical A/B) choice as the annotator saw it: left / right, or tie / both bad."""
    if choice in (Choice.TIE, Choice.BOTH_BAD):
        return choice
    return "left" if (choice == Choice.A) == left_is_a else "right"


class PreferenceQueue(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="preference_queues")
    name = models.CharField(max_length=120)
    instructions = models.TextField(blank=True)
    source = models.CharField(max_length=12, choices=PairSource.choices, default=PairSource.GROUP)
    pairing = models.CharField(max_length=12, choices=Pairing.choices, default=Pairing.ALL)
    distinct_rewards = models.BooleanField(default=True, help_text="skip pairs whose rewards are equal")
    # How the queue was built, for provenance: {"runs": [...], "steps": [...], "split": ..., "max_pairs": ...}
    build_params = models.JSONField(default=dict)
    runs = models.ManyToManyField("experiments.Run", related_name="preference_queues")
    annotators = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="preference_queues")
    overlap = models.PositiveSmallIntegerField(default=1, help_text="judgements wanted per pair")
    rationale_required = models.BooleanField(default=False)
    lock_seconds = models.PositiveIntegerField(default=600)
    seed = models.BigIntegerField(
        default=0, help_text="decides pair order and each annotator's left/right order"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="unique_queue_name")]

    def __str__(self) -> str:
        return self.name

    def visible_to(self, membership: Membership) -> bool:
        """Researchers and owners see every queue; annotators only the ones they are assigned to."""
        return membership.can(Capability.LAUNCH) or self.annotators.filter(pk=membership.user_id).exists()

    def annotatable_by(self, membership: Membership) -> bool:
        """Only the queue's assigned annotators judge it. An owner or researcher who wants to judge assigns
        themselves on the queue page: otherwise opening "annotate" would hand them a pair under a lock,
        taking one of its `overlap` places from the people meant to fill them."""
        return membership.can(Capability.ANNOTATE) and self.annotators.filter(pk=membership.user_id).exists()

    def base_model(self) -> str | None:
        """The model every run of this queue started from (their config's `model`: a Hugging Face id, the
        bundled model or a checkpoint directory), None when they differ or the queue has no run. A DPO run on
        this queue's judgements trains it unless a checkpoint is chosen: judging a Qwen policy's rollouts and
        then training the bundled model on them would be a silent mistake."""
        models = {run.resolved_config.get("model") for run in self.runs.all()}
        return models.pop() if len(models) == 1 and None not in models else None


class PreferencePair(models.Model):
    """Two trajectories of the same task. `judgement_count` is kept by the judging service."""

    queue = models.ForeignKey(PreferenceQueue, on_delete=models.CASCADE, related_name="pairs")
    position = models.PositiveIntegerField(help_text="order in which annotators meet the pairs")
    a = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="+")
    b = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="+")
    prompt = models.TextField(blank=True)
    judgement_count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["queue", "position"]
        constraints = [
            models.UniqueConstraint(fields=["queue", "a", "b"], name="one_pair_per_queue"),
            models.UniqueConstraint(fields=["queue", "position"], name="one_pair_per_position"),
        ]

    def __str__(self) -> str:
        return f"pair {self.position} of {self.queue_id}"


class PairSlot(models.Model):
    """One of a pair's `overlap` places. Claiming a slot is one conditional UPDATE (free, or its lock
    expired), so two annotators can never hold the same slot and a pair never gets more than `overlap`
    judgements. `left_is_a` is the holder's left/right order, kept so a resume shows the same layout."""

    pair = models.ForeignKey(PreferencePair, on_delete=models.CASCADE, related_name="slots")
    index = models.PositiveSmallIntegerField()
    holder = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    locked_until = models.DateTimeField(null=True, blank=True)
    left_is_a = models.BooleanField(default=True)
    judged = models.BooleanField(default=False)

    class Meta:
        ordering = ["pair", "index"]
        constraints = [models.UniqueConstraint(fields=["pair", "index"], name="one_slot_per_index")]
        indexes = [models.Index(fields=["judged", "locked_until"], name="slot_free")]

    def __str__(self) -> str:
        return f"slot {self.index} of pair {self.pair_id}"


class Judgement(models.Model):
    pair = models.ForeignKey(PreferencePair, on_delete=models.CASCADE, related_name="judgements")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="judgements"
    )
    choice = models.CharField(max_length=8, choices=Choice.choices)
    rationale = models.TextField(blank=True)
    left_is_a = models.BooleanField(help_text="the layout the annotator saw")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["pair", "annotator"], name="one_judgement_per_annotator")
        ]

    def __str__(self) -> str:
        return f"{self.annotator} on pair {self.pair_id}: {self.choice}"


class Adjudication(models.Model):
    """An owner's or researcher's decision on a pair its voters split on. Dataset snapshots export it
    instead of the votes (webapp.review.tally.decide); `overridden` keeps the votes as they stood when
    it was decided ([{"annotator", "choice", "rationale"}]), for provenance even if a vote changes later."""

    pair = models.OneToOneField(PreferencePair, on_delete=models.CASCADE, related_name="adjudication")
    choice = models.CharField(max_length=8, choices=Choice.choices)
    rationale = models.TextField(blank=True)
    overridden = models.JSONField(default=list)
    adjudicated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    adjudicated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.adjudicated_by} settled pair {self.pair_id}: {self.choice}"


class PreferenceSnapshot(models.Model):
    """A frozen, versioned preference dataset: what a queue's judgements said at one moment.

    Its pairs are copied (prompt, chosen and rejected text), so later edits to judgements or deleted
    runs never change a snapshot. The learned-reward trainer and the DPO/parquet exports read it."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="preference_snapshots")
    queue = models.ForeignKey(PreferenceQueue, null=True, on_delete=models.SET_NULL, related_name="snapshots")
    version = models.PositiveIntegerField()
    # {"queue": {...}, "annotators": [...], "runs": [...], "steps": [...], "rule": ..., "counts": {...}}
    provenance = models.JSONField(default=dict)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["queue", "version"], name="one_snapshot_per_version")]

    def __str__(self) -> str:
        return f"{self.provenance.get('queue', {}).get('name', 'queue')} v{self.version}"


class SnapshotPair(models.Model):
    snapshot = models.ForeignKey(PreferenceSnapshot, on_delete=models.CASCADE, related_name="pairs")
    index = models.PositiveIntegerField()
    prompt = models.TextField()
    chosen = models.TextField()
    rejected = models.TextField()
    # Chat form of the same pair, [{"role", "content"}], for conversational DPO / reward models.
    prompt_messages = models.JSONField(default=list)
    chosen_messages = models.JSONField(default=list)
    rejected_messages = models.JSONField(default=list)
    chosen_reward = models.FloatField(null=True)
    rejected_reward = models.FloatField(null=True)
    # {"pair_id", "chosen_trajectory", "rejected_trajectory", "runs", "steps", "task_id", "votes", "annotators"}
    provenance = models.JSONField(default=dict)

    class Meta:
        ordering = ["snapshot", "index"]
        constraints = [
            models.UniqueConstraint(fields=["snapshot", "index"], name="one_snapshot_pair_per_index")
        ]

    def __str__(self) -> str:
        return f"row {self.index} of snapshot {self.snapshot_id}"


# --- per-turn preferences -------------------------------------------------------------------------


class TurnVerdict(models.TextChoices):
    WRONG = "wrong", "Went wrong here"
    BETTER = "better", "Better than the other turn at this point"


class TurnJudgement(models.Model):
    """An annotator's judgement of one assistant turn (docs/review.md, "Per-turn preferences").

    WRONG: the trajectory went wrong at `turn_index` (the turns before it were fine).
    BETTER: the trajectory's turn `turn_index` is better than `other`'s turn `other_turn_index`, taken at
    the same point of the same task (the first turn where the two diverge, as in a queue pair).
    One WRONG mark per annotator and trajectory (marking again moves it); one BETTER per annotator and
    ordered pair of turns. What they mean as per-turn rewards is `TurnJudgement`'s consumer's business:
    `trainers.learn.turn_credit.judged_turn_rewards`."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="turn_judgements")
    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="turn_judgements")
    turn_index = models.PositiveIntegerField()
    verdict = models.CharField(max_length=8, choices=TurnVerdict.choices)
    other = models.ForeignKey(Trajectory, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    other_turn_index = models.PositiveIntegerField(null=True, blank=True)
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="turn_judgements"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["trajectory", "annotator"],
                condition=models.Q(verdict="wrong"),
                name="one_wrong_mark_per_annotator",
            ),
            models.UniqueConstraint(
                fields=["trajectory", "turn_index", "other", "other_turn_index", "annotator"],
                condition=models.Q(verdict="better"),
                name="one_turn_preference_per_annotator",
            ),
        ]
        indexes = [models.Index(fields=["other"], name="turn_judgement_other")]

    def __str__(self) -> str:
        return f"{self.annotator} on turn {self.turn_index} of {self.trajectory_id}: {self.verdict}"


# --- LLM judges as annotators: their own module (imported last: it builds on the queue's models above) ----

from webapp.review.models.judges import JudgeStatus, JudgeVerdict, QueueJudge  # noqa: E402, F401

"""LLM judges as annotators: a rubric's `llm_judge` criterion asked to annotate a preference queue
(`QueueJudge`, a background job run by `workers/judge_execution.py`) and its answers (`JudgeVerdict`).
Part of `webapp.review.models` (imported at its end)."""

from __future__ import annotations

from django.db import models

from webapp.core.models import BackgroundJob
from webapp.review.models import Choice, PreferencePair, PreferenceQueue


class JudgeStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Judging"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class QueueJudge(BackgroundJob):
    """An `llm_judge` criterion of a project rubric annotating a preference queue as an extra annotator.

    A worker asks its model about every pair twice — A shown first, then B shown first — and keeps both
    answers (JudgeVerdict). Its verdict on a pair is the side both orders agree on, a tie when they
    disagree (verdict_of). It never takes a human's slot, and its verdicts enter dataset snapshots only
    when `in_snapshots` says so."""

    queue = models.ForeignKey(PreferenceQueue, on_delete=models.CASCADE, related_name="judges")
    rubric_version = models.ForeignKey(
        "experiments.RubricVersion", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    criterion_name = models.CharField(max_length=120)
    # The criterion as it stood when the judge was asked ({"name", "kind", "weight", "params"}), and the
    # rubric's name and version: the provenance of every verdict, even after the rubric is edited.
    criterion = models.JSONField(default=dict)
    rubric_label = models.CharField(max_length=160, blank=True)
    in_snapshots = models.BooleanField(
        default=False, help_text="count the judge's verdicts as one more vote in dataset snapshots"
    )
    worker_queue = models.CharField(max_length=8, default="cpu", help_text="the Celery queue it runs on")

    status = models.CharField(max_length=10, choices=JudgeStatus.choices, default=JudgeStatus.QUEUED)
    pairs_total = models.PositiveIntegerField(default=0)
    pairs_done = models.PositiveIntegerField(default=0, help_text="pairs judged in both orders")
    # error_message, task_id, worker, created_by and the timestamps: BackgroundJob.

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["queue", "rubric_version", "criterion_name"], name="one_judge_per_criterion"
            )
        ]

    def __str__(self) -> str:
        return self.label

    @property
    def label(self) -> str:
        """How the judge is named among the annotators. A username has no spaces, so this never collides."""
        suffix = f" ({self.rubric_label})" if self.rubric_label else ""
        return f"judge: {self.criterion_name}{suffix}"

    @property
    def model_name(self) -> str:
        return str((self.criterion.get("params") or {}).get("model") or "policy")

    @property
    def is_active(self) -> bool:
        return self.status in (JudgeStatus.QUEUED, JudgeStatus.RUNNING)

    @property
    def percent(self) -> int:
        return round(100 * self.pairs_done / self.pairs_total) if self.pairs_total else 0

    @staticmethod
    def verdict_of(a_first: str | None, b_first: str | None) -> str | None:
        """The judge's choice on a pair from its two answers (canonical "a" / "b", "" when a reply named
        neither): the side both orders pick; a tie when they disagree (the answer followed the position,
        not the content); None until both orders have a readable answer."""
        if not a_first or not b_first:
            return None
        return a_first if a_first == b_first else Choice.TIE


class JudgeVerdict(models.Model):
    """One answer of a judge on one pair, in one order. `choice` is canonical (a / b), "" when the
    reply named neither response; `reply` is what the model wrote after the reply prefix."""

    judge = models.ForeignKey(QueueJudge, on_delete=models.CASCADE, related_name="verdicts")
    pair = models.ForeignKey(PreferencePair, on_delete=models.CASCADE, related_name="judge_verdicts")
    left_is_a = models.BooleanField(help_text="A was shown first (as Response 1)")
    choice = models.CharField(max_length=8, choices=Choice.choices, blank=True)
    reply = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pair", "-left_is_a"]
        constraints = [
            models.UniqueConstraint(fields=["judge", "pair", "left_is_a"], name="one_verdict_per_order")
        ]

    def __str__(self) -> str:
        return f"{self.judge} on pair {self.pair_id} ({'A' if self.left_is_a else 'B'} first): {self.choice}"

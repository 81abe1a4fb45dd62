"""Learned reward models: trained on a worker from a preference snapshot, then used in rubrics.

The lineage of the loop reads off these rows: a PreferenceQueue's judgements → a PreferenceSnapshot →
a RewardModel → the RubricVersions whose `learned_reward` criterion names its path → the Runs pinned
to those versions → their Checkpoints.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import models

from trainers.rubrics.reward_model import Reliability, assess_reliability
from webapp.core.dispatch import Queue
from webapp.core.models import BackgroundJob
from webapp.core.purge import directories_under
from webapp.experiments.models import Checkpoint
from webapp.projects.models import Project
from webapp.review.models import PreferenceSnapshot

# The criterion kind a registered reward model scores as (trainers.rubrics.reward_model).
LEARNED_REWARD = "learned_reward"


class RewardModelStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    TRAINING = "training", "Training"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


DEFAULT_ACCURACY_THRESHOLD = 0.6


class RewardModel(BackgroundJob):
    """One trained (or training) reward model; `version` counts models of the same name in a project."""

    RUNNING_STATUS = RewardModelStatus.TRAINING.value  # BackgroundJob's cancel rules

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="reward_models")
    name = models.CharField(max_length=120)
    version = models.PositiveIntegerField()
    # PROTECT: a reward model's training data must stay inspectable while the model exists.
    snapshot = models.ForeignKey(PreferenceSnapshot, on_delete=models.PROTECT, related_name="reward_models")
    # Training knobs as trainers.recipes.reward_model.train_reward_model takes them (head, epochs, lr, seed…);
    # `model` is the frozen base's directory when it is a checkpoint, set only from `base_checkpoint`.
    params = models.JSONField(default=dict)
    # The checkpoint whose policy embeds the pairs (a GRPO run's, LoRA included); null: the bundled model.
    base_checkpoint = models.ForeignKey(
        Checkpoint, null=True, blank=True, on_delete=models.SET_NULL, related_name="reward_models"
    )
    queue = models.CharField(max_length=8, choices=Queue.choices, default=Queue.CPU)
    # Below this held-out accuracy the model is "not reliable" (see reliability()).
    accuracy_threshold = models.FloatField(
        default=DEFAULT_ACCURACY_THRESHOLD,
        help_text="lowest held-out accuracy that counts as reliable (0..1)",
    )

    status = models.CharField(
        max_length=10, choices=RewardModelStatus.choices, default=RewardModelStatus.QUEUED
    )
    progress = models.FloatField(default=0.0, help_text="0..1 while training")
    phase = models.CharField(max_length=16, blank=True, help_text="load | embed | fit | save")
    # Where the worker wrote the model (absolute; workers that score with it must see the same path).
    path = models.CharField(max_length=500, blank=True)
    # {"held_out_accuracy", "train_accuracy", "held_out_loss", "train_loss", "n_pairs", "n_train", "n_eval", "seconds"}
    metrics = models.JSONField(default=dict)
    curve = models.JSONField(
        default=list, help_text="[{epoch, train_loss, train_accuracy, eval_loss, eval_accuracy}]"
    )
    # error_message, task_id, worker, created_by and the timestamps: BackgroundJob.

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name", "version"], name="unique_reward_model_version")
        ]
        indexes = [models.Index(fields=["project", "-created_at"], name="reward_model_project_recent")]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"

    @property
    def label(self) -> str:
        return f"{self.name} v{self.version}"

    @property
    def is_active(self) -> bool:
        return self.status in (RewardModelStatus.QUEUED, RewardModelStatus.TRAINING)

    @property
    def is_ready(self) -> bool:
        return self.status == RewardModelStatus.READY

    @property
    def held_out_accuracy(self) -> float | None:
        return self.metrics.get("held_out_accuracy")

    @classmethod
    def owned_files(cls, pks: Iterable[int]) -> list[Path]:
        """What deleting these reward models removes from disk (webapp.core.purge): the directories their
        workers wrote, never a path outside the deployment's reward-model directory."""
        paths = cls.objects.filter(pk__in=list(pks)).exclude(path="").values_list("path", flat=True)
        return directories_under(settings.REWARD_MODELS_DIR, paths)

    def scores_in(self, criterion: dict[str, Any]) -> bool:
        """Whether a rubric criterion scores with this model: a `learned_reward` naming its directory."""
        params = criterion.get("params") or {}
        return criterion.get("kind") == LEARNED_REWARD and bool(self.path) and params.get("path") == self.path

    def reliability(self) -> Reliability:
        """Whether this model has earned a place in a rubric: held-out accuracy, its Wilson 95 %
        interval and the held-out size against the threshold (the rule: trainers.rubrics.reward_model.
        assess_reliability). The pages, the API and reward_model_register all ask here."""
        return assess_reliability(
            self.held_out_accuracy, int(self.metrics.get("n_eval") or 0), self.accuracy_threshold
        )

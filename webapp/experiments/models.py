from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.projects.models import Project


class VersionedDefinition(models.Model):
    """A named definition in a project whose content lives in immutable numbered versions.

    Environments and rubrics are both this: editing adds a version (related name `versions`), and a
    run pins the versions it used. Subclasses declare `project` with their own related name.
    """

    project: models.ForeignKey
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="unique_%(class)s_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def latest_version(self):
        return self.versions.order_by("-number").first()


class Environment(VersionedDefinition):
    """A named, versioned environment definition. Editing makes a new EnvironmentVersion."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="environments")

    class Meta(VersionedDefinition.Meta):
        pass


class EnvironmentVersion(models.Model):
    """Immutable: a run pins the version it used, so later edits never change a run's snapshot."""

    environment = models.ForeignKey(Environment, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    kind = models.CharField(max_length=64)
    config = models.JSONField(default=dict)
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["environment", "number"], name="unique_environment_version")]
        ordering = ["environment", "-number"]

    def __str__(self) -> str:
        return f"{self.environment.name} v{self.number}"

    def snapshot(self) -> dict:
        return {"name": self.environment.name, "version": self.number, "kind": self.kind, "config": self.config}


class Rubric(VersionedDefinition):
    """Named, weighted reward criteria. Editing makes a new RubricVersion."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="rubrics")

    class Meta(VersionedDefinition.Meta):
        pass


class RubricVersion(models.Model):
    """Immutable rubric spec: {"aggregation": ..., "criteria": [{"name", "kind", "weight", "params"}]}."""

    rubric = models.ForeignKey(Rubric, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    spec = models.JSONField(default=dict)
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["rubric", "number"], name="unique_rubric_version")]
        ordering = ["rubric", "-number"]

    def __str__(self) -> str:
        return f"{self.rubric.name} v{self.number}"

    def snapshot(self) -> dict:
        return {"name": self.rubric.name, "version": self.number, **self.spec}


class RunStatus(models.TextChoices):
    QUEUED = "QUEUED", "Queued"
    STARTING = "STARTING", "Starting"
    RUNNING = "RUNNING", "Running"
    SUCCEEDED = "SUCCEEDED", "Succeeded"
    FAILED = "FAILED", "Failed"
    CANCELLED = "CANCELLED", "Cancelled"
    LOST = "LOST", "Lost"


ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.STARTING, RunStatus.RUNNING)
FINAL_STATUSES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.LOST)
# Which status may follow which; webapp.experiments.services.run_transition enforces it atomically.
ALLOWED_TRANSITIONS: dict[str, tuple[str, ...]] = {
    RunStatus.QUEUED: (RunStatus.STARTING, RunStatus.CANCELLED, RunStatus.FAILED, RunStatus.LOST),
    RunStatus.STARTING: (RunStatus.RUNNING, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.LOST),
    RunStatus.RUNNING: (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.LOST),
    RunStatus.SUCCEEDED: (),
    RunStatus.FAILED: (),
    RunStatus.CANCELLED: (),
    RunStatus.LOST: (),
}


class RunOrigin(models.TextChoices):
    """Who trains the run: a worker the dashboard dispatched, or an external trainer (TRL, verl, a
    script using trainers.sdk) that only reports. External runs are never queued or resumed here."""

    DASHBOARD = "dashboard", "Dashboard"
    EXTERNAL = "external", "External trainer"


class Queue(models.TextChoices):
    CPU = "cpu", "CPU"
    GPU = "gpu", "GPU"


class Run(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="runs")
    name = models.CharField(max_length=120)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    origin = models.CharField(max_length=12, choices=RunOrigin.choices, default=RunOrigin.DASHBOARD)
    # What to train: pinned versions plus the fully resolved trainer config (knobs after preset).
    # Null only for external runs, whose trainer brings its own environment and reward functions.
    environment_version = models.ForeignKey(
        EnvironmentVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="runs"
    )
    rubric_version = models.ForeignKey(RubricVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="runs")
    preset = models.CharField(max_length=32)
    overrides = models.JSONField(default=dict, help_text="knobs the user changed from the preset")
    resolved_config = models.JSONField(default=dict)
    queue = models.CharField(max_length=8, choices=Queue.choices, default=Queue.CPU)

    # Lineage: resume continues a run from a checkpoint, fork changes knobs from one.
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    parent_checkpoint = models.ForeignKey(
        "Checkpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="descendant_runs"
    )
    lineage = models.CharField(max_length=8, blank=True, help_text="'' | resume | fork")

    # Lifecycle.
    status = models.CharField(max_length=12, choices=RunStatus.choices, default=RunStatus.QUEUED)
    status_changed_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    error_message = models.TextField(blank=True)
    error_traceback = models.TextField(blank=True)
    task_id = models.CharField(max_length=64, blank=True)
    worker = models.CharField(max_length=200, blank=True)

    # Progress, kept denormalised for list pages.
    current_step = models.PositiveIntegerField(default=0)
    max_steps = models.PositiveIntegerField(default=0)
    best_reward = models.FloatField(null=True, blank=True)
    last_reward = models.FloatField(null=True, blank=True)

    # Ingestion: a per-run token (hashed) and the highest event sequence number stored.
    ingest_token_hash = models.CharField(max_length=64, blank=True)
    last_seq = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["project", "-created_at"], name="run_project_recent"),
            models.Index(fields=["status", "heartbeat_at"], name="run_status_heartbeat"),
        ]

    def __str__(self) -> str:
        return self.name

    def iso_times(self) -> dict[str, str | None]:
        """When the run started and finished (ISO 8601, None if not yet), for live status messages."""
        return {name: value.isoformat() if value else None
                for name, value in (("started_at", self.started_at), ("finished_at", self.finished_at))}

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    @property
    def is_external(self) -> bool:
        return self.origin == RunOrigin.EXTERNAL

    @property
    def environment_label(self) -> str:
        """"arith v3", or "external" for an external run that pinned no environment."""
        version = self.environment_version
        return f"{version.environment.name} v{version.number}" if version else "external"

    @property
    def rubric_label(self) -> str:
        version = self.rubric_version
        return f"{version.rubric.name} v{version.number}" if version else "external"

    @property
    def progress(self) -> float:
        return min(1.0, self.current_step / self.max_steps) if self.max_steps else 0.0


class Checkpoint(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.PositiveIntegerField()
    path = models.CharField(max_length=500)
    kind = models.CharField(max_length=16, default="full", help_text="full | adapter")
    metrics = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    deleted = models.BooleanField(default=False, help_text="pruned by keep-best-N; kept for lineage")

    class Meta:
        ordering = ["run", "step"]
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="one_checkpoint_per_step")]

    def __str__(self) -> str:
        return f"{self.run} @ step {self.step}"

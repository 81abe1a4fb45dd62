from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.timesince import timesince

from webapp.core.dispatch import UNSENT, Queue
from webapp.core.purge import directories_under
from webapp.projects.models import Project

# Where `selectors` prefetch a definition's versions, newest first (`Prefetch(..., to_attr=...)`).
PREFETCHED_VERSIONS = "versions_desc"


class VersionedDefinition(models.Model):
    """A named definition in a project whose content lives in immutable numbered versions.

    Environments and rubrics are both this: editing adds a version (related name `versions`), and a
    run pins the versions it used. Subclasses declare `project` with their own related name.
    """

    project: models.ForeignKey
    versions: Any  # the subclass's numbered versions (the related name of its version model)
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
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
        """The newest version, the one a new run uses: the one rule every page, API and service asks.
        Free when the versions were prefetched (`PREFETCHED_VERSIONS`, as the API's selectors do, or a
        plain `prefetch_related("versions")`), else one query."""
        prefetched = self._prefetched_versions()
        if prefetched is not None:
            return max(prefetched, key=lambda version: version.number, default=None)
        return self.versions.order_by("-number").first()

    @property
    def version_count(self) -> int:
        prefetched = self._prefetched_versions()
        return len(prefetched) if prefetched is not None else self.versions.count()

    def _prefetched_versions(self) -> list | None:
        prefetched = getattr(self, PREFETCHED_VERSIONS, None)
        if prefetched is None:
            prefetched = getattr(self, "_prefetched_objects_cache", {}).get("versions")
        return None if prefetched is None else list(prefetched)


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
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["environment", "number"], name="unique_environment_version")
        ]
        ordering = ["environment", "-number"]

    def __str__(self) -> str:
        return f"{self.environment.name} v{self.number}"

    def snapshot(self) -> dict:
        return {
            "name": self.environment.name,
            "version": self.number,
            "kind": self.kind,
            "config": self.config,
        }


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
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
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
# Which status may follow which; webapp.experiments.services.transitions.run_transition enforces it atomically.
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


class RunKind(models.TextChoices):
    """What a dashboard run trains with: a GRPO-family algorithm on an environment and rubric (the
    `algorithm` knob picks which), or DPO on a preference snapshot (trainers/recipes/dpo.py))."""

    RL = "rl", "RL (GRPO family)"
    DPO = "dpo", "DPO"
    # A training client of the Tinker-compatible API (webapp/tinker): the client's own loop, our compute.
    TINKER = "tinker", "Tinker API client"


class VisibleRunManager(models.Manager["Run"]):
    """Runs nobody asked to delete: every page, API, list and feed reads runs through this (the default
    manager), so a deleted run is gone at once; its rows leave in the background (`Run.all_objects`,
    webapp/experiments/services/deletion.py)."""

    def get_queryset(self) -> models.QuerySet[Run]:
        return super().get_queryset().filter(deleting_at__isnull=True)


class Run(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="runs")
    name = models.CharField(max_length=120)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    origin = models.CharField(max_length=12, choices=RunOrigin.choices, default=RunOrigin.DASHBOARD)
    # What to train: pinned versions plus the fully resolved trainer config (knobs after preset).
    # Null only for external runs, whose trainer brings its own environment and reward functions.
    environment_version = models.ForeignKey(
        EnvironmentVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="runs"
    )
    rubric_version = models.ForeignKey(
        RubricVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="runs"
    )
    kind = models.CharField(max_length=8, choices=RunKind.choices, default=RunKind.RL)
    # DPO runs: the preference dataset they train on (PROTECT: a run's data stays inspectable).
    preference_snapshot = models.ForeignKey(
        "review.PreferenceSnapshot", null=True, blank=True, on_delete=models.PROTECT, related_name="dpo_runs"
    )
    preset = models.CharField(max_length=32)
    overrides = models.JSONField(default=dict, help_text="knobs the user changed from the preset")
    resolved_config = models.JSONField(default=dict)
    queue = models.CharField(max_length=8, choices=Queue.choices, default=Queue.CPU)

    # Lineage: resume continues a run from a checkpoint, fork changes knobs from one.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    parent_checkpoint = models.ForeignKey(
        "Checkpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="descendant_runs"
    )
    # init: a new run whose model is the parent checkpoint's weights (a GRPO run from a DPO checkpoint).
    lineage = models.CharField(max_length=8, blank=True, help_text="'' | resume | fork | init")
    # Automatic resumes in a row that led to this run (0: started or resumed by a person).
    auto_resume_count = models.PositiveSmallIntegerField(default=0)

    # Lifecycle.
    status = models.CharField(max_length=12, choices=RunStatus.choices, default=RunStatus.QUEUED)
    status_changed_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # When the trainer last reported progress (trainers.sdk.wire.PROGRESS_EVENTS): a run that heartbeats
    # without it for RUN_STALL_AFTER_S is stalled.
    progress_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    error_message = models.TextField(blank=True)
    error_traceback = models.TextField(blank=True)
    task_id = models.CharField(max_length=64, blank=True)
    worker = models.CharField(max_length=200, blank=True)

    # What people say about the run: short labels to find it by and a free-text note (run_annotate).
    tags = models.JSONField(default=list, blank=True, help_text="short labels, e.g. ['baseline', 'lr-sweep']")
    note = models.TextField(blank=True, help_text="free text: what this run tries, what was learned")

    # Progress, kept denormalised for list pages.
    current_step = models.PositiveIntegerField(default=0)
    max_steps = models.PositiveIntegerField(default=0)
    best_reward = models.FloatField(null=True, blank=True)
    best_reward_step = models.PositiveIntegerField(
        null=True, blank=True, help_text="the step that reached it"
    )
    last_reward = models.FloatField(null=True, blank=True)
    # The highest memory the run's trainer process held (MB), as its heartbeats report it
    # (trainers.sdk.wire: the heartbeat's peak_rss_mb / peak_gpu_mb); only ever rises.
    peak_rss_mb = models.PositiveIntegerField(null=True, blank=True)
    peak_gpu_mb = models.PositiveIntegerField(null=True, blank=True)

    # Ingestion: the run's one token (see ingest_token(); only its hash is kept for checking) and the
    # highest event sequence number stored.
    ingest_token_hash = models.CharField(max_length=64, blank=True)
    ingest_token_nonce = models.CharField(max_length=32, blank=True)
    last_seq = models.BigIntegerField(default=0)

    # When someone deleted the run: it is hidden from then on, and its rows are purged in short batches.
    deleting_at = models.DateTimeField(null=True, blank=True)

    objects = VisibleRunManager()
    all_objects = models.Manager()  # noqa: DJ012 — deleted runs too (only the purge reads these); `objects` is the default

    class Meta:
        base_manager_name = "all_objects"  # a row's own foreign keys reach a run being deleted
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["project", "-created_at"], name="run_project_recent"),
            models.Index(fields=["status", "heartbeat_at"], name="run_status_heartbeat"),
        ]

    def __str__(self) -> str:
        return self.name

    # What "best reward" means wherever it is shown (run pages, lists, the project home): one definition.
    BEST_REWARD_MEANING = (
        "the highest mean training reward of one step (reward/mean), on the scale of the run's rubric: "
        "comparable only between runs scored by the same rubric version"
    )

    def progress_after(
        self,
        *,
        step: int,
        last_reward: float | None,
        best_reward: float | None,
        best_step: int | None = None,
    ) -> dict[str, Any]:
        """The list pages' denormalised progress once metrics up to `step` are stored: the step only moves
        forward, the best reward is a maximum (with the step that reached it, `best_step`, `step` if not
        given; the first step to reach a tie keeps it), the last reward is the newest batch's. Read from
        this instance, so the caller holds the run's row lock (ingestion does) for the answer to stay true."""
        fields: dict[str, Any] = {"current_step": max(self.current_step, step)}
        if last_reward is not None:
            fields["last_reward"] = last_reward
        if best_reward is not None and (self.best_reward is None or best_reward > self.best_reward):
            fields["best_reward"] = best_reward
            fields["best_reward_step"] = step if best_step is None else best_step
        return fields

    @property
    def progress_since(self) -> datetime | None:
        """Since when the run has made no progress: its last progress report, else its start."""
        return self.progress_at or self.started_at

    def is_stalled(self, now: datetime | None = None) -> bool:
        """An active run whose trainer still heartbeats (it is not LOST) but has reported no progress for
        RUN_STALL_AFTER_S: a hung generation, a deadlocked learner, a trainer waiting on nothing."""
        since = self.progress_since
        if (
            self.status not in (RunStatus.STARTING, RunStatus.RUNNING)
            or self.heartbeat_at is None
            or since is None
        ):
            return False
        now = now or timezone.now()
        if now - self.heartbeat_at > timedelta(seconds=settings.RUN_HEARTBEAT_TIMEOUT_S):
            return False
        return now - since >= timedelta(seconds=settings.RUN_STALL_AFTER_S)

    def stall(self, now: datetime | None = None) -> dict[str, str] | None:
        """The stalled flag as the run page shows it (`since`: ISO 8601, `for`: "11 minutes", the
        template's `timesince`), None while the run is not stalled: in `page_state()` and in the heartbeat
        news of every ingested batch, so the flag appears and goes away on an open page without a reload."""
        now = now or timezone.now()
        since = self.progress_since
        if since is None or not self.is_stalled(now):
            return None
        return {"since": since.isoformat(), "for": timesince(since, now)}

    def iso_times(self) -> dict[str, str | None]:
        """When the run started, finished and last reported (ISO 8601, None if not yet), for live messages."""
        return {
            name: value.isoformat() if value else None
            for name, value in (
                ("started_at", self.started_at),
                ("finished_at", self.finished_at),
                ("heartbeat_at", self.heartbeat_at),
            )
        }

    def actions(self) -> dict[str, bool]:
        """Which of the run page's actions apply to the run now (the viewer's role aside): the page, its
        live updates and the APIs all ask here."""
        can_continue = self.can_resume()
        # The fork page edits GRPO-family knobs; a DPO run forks through the API with DPO knobs.
        return {
            "cancel": self.can_cancel(),
            "resume": can_continue,
            "fork": can_continue and not self.is_dpo,
            "delete": self.delete_refusal() is None,
        }

    def page_state(self) -> dict[str, Any]:
        """Everything the run page shows that a status change can alter: the status, its timestamps, the
        worker, the cancel request, the error, the available actions, the checkpoints, the trainer's peak
        memory and the stalled flag. Sent in every status event and in the websocket's snapshot, so a live page and a reloaded
        one agree. (Where a queued run stands depends on the workers too: the snapshot adds it, and `queue`
        messages keep it true: webapp.fleet.selectors.queue_states.)"""
        return {
            "status": self.status,
            **self.iso_times(),
            "worker": self.worker,
            "cancel_requested": self.cancel_requested,
            "error_message": self.error_message,
            "actions": self.actions(),
            "checkpoints": [c.summary() for c in self.checkpoints.order_by("step")],
            "peak_memory": self.peak_memory(),
            "stall": self.stall(),
        }

    def peak_memory(self) -> dict[str, int | None] | None:
        """The trainer process's peak resident memory and GPU memory (MB) so far; None before any report."""
        if self.peak_rss_mb is None and self.peak_gpu_mb is None:
            return None
        return {"rss_mb": self.peak_rss_mb, "gpu_mb": self.peak_gpu_mb}

    def status_event(self, message: str = "") -> dict[str, Any]:
        """The live event of this run's current status: every path that changes a status (the trainer's
        report, the cancel button, the reaper) sends this, so every page learns the same fields."""
        event: dict[str, Any] = {"type": "status", **self.page_state()}
        if message:
            event["message"] = message
        return event

    def ingest_token(self) -> str:
        """The run's ingestion token, the same for its whole life: the one `run_create` returns is the one
        the worker that claims the run hands its trainer. Derived from the secret key and a per-run nonce
        instead of stored, so a database dump alone does not hold usable tokens."""
        if not self.pk or not self.ingest_token_nonce:
            raise ValueError("this run has no ingestion token nonce")
        digest = hmac.new(
            settings.SECRET_KEY.encode(),
            f"ingest:{self.pk}:{self.ingest_token_nonce}".encode(),
            hashlib.sha256,
        ).digest()
        return "rsr_" + base64.urlsafe_b64encode(digest).decode().rstrip("=")

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    def can_cancel(self) -> bool:
        """Queued runs are dropped at once, running ones asked to stop (external trainers included); a run
        already asked to stop is not offered the button again."""
        return self.is_active and not self.cancel_requested

    def resume_refusal(self) -> tuple[str, str] | None:
        """Why this run cannot be resumed or forked, as (field, message); None when it can. The run page
        offers Resume only when this is None, and `run_resume` refuses with exactly this."""
        if self.is_external:
            return "origin", "This run was trained outside the dashboard: resume it with its own trainer."
        if self.kind == RunKind.TINKER:
            return "kind", (
                "A Tinker client's run continues from its loop: create_training_client_from_state"
                "_with_optimizer(<a checkpoint's tinker:// path>) (docs/tinker.md)."
            )
        if self.is_active:
            return "status", "This run is still active: cancel it (or wait for it) first."
        if self.is_dpo and self.status == RunStatus.SUCCEEDED:
            return "status", ("This DPO run finished its steps: start a new run from its checkpoint instead.")
        if not self.checkpoints.filter(deleted=False).exists():
            return "checkpoint", "This run has no checkpoint to start from."
        return None

    def can_resume(self) -> bool:
        return self.resume_refusal() is None

    @staticmethod
    def artifacts_path(run_id: int) -> Path:
        """Where the worker that trains run `run_id` writes its checkpoints and files."""
        return Path(settings.RUN_ARTIFACTS_DIR) / f"run-{run_id}"

    @classmethod
    def owned_files(cls, pks: Iterable[int]) -> list[Path]:
        """What deleting these runs removes from disk (webapp.core.purge): their artifact directories."""
        return directories_under(settings.RUN_ARTIFACTS_DIR, [cls.artifacts_path(pk) for pk in pks])

    def delete_refusal(self) -> str | None:
        """Why this run cannot be deleted now; None when it can (who may: `access.may_delete_run`). A run still
        training stays, and so does one another active run starts from (its checkpoint is that run's model)."""
        if self.is_active:
            return "This run is still active: cancel it (or wait for it) first."
        heir = (
            Run.objects.filter(parent_checkpoint__run=self, status__in=ACTIVE_STATUSES)
            .exclude(pk=self.pk)
            .values_list("pk", flat=True)
            .first()
        )
        if heir is not None:
            return f"Run {heir} is training from this run's checkpoint: wait for it (or cancel it) first."
        return None

    def dispatch_pending(self) -> bool:
        """Queued here but not yet handed to a worker queue: the broker could not take its task when the
        run was launched. `run_dispatch_pending` (the periodic `workers.dispatch_pending` job) sends it once
        the broker answers. Reward models and queue judges: `BackgroundJob.dispatch_pending`."""
        return self.status == RunStatus.QUEUED and self.task_id == UNSENT

    @property
    def is_external(self) -> bool:
        return self.origin == RunOrigin.EXTERNAL

    @property
    def is_dpo(self) -> bool:
        return self.kind == RunKind.DPO

    @property
    def checkpoint_metric_columns(self) -> tuple[tuple[str, str], ...]:
        """(metric key, heading) of the checkpoint metrics this run's pages show as columns, in order: a DPO
        run's held-out preference accuracy and margin, a GRPO run's evaluation accuracy and rewards. The one
        rule: the run page's table, its live rows (Checkpoint.summary) and the text of the other metrics."""
        return DPO_CHECKPOINT_COLUMNS if self.is_dpo else RL_CHECKPOINT_COLUMNS

    @property
    def has_rewards(self) -> bool:
        """Whether the run's trajectories carry rewards (a best training reward to show): not a DPO run,
        which trains on preference pairs."""
        return not self.is_dpo

    @property
    def environment_label(self) -> str:
        """ "arith v3", "preferences v2" for a DPO run, or "external" for an external run that pinned
        no environment."""
        version = self.environment_version
        if version is None and self.is_dpo and self.preference_snapshot_id:
            return f"preferences v{self.preference_snapshot.version}"
        return f"{version.environment.name} v{version.number}" if version else "external"

    @property
    def rubric_label(self) -> str:
        version = self.rubric_version
        if version is None and self.is_dpo:
            return "DPO (no rubric)"
        return f"{version.rubric.name} v{version.number}" if version else "external"

    @property
    def progress(self) -> float:
        return min(1.0, self.current_step / self.max_steps) if self.max_steps else 0.0


# The checkpoint metrics the run page shows as their own columns, in this order, per run kind (the others
# follow as text; `Run.checkpoint_metric_columns` chooses), and how every metric value is written: 4
# significant digits.
RL_CHECKPOINT_COLUMNS = (
    ("eval/accuracy", "eval/accuracy"),
    ("eval/reward/mean", "eval/reward/mean"),
    ("reward/mean", "reward/mean"),
)
DPO_CHECKPOINT_COLUMNS = (
    ("eval/dpo/accuracy", "held-out preference accuracy"),
    ("eval/dpo/margin", "held-out margin"),
    ("dpo/accuracy", "training preference accuracy"),
)


MODEL_WEIGHTS = "model.safetensors"
# What a checkpoint holds for resume only (trainers/learn/checkpoint.py), not part of the model it is.
TRAINER_STATE_FILES = frozenset({"optimizer.pt", "rng.pt", "trainer_state.json", "run_config.json"})


def format_metric(value: Any) -> str:
    """0.6667 for 0.66666…, 1.275 for 1.2750000000000001, 1.235e+05 for 123456.7; "—" for none."""
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value) if abs(value) < 10**6 else f"{value:.4g}"
    return f"{value:.4g}"


class VisibleCheckpointManager(models.Manager["Checkpoint"]):
    """Checkpoints of runs nobody asked to delete: a deleted run's checkpoint can no longer be downloaded or
    started from, although its rows wait for the purge (VisibleRunManager)."""

    def get_queryset(self) -> models.QuerySet[Checkpoint]:
        return super().get_queryset().filter(run__deleting_at__isnull=True)


class Checkpoint(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.PositiveIntegerField()
    path = models.CharField(max_length=500)
    kind = models.CharField(max_length=16, default="full", help_text="full | adapter")
    metrics = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    deleted = models.BooleanField(default=False, help_text="pruned by keep-best-N; kept for lineage")

    objects = VisibleCheckpointManager()

    class Meta:
        ordering = ["run", "step"]
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="one_checkpoint_per_step")]

    def __str__(self) -> str:
        return f"{self.run} @ step {self.step}"

    @property
    def key_metrics(self) -> list[str]:
        """The values of its run's checkpoint columns (`Run.checkpoint_metric_columns`), formatted ("—"
        where this checkpoint has none)."""
        metrics = self.metrics or {}
        return [format_metric(metrics.get(key)) for key, _ in self.run.checkpoint_metric_columns]

    @property
    def metrics_text(self) -> str:
        """ "kl=0.01, loss=1.275": the other metrics as the run page shows them, 4 significant digits
        (written here once, so the rendered table and its live rows read the same)."""
        columns = {key for key, _ in self.run.checkpoint_metric_columns}
        return ", ".join(
            f"{key}={format_metric(value)}"
            for key, value in (self.metrics or {}).items()
            if key not in columns
        )

    def weight_files(self) -> list[str]:
        """The checkpoint's weights as paths relative to its directory (trainers/learn/checkpoint.py's layout:
        model*.safetensors, merged for LoRA, whose adapters are also adapter/adapter_model.safetensors); [] when
        pruned or when the directory is not on this machine."""
        from pathlib import Path

        root = Path(self.path)
        if self.deleted or not self.path or not root.is_dir():
            return []
        found = sorted(root.glob("*.safetensors")) + sorted((root / "adapter").glob("*.safetensors"))
        return [str(p.relative_to(root)) for p in found if p.is_file()]

    def default_weight_file(self) -> str | None:
        """The weights a download gives unless one is named: the only file, or the model's own
        (`model.safetensors`: a LoRA checkpoint's adapters merged into the base weights); None when
        several shards leave the choice to the reader."""
        files = self.weight_files()
        if len(files) == 1:
            return files[0]
        return MODEL_WEIGHTS if MODEL_WEIGHTS in files else None

    def model_files(self) -> list[str]:
        """The files of the model another run can start from (weights, config, tokenizer), relative to the
        checkpoint's directory: everything at its top but the trainer's own state (optimizer, RNG,
        position); [] when pruned or not on this machine."""
        from pathlib import Path

        root = Path(self.path)
        if not self.weight_files() or not (root / "config.json").is_file():
            return []
        return sorted(p.name for p in root.iterdir() if p.is_file() and p.name not in TRAINER_STATE_FILES)

    def summary(self) -> dict[str, Any]:
        """The checkpoint as the run page's table and its live updates show it. No server path: the page
        is also read by viewers (the API gives the path to those who may launch)."""
        return {
            "id": self.pk,
            "step": self.step,
            "kind": self.kind,
            "metrics": self.metrics,
            "key_metrics": self.key_metrics,
            "metrics_text": self.metrics_text,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "deleted": self.deleted,
        }

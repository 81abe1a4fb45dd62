from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import models
from django.utils import timezone

# A worker that reported within this long and did not say it stopped is online (its heartbeat is ~15 s).
ONLINE_WITHIN = timedelta(seconds=45)


class WorkerNodeQuerySet(models.QuerySet):
    def online(self) -> WorkerNodeQuerySet:
        """The workers online now (the one rule: `WorkerNode.is_online` says the same of one)."""
        return self.filter(last_seen__gte=timezone.now() - ONLINE_WITHIN, stopped=False)


class WorkerNode(models.Model):
    """A Celery worker process as it last reported itself: what it serves and what it has."""

    hostname = models.CharField(max_length=200, unique=True)
    queues = models.JSONField(default=list)
    gpus = models.JSONField(default=list, help_text="[{'index', 'name', 'memory_mb'}]")
    cpus = models.PositiveIntegerField(default=0)
    usage = models.JSONField(
        default=dict,
        blank=True,
        help_text="at the last report: {'cpu_percent', 'memory_used_mb', 'memory_total_mb', "
        "'gpus': [{'index', 'utilization_percent', 'memory_used_mb', 'memory_total_mb'}]} (GPUs where NVML is present)",
    )
    judge_models = models.JSONField(
        default=list,
        blank=True,
        help_text="judge models it can load (trainers.rubrics.judge_models.servable_models)",
    )
    parts = models.JSONField(
        default=list,
        blank=True,
        help_text="the training parts it has (trainers.parts.part_catalogue): [{'kind', 'name', 'title', "
        "'description', 'options_schema', 'source', 'version'}]",
    )
    ray_address = models.CharField(max_length=200, blank=True)
    ray_resources = models.JSONField(
        default=dict,
        blank=True,
        help_text="the Ray cluster it runs on, as Ray counts it ({'CPU': 8.0, 'GPU': 1.0, …}: the cluster at "
        "ray_address, or this machine's for a local Ray); {} when unknown (workers.node.ray_resources)",
    )
    pid = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField()
    current_run = models.ForeignKey(
        "experiments.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    stopped = models.BooleanField(default=False)

    objects = WorkerNodeQuerySet.as_manager()

    class Meta:
        ordering = ["hostname"]

    def __str__(self) -> str:
        return self.hostname

    def ray_summary(self) -> str:
        """ "16 CPU · 1 GPU · 2 accelerator_slot": what the reported Ray cluster offers actors, as the
        Workers page shows it (Ray's memory figures and per-node markers left out); "" when unknown."""
        shown = {
            name: amount
            for name, amount in (self.ray_resources or {}).items()
            if not name.startswith("node:")
            and name not in ("memory", "object_store_memory")
            and "_group_" not in name
        }
        order = sorted(shown, key=lambda name: (name not in ("CPU", "GPU"), name != "CPU", name))
        return " · ".join(f"{shown[name]:g} {name}" for name in order)

    def launch_shortfall(self, config: dict[str, Any]) -> str | None:
        """Why the Ray cluster this worker reported cannot hold a run with the resolved `config` (the
        trainer's own rule, `trainers.learn.distributed.launch_shortfall`); None when it can, when the run
        places no Ray actors, or when the worker reported no cluster (unknown never refuses)."""
        from trainers.learn.distributed import launch_shortfall

        if not self.ray_resources:
            return None
        return launch_shortfall(config, self.ray_resources, local=self.ray_address in ("", "local"))

"""Reads of a run's rollouts, metrics and checkpoints. Callers have already checked access to the run.

Long curves are downsampled in the database (bucket means over equal step ranges) so a 100k-step
series never crosses the wire point by point.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Avg, Count, F, Max, Min, Prefetch, QuerySet

from webapp.experiments.models import Checkpoint, Run
from webapp.rollouts.models import MetricPoint, Trajectory, Turn


def trajectory_list(
    *,
    run: Run,
    step: int | None = None,
    split: str | None = None,
    min_reward: float | None = None,
    max_reward: float | None = None,
    group_index: int | None = None,
    task_id: str | None = None,
    status: str | None = None,
) -> QuerySet[Trajectory]:
    """A run's trajectories in (step, group, sample) order, filtered by whichever arguments are given."""
    trajectories = Trajectory.objects.filter(run=run)
    if step is not None:
        trajectories = trajectories.filter(step=step)
    if split:
        trajectories = trajectories.filter(split=split)
    if min_reward is not None:
        trajectories = trajectories.filter(reward__gte=min_reward)
    if max_reward is not None:
        trajectories = trajectories.filter(reward__lte=max_reward)
    if group_index is not None:
        trajectories = trajectories.filter(group_index=group_index)
    if task_id:
        trajectories = trajectories.filter(task_id=task_id)
    if status:
        trajectories = trajectories.filter(status=status)
    return trajectories.order_by("step", "group_index", "sample_index", "id")


def trajectory_get(*, run: Run, trajectory_id: int) -> Trajectory | None:
    """One trajectory of `run` with its turns in order (None when the run has no such trajectory)."""
    return (
        Trajectory.objects.filter(run=run, pk=trajectory_id)
        .prefetch_related(Prefetch("turns", queryset=Turn.objects.order_by("index")))
        .first()
    )


def checkpoint_list(*, run: Run, include_deleted: bool = True) -> QuerySet[Checkpoint]:
    checkpoints = Checkpoint.objects.filter(run=run)
    if not include_deleted:
        checkpoints = checkpoints.filter(deleted=False)
    return checkpoints.order_by("step")


def metric_keys(*, run: Run) -> list[str]:
    return list(MetricPoint.objects.filter(run=run).values_list("key", flat=True).distinct().order_by("key"))


@dataclass
class MetricSeries:
    """One metric's curve. When downsampled, each point is the mean of a bucket of steps (`step` is the
    bucket's last step) and `min` / `max` give the bucket's envelope; otherwise they equal `values`."""

    key: str
    steps: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    min: list[float] = field(default_factory=list)
    max: list[float] = field(default_factory=list)
    total_points: int = 0
    downsampled: bool = False


def metric_series(*, run: Run, keys: list[str] | None = None, max_points: int = 2000) -> dict[str, MetricSeries]:
    """Per-key series of `run` ({key: MetricSeries}); all keys when `keys` is None.

    A series longer than `max_points` is cut into at most `max_points` buckets of equal step width.
    """
    if max_points < 1:
        raise ValueError("max_points must be at least 1")
    points = MetricPoint.objects.filter(run=run)
    if keys is not None:
        points = points.filter(key__in=keys)
    stats = {
        row["key"]: row
        for row in points.values("key").annotate(n=Count("id"), first=Min("step"), last=Max("step")).order_by()
    }
    series: dict[str, MetricSeries] = {}
    for key in sorted(stats) if keys is None else [k for k in keys if k in stats]:
        row = stats[key]
        one = MetricSeries(key=key, total_points=row["n"])
        if row["n"] <= max_points:
            for step, value in points.filter(key=key).order_by("step", "id").values_list("step", "value"):
                one.steps.append(step)
                one.values.append(value)
            one.min, one.max = list(one.values), list(one.values)
        else:
            span = row["last"] - row["first"] + 1
            width = -(-span // max_points)  # ceiling division: at most max_points buckets
            one.downsampled = True
            # Integer column minus and divided by integers is integer division on SQLite and Postgres
            # alike: that is what puts each point into its bucket.
            buckets = (
                points.filter(key=key)
                .annotate(bucket=(F("step") - row["first"]) / width)
                .values("bucket")
                .annotate(step=Max("step"), mean=Avg("value"), low=Min("value"), high=Max("value"))
                .order_by("bucket")
            )
            for bucket in buckets:
                one.steps.append(bucket["step"])
                one.values.append(bucket["mean"])
                one.min.append(bucket["low"])
                one.max.append(bucket["high"])
        series[key] = one
    return series



def lineage_trajectories(*, run: Run) -> QuerySet[Trajectory]:
    """A run's trajectories as its lineage saw them: for a resumed run, the parent's (recursively)
    up to the checkpoint it resumed from, then its own. Steps the parent trained after that
    checkpoint were redone by the resumed run, so each step appears exactly once."""
    from django.db.models import Q

    condition = Q(run=run)
    child = run
    while child.lineage == "resume" and child.parent_id and child.parent_checkpoint_id:
        condition |= Q(run_id=child.parent_id, step__lte=child.parent_checkpoint.step)
        # Each ancestor contributes only up to where its own child resumed from it.
        parent = Run.objects.select_related("parent_checkpoint").get(pk=child.parent_id)
        child = parent
    return Trajectory.objects.filter(condition).order_by("step", "split", "group_index", "sample_index")

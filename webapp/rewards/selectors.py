"""Reads for the reward-model pages and the lineage page. Every function is scoped to a project."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Count, QuerySet

from webapp.experiments.models import Checkpoint, RubricVersion, Run, RunKind
from webapp.projects.access import ProjectAccess
from webapp.projects.models import Project
from webapp.review.models import PreferenceQueue, PreferenceSnapshot
from webapp.rewards.models import RewardModel, RewardModelStatus

CHECKPOINTS_PER_RUN = 6


def reward_model_list(*, project: Project) -> QuerySet[RewardModel]:
    return (
        RewardModel.objects.filter(project=project)
        .select_related("snapshot", "created_by")
        .order_by("-created_at", "-pk")
    )


def reward_model_queryset() -> QuerySet[RewardModel]:
    """Reward models with what their page shows (look one up with access_reward_model)."""
    return RewardModel.objects.select_related(
        "snapshot", "snapshot__queue", "created_by", "base_checkpoint", "base_checkpoint__run"
    )


def trainable_snapshots(*, project: Project) -> QuerySet[PreferenceSnapshot]:
    """The project's preference snapshots with their pair counts, newest first."""
    return (
        PreferenceSnapshot.objects.filter(project=project)
        .select_related("queue")
        .annotate(pair_count=Count("pairs"))
        .order_by("-created_at", "-pk")
    )


def base_checkpoints(*, project: Project) -> QuerySet[Checkpoint]:
    """The kept checkpoints of the project a reward model may embed with, the newest runs' first (a
    queryset a form field can look its choice up in)."""
    kept = Checkpoint.objects.filter(run__project=project, deleted=False).select_related("run")
    return kept.order_by("-run__created_at", "-step")


def rubric_versions_using(reward_model: RewardModel) -> list[RubricVersion]:
    """Every rubric version with a `learned_reward` criterion naming this model's directory — the one
    registration made and any later edit that kept the criterion."""
    if not reward_model.path:
        return []
    candidates = (
        RubricVersion.objects.filter(
            rubric__project_id=reward_model.project_id, created_at__gte=reward_model.created_at
        )
        .select_related("rubric")
        .order_by("rubric__name", "number")
    )
    return [v for v in candidates if any(reward_model.scores_in(c) for c in v.spec.get("criteria", []))]


def curve_points(curve: list[dict[str, float]], key: str, *, width: int = 320, height: int = 90) -> str:
    """An SVG polyline `points` attribute for one accuracy series (0..1 on the y axis); numbers only."""
    series = [(p["epoch"], p[key]) for p in curve if isinstance(p.get(key), int | float) and p[key] == p[key]]
    if not series:
        return ""
    first, last = series[0][0], series[-1][0]
    span = (last - first) or 1.0
    return " ".join(
        f"{(epoch - first) / span * width:.1f},{(1 - value) * height:.1f}" for epoch, value in series
    )


@dataclass
class RunLink:
    run: Run
    checkpoints: list[Checkpoint]
    more_checkpoints: int = 0


@dataclass
class Upstream:
    """Where a preference snapshot came from: the runs whose rollouts were judged and the queue."""

    snapshot: PreferenceSnapshot
    snapshot_pairs: int
    queue: PreferenceQueue | None  # None when deleted, or hidden from this reader
    queue_hidden: bool
    source_runs: list[Run]


def upstream(snapshot: PreferenceSnapshot, *, access: ProjectAccess) -> Upstream:
    queue = snapshot.queue
    hidden = queue is not None and not queue.visible_to(access.membership)
    source_run_ids = [
        entry["id"]
        for entry in snapshot.provenance.get("runs", [])
        if isinstance(entry, dict) and isinstance(entry.get("id"), int)
    ]
    source_runs = list(
        Run.objects.filter(project_id=snapshot.project_id, pk__in=source_run_ids).order_by("created_at", "pk")
    )
    return Upstream(
        snapshot=snapshot,
        snapshot_pairs=snapshot.pairs.count(),
        queue=None if hidden else queue,
        queue_hidden=hidden,
        source_runs=source_runs,
    )


@dataclass
class Lineage:
    """One turn of the loop, upstream to downstream."""

    reward_model: RewardModel
    upstream: Upstream
    rubric_versions: list[RubricVersion]
    runs: list[RunLink] = field(default_factory=list)

    @property
    def checkpoint_count(self) -> int:
        return sum(len(link.checkpoints) + link.more_checkpoints for link in self.runs)


def _run_link(run: Run) -> RunLink:
    checkpoints = list(Checkpoint.objects.filter(run=run).order_by("-step")[: CHECKPOINTS_PER_RUN + 1])
    total = (
        Checkpoint.objects.filter(run=run).count()
        if len(checkpoints) > CHECKPOINTS_PER_RUN
        else len(checkpoints)
    )
    shown = sorted(checkpoints[:CHECKPOINTS_PER_RUN], key=lambda c: c.step)
    return RunLink(run=run, checkpoints=shown, more_checkpoints=total - len(shown))


def lineage(reward_model: RewardModel, *, access: ProjectAccess) -> Lineage:
    versions = rubric_versions_using(reward_model)
    runs = list(
        Run.objects.filter(rubric_version__in=versions)
        .select_related("rubric_version__rubric")
        .order_by("created_at", "pk")
    )
    return Lineage(
        reward_model=reward_model,
        upstream=upstream(reward_model.snapshot, access=access),
        rubric_versions=versions,
        runs=[_run_link(run) for run in runs],
    )


def lineages(*, access: ProjectAccess, limit: int = 20) -> list[Lineage]:
    # A failed or cancelled model produced nothing to trace.
    models = reward_model_list(project=access.project).exclude(
        status__in=[RewardModelStatus.FAILED, RewardModelStatus.CANCELLED]
    )[:limit]
    return [lineage(reward_model, access=access) for reward_model in models]


@dataclass
class DPOLineage:
    """The direct route: snapshot → DPO run → its checkpoints → the runs started from them (a GRPO run
    from a DPO checkpoint, a resume, a fork), each with the checkpoint it started from."""

    upstream: Upstream | None  # None only for a DPO run that names no snapshot (the model allows it)
    dpo: RunLink
    children: list[Run]


def dpo_lineage(run: Run, *, access: ProjectAccess) -> DPOLineage:
    """`run` is a DPO run (`Run.is_dpo`) of `access`'s project."""
    children = list(
        Run.objects.filter(parent=run)
        .select_related("parent_checkpoint", "rubric_version__rubric", "environment_version__environment")
        .order_by("created_at", "pk")
    )
    snapshot = run.preference_snapshot
    return DPOLineage(
        upstream=upstream(snapshot, access=access) if snapshot is not None else None,
        dpo=_run_link(run),
        children=children,
    )


def dpo_lineages(*, access: ProjectAccess, limit: int = 20) -> list[DPOLineage]:
    """The project's most recent DPO runs that start a chain (not resumes or forks of another DPO run)."""
    runs = (
        Run.objects.filter(project=access.project, kind=RunKind.DPO)
        .exclude(parent__kind=RunKind.DPO, lineage__in=("resume", "fork"))
        .select_related("preference_snapshot__queue")
        .order_by("-created_at", "-pk")[:limit]
    )
    return [dpo_lineage(run, access=access) for run in runs]

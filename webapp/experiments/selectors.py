"""Reads for the experiments pages. Every function takes the project it is scoped to."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.db import models
from django.db.models import Count, F, Max, OuterRef, Prefetch, Q, QuerySet, Subquery
from django.db.models.functions import Lower

from trainers.registry import criterion_kinds
from trainers.rubrics import ComponentScore, score_trajectory
from trainers.types import Trajectory
from webapp.experiments.models import (
    ACTIVE_STATUSES,
    PREFETCHED_VERSIONS,
    Checkpoint,
    Environment,
    EnvironmentVersion,
    Rubric,
    RubricVersion,
    Run,
    RunStatus,
)
from webapp.projects.models import Project


def run_queryset() -> QuerySet[Run]:
    """Runs with what the run serializer and the run list read (look one up with access_run)."""
    return Run.objects.select_related(
        "project",
        "created_by",
        "environment_version__environment",
        "rubric_version__rubric",
        "preference_snapshot",
    )


# How the runs list sorts: the choice's key → (label, ordering). Rewards put runs without one last.
RUN_SORTS: dict[str, tuple[str, tuple[Any, ...]]] = {
    "-created": ("Newest", ("-created_at", "-pk")),
    "created": ("Oldest", ("created_at", "pk")),
    "-reward": ("Best reward", (F("best_reward").desc(nulls_last=True), "-created_at", "-pk")),
    "reward": ("Lowest reward", (F("best_reward").asc(nulls_last=True), "-created_at", "-pk")),
    "status": ("Status", ("status", "-created_at", "-pk")),
    "name": ("Name", (Lower("name"), "pk")),
}
DEFAULT_RUN_SORT = "-created"


def run_list(
    *,
    project: Project,
    status: str | None = None,
    search: str = "",
    tag: str = "",
    sort: str = DEFAULT_RUN_SORT,
) -> QuerySet[Run]:
    """The project's runs, newest first unless `sort` (a RUN_SORTS key) says otherwise; optionally of one
    status (an unknown status matches none), with `search` in the name, note or a tag, and with `tag`."""
    runs = run_queryset().filter(project=project)
    if status:
        runs = runs.filter(status=status)
    search = search.strip()
    if search:
        runs = runs.filter(Q(name__icontains=search) | Q(note__icontains=search) | Q(tags__icontains=search))
    if tag.strip():
        # The JSON text of the list holds each tag quoted: match one whole tag, case aside.
        runs = runs.filter(tags__icontains=json.dumps(tag.strip()))
    _label, ordering = RUN_SORTS.get(sort, RUN_SORTS[DEFAULT_RUN_SORT])
    return runs.order_by(*ordering)


def run_tags(*, project: Project) -> list[str]:
    """Every tag used on the project's runs, sorted (case aside), for the list's tag filter."""
    seen: dict[str, str] = {}
    for tags in Run.objects.filter(project=project).exclude(tags=[]).values_list("tags", flat=True):
        for tag in tags or []:
            seen.setdefault(tag.lower(), tag)
    return [seen[key] for key in sorted(seen)]


def run_detail_queryset() -> QuerySet[Run]:
    """Runs with what the run page shows of their definitions and lineage (look one up with access_run)."""
    return Run.objects.select_related(
        "created_by",
        "environment_version__environment",
        "environment_version__created_by",
        "rubric_version__rubric",
        "rubric_version__created_by",
        "parent",
        "parent_checkpoint__run",
        "preference_snapshot",
    )


def run_cancel_requested(run_id: int) -> bool:
    """Whether someone asked this run to stop (the worker's cancel watcher reads it every second)."""
    return Run.objects.filter(pk=run_id, cancel_requested=True).exists()


def run_children(run: Run) -> QuerySet[Run]:
    """Runs resumed or forked from this one."""
    return Run.objects.filter(parent=run).order_by("created_at", "pk")


def environment_list(*, project: Project) -> QuerySet[Environment]:
    """Environments with their latest version number and kind and how many runs used any version."""
    newest = EnvironmentVersion.objects.filter(environment=OuterRef("pk")).order_by("-number")
    return (
        Environment.objects.filter(project=project)
        .annotate(
            latest_number=Subquery(newest.values("number")[:1]),
            latest_kind=Subquery(newest.values("kind")[:1]),
            run_count=Count("versions__runs", distinct=True),
        )
        .order_by("name")
    )


def environment_versions(environment: Environment) -> QuerySet[EnvironmentVersion]:
    """Every version, newest first, with the runs that pinned it."""
    return (
        environment.versions.select_related("created_by")
        .prefetch_related(Prefetch("runs", queryset=Run.objects.order_by("-created_at")))
        .order_by("-number")
    )


def _with_versions(queryset: QuerySet, version_model: type[models.Model]) -> QuerySet:
    """Definitions with their versions prefetched newest first (`PREFETCHED_VERSIONS`: `latest_version` costs no query), for the API."""
    versions = version_model._default_manager.select_related("created_by").order_by("-number")
    return (
        queryset.select_related("created_by")
        .prefetch_related(Prefetch("versions", queryset=versions, to_attr=PREFETCHED_VERSIONS))
        .order_by("name")
    )


def environments_with_versions(*, project: Project) -> QuerySet[Environment]:
    return _with_versions(Environment.objects.filter(project=project), EnvironmentVersion)


def rubrics_with_versions(*, project: Project) -> QuerySet[Rubric]:
    return _with_versions(Rubric.objects.filter(project=project), RubricVersion)


def rubric_list(*, project: Project) -> QuerySet[Rubric]:
    newest = RubricVersion.objects.filter(rubric=OuterRef("pk")).order_by("-number")
    return (
        Rubric.objects.filter(project=project)
        .annotate(
            latest_number=Subquery(newest.values("number")[:1]),
            run_count=Count("versions__runs", distinct=True),
        )
        .order_by("name")
    )


def rubric_versions(rubric: Rubric) -> QuerySet[RubricVersion]:
    return (
        rubric.versions.select_related("created_by")
        .prefetch_related(Prefetch("runs", queryset=Run.objects.order_by("-created_at")))
        .order_by("-number")
    )


@dataclass(frozen=True)
class ProjectCounts:
    runs: int
    active_runs: int
    environments: int
    rubrics: int


def project_counts(project: Project) -> ProjectCounts:
    runs = Run.objects.filter(project=project).aggregate(
        total=Count("pk"), active=Count("pk", filter=Q(status__in=ACTIVE_STATUSES))
    )
    return ProjectCounts(
        runs=runs["total"],
        active_runs=runs["active"],
        environments=Environment.objects.filter(project=project).count(),
        rubrics=Rubric.objects.filter(project=project).count(),
    )


def recent_runs(project: Project, limit: int = 10) -> list[Run]:
    return list(run_list(project=project)[:limit])


@dataclass(frozen=True)
class EnvironmentBest:
    environment_id: int
    name: str
    best_reward: float | None
    run_count: int
    rubric: str = ""  # "correct v2": best rewards are compared only among runs scored by one rubric version


def best_reward_per_environment(project: Project) -> list[EnvironmentBest]:
    """For each environment of the project and each rubric version its runs were scored by: the best
    reward (Run.BEST_REWARD_MEANING) any of those runs reached, best first (rows without a rewarded run
    last; an environment without runs has one row with no rubric). Runs scored by different rubrics are
    never compared: their rewards are on different scales."""
    rows = (
        Run.objects.filter(project=project, environment_version__isnull=False)
        .values_list(
            "environment_version__environment_id",
            "rubric_version__rubric__name",
            "rubric_version__number",
        )
        .annotate(best=Max("best_reward"), runs=Count("pk"))
        .order_by()
    )
    names = dict(Environment.objects.filter(project=project).values_list("pk", "name"))
    found = [
        EnvironmentBest(env, names.get(env, ""), best, runs, f"{rubric} v{number}" if rubric else "—")
        for env, rubric, number, best, runs in rows
    ]
    used = {row.environment_id for row in found}
    found += [EnvironmentBest(pk, name, None, 0) for pk, name in names.items() if pk not in used]
    return sorted(found, key=lambda e: (e.best_reward is None, -(e.best_reward or 0.0), e.name, e.rubric))


RUN_STATUS_CHOICES = RunStatus.choices


# --- rubric preview ---------------------------------------------------------------------------------

# Criterion kinds the dashboard never runs: they call code named by the user, which belongs on the
# workers. Plugin kinds (classes outside trainers/) are not imported here either: they may pull in
# torch. Kinds that need a model are skipped by the scorer itself: no model is attached here.
CUSTOM_CODE_CRITERIA = frozenset({"custom_python"})


def _runs_only_on_workers(kind: str) -> bool:
    spec = criterion_kinds().get(kind)
    return kind in CUSTOM_CODE_CRITERIA or spec is None or not spec.target.startswith("trainers.")


@dataclass(frozen=True)
class PreviewComponent:
    name: str
    kind: str
    scored: bool
    not_scored_because: str = ""  # e.g. "needs a model": scored on the workers only
    raw: float = 0.0
    weight: float = 0.0
    weighted: float = 0.0
    explanation: str = ""


@dataclass(frozen=True)
class RubricPreview:
    components: list[PreviewComponent]
    total: float
    aggregation: str

    @property
    def partial(self) -> bool:
        return any(not c.scored for c in self.components)


def rubric_preview(spec: dict, trajectory: Trajectory) -> RubricPreview:
    """Score one pasted trajectory with an unsaved, valid rubric spec, in the web process.

    Criteria that need a model or run user code are listed but not scored; the total is the sum
    of the scored components' weighted values.
    """
    kinds = criterion_kinds()
    criteria = spec.get("criteria", [])
    positions = [i for i, c in enumerate(criteria) if not _runs_only_on_workers(c["kind"])]
    scored: dict[int, ComponentScore] = {}
    if positions:
        score = score_trajectory(
            {**spec, "criteria": [criteria[i] for i in positions]}, trajectory, skip_unavailable=True
        )
        scored = dict(zip(positions, score.components, strict=True))
    components = []
    for i, criterion in enumerate(criteria):
        result = scored.get(i)
        spec_of_kind = kinds.get(criterion["kind"])
        on_workers = (
            result is None or result.skipped or (spec_of_kind is not None and spec_of_kind.needs_model)
        )
        if result is None or on_workers:
            if criterion["kind"] in CUSTOM_CODE_CRITERIA:
                why = "runs custom code"
            elif spec_of_kind is not None and spec_of_kind.needs_model:
                why = "needs a model"
            else:
                why = "not available in the dashboard"
            components.append(PreviewComponent(criterion["name"], criterion["kind"], False, why))
        else:
            components.append(
                PreviewComponent(
                    result.name,
                    result.kind,
                    True,
                    "",
                    result.raw,
                    result.weight,
                    result.weighted,
                    result.explanation,
                )
            )
    total = sum(c.weighted for c in components if c.scored)
    return RubricPreview(components, total, spec.get("aggregation", "weighted_sum"))


def startable_checkpoint(*, project, checkpoint_id: Any) -> Checkpoint | None:
    """A kept checkpoint of this project that a new run may start from; None for anything else."""
    if not checkpoint_id or not str(checkpoint_id).isdigit():
        return None
    return (
        Checkpoint.objects.filter(run__project=project, pk=int(checkpoint_id), deleted=False)
        .select_related("run")
        .first()
    )

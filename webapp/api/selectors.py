"""Reads the API needs for environments, rubrics and runs, shaped to avoid N+1 queries in lists.

Callers pass a project they obtained through `webapp.projects.access`; nothing here checks access.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import OuterRef, Prefetch, QuerySet, Subquery

from webapp.experiments.models import Environment, EnvironmentVersion, Rubric, RubricVersion, Run
from webapp.projects.models import Membership, Project
from webapp.projects.selectors import project_list_for_user
from webapp.review.models import PreferenceQueue, PreferenceSnapshot
from webapp.rollouts.models import Trajectory


def project_list_with_role(user) -> QuerySet[Project]:
    """The user's projects with their counts and the user's own role (as `my_role`)."""
    role = Membership.objects.filter(project=OuterRef("pk"), user=user).values("role")[:1]
    return project_list_for_user(user).annotate(my_role=Subquery(role))


def environment_list(*, project: Project) -> QuerySet[Environment]:
    """Environments with their versions prefetched newest first (`versions_desc`)."""
    return (
        Environment.objects.filter(project=project)
        .select_related("created_by")
        .prefetch_related(
            Prefetch(
                "versions",
                queryset=EnvironmentVersion.objects.select_related("created_by").order_by("-number"),
                to_attr="versions_desc",
            )
        )
        .order_by("name")
    )


def environment_versions(*, environment: Environment) -> QuerySet[EnvironmentVersion]:
    return environment.versions.select_related("created_by").order_by("-number")


def rubric_list(*, project: Project) -> QuerySet[Rubric]:
    """Rubrics with their versions prefetched newest first (`versions_desc`)."""
    return (
        Rubric.objects.filter(project=project)
        .select_related("created_by")
        .prefetch_related(
            Prefetch(
                "versions",
                queryset=RubricVersion.objects.select_related("created_by").order_by("-number"),
                to_attr="versions_desc",
            )
        )
        .order_by("name")
    )


def rubric_versions(*, rubric: Rubric) -> QuerySet[RubricVersion]:
    return rubric.versions.select_related("created_by").order_by("-number")


def run_list(*, project: Project, status: str | None = None) -> QuerySet[Run]:
    runs = Run.objects.filter(project=project)
    if status:
        runs = runs.filter(status=status)
    return runs.select_related(
        "project", "created_by", "environment_version__environment", "rubric_version__rubric"
    ).order_by("-created_at", "-id")


def run_queryset() -> QuerySet[Run]:
    """Runs with what the run serializer reads, for single-run lookups through the access helper."""
    return Run.objects.select_related(
        "project", "created_by", "environment_version__environment", "rubric_version__rubric"
    )


# --- review: single-object lookups through the access helper -------------------------------------------


def trajectory_queryset() -> QuerySet[Trajectory]:
    """Trajectories with the run and project the access helper and the review services read."""
    return Trajectory.objects.select_related("run__project")


def preference_queue_queryset() -> QuerySet[PreferenceQueue]:
    # Ordered so every database lists a queue's runs and annotators the same way.
    return PreferenceQueue.objects.select_related("project", "created_by").prefetch_related(
        Prefetch("runs", queryset=Run.objects.order_by("pk")),
        Prefetch("annotators", queryset=get_user_model().objects.order_by("username")),
    )


def preference_snapshot_queryset() -> QuerySet[PreferenceSnapshot]:
    return PreferenceSnapshot.objects.select_related("project", "queue")

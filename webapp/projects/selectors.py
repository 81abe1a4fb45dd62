from __future__ import annotations

from django.db.models import Count, Max, Q, QuerySet

from webapp.projects.models import Membership, Project


def project_list_for_user(user) -> QuerySet[Project]:
    return (
        Project.objects.filter(memberships__user=user)
        .annotate(
            run_count=Count("runs", distinct=True),
            active_run_count=Count("runs", filter=Q(runs__status__in=["QUEUED", "STARTING", "RUNNING"]), distinct=True),
            best_reward=Max("runs__best_reward"),
        )
        .order_by("name")
    )


def membership_list(project: Project) -> QuerySet[Membership]:
    return Membership.objects.filter(project=project).select_related("user").order_by("user__username")

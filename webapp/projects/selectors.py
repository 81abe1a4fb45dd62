from __future__ import annotations

from django.db.models import Count, Max, OuterRef, Q, QuerySet, Subquery

from webapp.projects.models import Invitation, Membership, Project, ProjectSecret


def project_list_for_user(user) -> QuerySet[Project]:
    return (
        Project.objects.filter(memberships__user=user)
        .annotate(
            run_count=Count("runs", distinct=True),
            active_run_count=Count(
                "runs", filter=Q(runs__status__in=["QUEUED", "STARTING", "RUNNING"]), distinct=True
            ),
            best_reward=Max("runs__best_reward"),
        )
        .order_by("name")
    )


def membership_list(project: Project) -> QuerySet[Membership]:
    return Membership.objects.filter(project=project).select_related("user").order_by("user__username")


def project_list_with_role(user) -> QuerySet[Project]:
    """The user's projects with their counts and the user's own role (as `my_role`)."""
    role = Membership.objects.filter(project=OuterRef("pk"), user=user).values("role")[:1]
    return project_list_for_user(user).annotate(my_role=Subquery(role))


def invitation_list(project: Project) -> QuerySet[Invitation]:
    """The project's invitations, newest first, with who made and who used each."""
    return Invitation.objects.filter(project=project).select_related("created_by", "used_by")


def secret_list(project: Project) -> QuerySet[ProjectSecret]:
    """The project's secrets by name, values left out (they are never read back)."""
    return ProjectSecret.objects.filter(project=project).select_related("created_by").defer("ciphertext")


def secret_names(project: Project) -> list[str]:
    return list(ProjectSecret.objects.filter(project=project).values_list("name", flat=True))

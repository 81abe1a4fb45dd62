"""The one place that decides who may see and do what.

Every view, API endpoint and websocket consumer resolves objects through these helpers:
- an outsider (not a member, or anonymous) gets NotFound — we do not reveal that a project exists;
- a member whose role lacks the capability gets Forbidden.
Capabilities: read (viewer+), annotate (annotator+), launch (researcher+), manage (owner).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import Http404

from webapp.projects.models import ROLE_CAPABILITIES, Membership, Project

M = TypeVar("M", bound=Model)


class NotFound(Http404):
    pass


class Forbidden(PermissionDenied):
    pass


@dataclass(frozen=True)
class ProjectAccess:
    project: Project
    membership: Membership

    @property
    def role(self) -> str:
        return self.membership.role

    def can(self, capability: str) -> bool:
        return self.membership.can(capability)


def _membership(user, project: Project) -> Membership:
    if user is None or not user.is_authenticated:
        raise NotFound("No such project.")
    membership = Membership.objects.filter(project=project, user=user).first()
    if membership is None:
        raise NotFound("No such project.")
    return membership


CAPABILITIES: frozenset[str] = frozenset().union(*ROLE_CAPABILITIES.values())


def _require(membership: Membership, capability: str) -> None:
    if capability not in CAPABILITIES:
        raise ValueError(f"unknown capability {capability!r}")
    if not membership.can(capability):
        raise Forbidden(f"Your role ({membership.role}) does not allow this ({capability}).")


def access_project(user, slug: str, need: str = "read") -> ProjectAccess:
    project = Project.objects.filter(slug=slug).first()
    if project is None:
        raise NotFound("No such project.")
    membership = _membership(user, project)
    _require(membership, need)
    return ProjectAccess(project, membership)


def access_project_by_id(user, project_id: int, need: str = "read") -> ProjectAccess:
    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        raise NotFound("No such project.")
    membership = _membership(user, project)
    _require(membership, need)
    return ProjectAccess(project, membership)


def access_object(user, queryset: QuerySet[M], need: str = "read", **lookup) -> M:
    """Fetch one project-owned object (it has a `project` relation, or `project_path` below) and check
    the user's role in its project."""
    obj = queryset.filter(**lookup).first()
    if obj is None:
        raise NotFound("No such object.")
    membership = _membership(user, project_of(obj))
    _require(membership, need)
    return obj


def project_of(obj: Model) -> Project:
    """The project an object belongs to, following the obvious relations."""
    for path in ("project", "run.project", "trajectory.run.project", "environment.project", "rubric.project"):
        target = obj
        try:
            for attr in path.split("."):
                target = getattr(target, attr)
        except AttributeError:
            continue
        if isinstance(target, Project):
            return target
    raise TypeError(f"{type(obj).__name__} has no project")


def capabilities(membership: Membership) -> frozenset[str]:
    return ROLE_CAPABILITIES[membership.role]

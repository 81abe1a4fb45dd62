from __future__ import annotations

from enum import StrEnum

from django.conf import settings
from django.db import models


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    RESEARCHER = "researcher", "Researcher"
    ANNOTATOR = "annotator", "Annotator"
    VIEWER = "viewer", "Viewer"


class Capability(StrEnum):
    READ = "read"  # see everything in the project
    ANNOTATE = "annotate"  # comment, tag, judge preference pairs
    LAUNCH = "launch"  # define environments and rubrics, launch and stop runs, train reward models
    MANAGE = "manage"  # members and the project itself


# What each role may do; every check in the app goes through webapp.projects.access.
ROLE_CAPABILITIES: dict[str, frozenset[Capability]] = {
    Role.VIEWER: frozenset({Capability.READ}),
    Role.ANNOTATOR: frozenset({Capability.READ, Capability.ANNOTATE}),
    Role.RESEARCHER: frozenset({Capability.READ, Capability.ANNOTATE, Capability.LAUNCH}),
    Role.OWNER: frozenset(Capability),
}


class Project(models.Model):
    """A team workspace: every other object belongs to exactly one project."""

    name = models.CharField(max_length=120)
    slug = models.SlugField(max_length=80, unique=True)
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="projects")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="one_membership_per_user")]
        ordering = ["project", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} as {self.role}"

    def capabilities(self) -> frozenset[Capability]:
        return ROLE_CAPABILITIES[self.role]

    def can(self, capability: Capability | str) -> bool:
        """Raises ValueError for a capability that does not exist (a typo must not read as "no")."""
        return Capability(capability) in ROLE_CAPABILITIES[self.role]

from __future__ import annotations

from django.conf import settings
from django.db import models


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    RESEARCHER = "researcher", "Researcher"
    ANNOTATOR = "annotator", "Annotator"
    VIEWER = "viewer", "Viewer"


# What each role may do; every check in the app goes through webapp.projects.access.
ROLE_CAPABILITIES: dict[str, frozenset[str]] = {
    Role.VIEWER: frozenset({"read"}),
    Role.ANNOTATOR: frozenset({"read", "annotate"}),
    Role.RESEARCHER: frozenset({"read", "annotate", "launch"}),
    Role.OWNER: frozenset({"read", "annotate", "launch", "manage"}),
}


class Project(models.Model):
    """A team workspace: every other object belongs to exactly one project."""

    name = models.CharField(max_length=120)
    slug = models.SlugField(max_length=80, unique=True)
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
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

    def can(self, capability: str) -> bool:
        return capability in ROLE_CAPABILITIES[self.role]

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
    ADJUDICATE = "adjudicate"  # settle the pairs a queue's annotators disagree on (what datasets export)
    MANAGE = "manage"  # members and the project itself


# The refused action, in words, for a 403 that names no more precise one (access.py's `action=`).
CAPABILITY_ACTIONS: dict[Capability, str] = {
    Capability.READ: "read this project",
    Capability.ANNOTATE: "comment, tag or judge in this project",
    Capability.LAUNCH: "launch runs or change environments, rubrics, queues and datasets",
    Capability.ADJUDICATE: "settle the disagreements of a preference queue",
    Capability.MANAGE: "manage the project and its members",
}

# What each role may do; every check in the app goes through webapp.projects.access.
ROLE_CAPABILITIES: dict[str, frozenset[Capability]] = {
    Role.VIEWER: frozenset({Capability.READ}),
    Role.ANNOTATOR: frozenset({Capability.READ, Capability.ANNOTATE}),
    Role.RESEARCHER: frozenset(
        {Capability.READ, Capability.ANNOTATE, Capability.LAUNCH, Capability.ADJUDICATE}
    ),
    Role.OWNER: frozenset(Capability),
}


class UntrustedJudge(models.TextChoices):
    """What the run form does with a rubric whose judge failed its check (webapp/review/judge_check.py)."""

    WARN = "warn", "Warn (the run can still be launched)"
    REFUSE = "refuse", "Refuse the launch"


class VisibleProjectManager(models.Manager["Project"]):
    """Projects nobody asked to delete (the default manager, so every page and API reads these only); a
    deleted project's rows are purged in the background (webapp/experiments/services/deletion.py)."""

    def get_queryset(self) -> models.QuerySet[Project]:
        return super().get_queryset().filter(deleting_at__isnull=True)


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
    untrusted_judge = models.CharField(
        max_length=8,
        choices=UntrustedJudge.choices,
        default=UntrustedJudge.WARN,
        help_text="a launch whose LLM judge cannot tell right from wrong (its judge check): warn or refuse",
    )
    # When its owner deleted it: hidden from then on, its slug freed, its rows purged in short batches.
    deleting_at = models.DateTimeField(null=True, blank=True)

    objects = VisibleProjectManager()
    all_objects = models.Manager()  # noqa: DJ012 — deleted projects too (only the purge reads these)

    class Meta:
        base_manager_name = "all_objects"
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


INVITATION_DAYS = 7  # how long an invitation link works unless the owner says otherwise


class InvitationState(models.TextChoices):
    PENDING = "pending", "Pending"
    USED = "used", "Used"
    REVOKED = "revoked", "Revoked"
    EXPIRED = "expired", "Expired"


class Invitation(models.Model):
    """A one-time link that makes whoever opens it a member with `role`: someone without an account signs
    up through it (sign-up is open only that way), someone with one joins. The raw token is shown once to
    the owner who made it; only its SHA-256 digest is stored."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="invitations")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.ANNOTATOR)
    note = models.CharField(max_length=120, blank=True, help_text="who it is for, e.g. “Dana, annotator”")
    token_hash = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    used_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"invitation to {self.project} as {self.role}"

    def state(self, now=None) -> InvitationState:
        """The one rule for whether the link still works."""
        from django.utils import timezone

        if self.used_at is not None:
            return InvitationState.USED
        if self.revoked_at is not None:
            return InvitationState.REVOKED
        if self.expires_at <= (now or timezone.now()):
            return InvitationState.EXPIRED
        return InvitationState.PENDING

    def is_usable(self) -> bool:
        return self.state() == InvitationState.PENDING

    def can_revoke(self) -> bool:
        return self.state() == InvitationState.PENDING


class ProjectSecret(models.Model):
    """A value a project's runs need but nobody should read back: an LLM judge endpoint's API key. Stored
    encrypted (`webapp.core.crypto`, a key derived from the server's secret key); rubrics and runs name it,
    only the worker that runs a judge decrypts it, and no page or API ever returns the value."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(max_length=64)
    ciphertext = models.TextField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="unique_secret_name")]

    def __str__(self) -> str:
        return f"secret {self.name} of {self.project}"

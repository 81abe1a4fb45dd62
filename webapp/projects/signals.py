"""What the projects' services announce to the sub-apps above them (as webapp.experiments.signals does):
review's activity log records members joining and invitations, projects never imports review. Each is
sent inside the service's transaction, so a write that rolls back leaves no log line either."""

from __future__ import annotations

from django.dispatch import Signal

# Keyword arguments: membership (the new member's), added_by (whoever added them by name, or None when
# they joined through an invitation), invitation (the link used, or None).
member_joined = Signal()
# Keyword arguments: invitation, user (who made or revoked the link).
invitation_created = Signal()
invitation_revoked = Signal()

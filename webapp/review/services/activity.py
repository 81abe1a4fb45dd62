"""The project's activity log: every review write records who did what."""

from __future__ import annotations

from typing import Any

from webapp.projects.models import Project
from webapp.review.models import (
    Activity,
)


def log_activity(project: Project, actor, verb: str, *, trajectory=None, queue=None, **data: Any) -> Activity:
    return Activity.objects.create(
        project=project, actor=actor, verb=verb, trajectory=trajectory, queue=queue, data=data
    )

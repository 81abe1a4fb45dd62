"""A running run's heartbeat (the reaper marks a run without one LOST: webapp.fleet.services)."""

from __future__ import annotations

from django.utils import timezone

from webapp.experiments.models import (
    Run,
)


def run_heartbeat(run_id: int) -> None:
    Run.objects.filter(pk=run_id).update(heartbeat_at=timezone.now())

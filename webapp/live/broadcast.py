"""Push compact run summaries to the channel-layer group `run.<id>` — only after the commit, so a
browser never sees a change that was rolled back."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


def run_group(run_id: int) -> str:
    return f"run.{run_id}"


def project_group(project_id: int) -> str:
    return f"project.{project_id}"


def broadcast_run(run_id: int, project_id: int | None, summary: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": "run.event", "run": run_id, "event": summary}
    try:
        async_to_sync(layer.group_send)(run_group(run_id), message)
        if project_id is not None:
            async_to_sync(layer.group_send)(project_group(project_id), message)
    except Exception:  # a dead broker must not fail the write that already committed
        log.exception("could not broadcast an event of run %s", run_id)


def broadcast_run_on_commit(run, summary: dict[str, Any]) -> None:
    run_id, project_id = run.pk, run.project_id
    transaction.on_commit(lambda: broadcast_run(run_id, project_id, summary))


def broadcast_run_events_on_commit(run, summaries: list[dict[str, Any]]) -> None:
    """One group message per ingested batch: fewer channel-layer round trips under load."""
    if not summaries:
        return
    run_id = run.pk

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(run_group(run_id), {"type": "run.events", "run": run_id, "events": summaries})
        except Exception:
            log.exception("could not broadcast events of run %s", run_id)

    transaction.on_commit(send)

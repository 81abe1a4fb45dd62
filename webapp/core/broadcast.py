"""Push compact run events to the channel-layer group `run.<id>` — only after the commit, so a browser
never sees a change that was rolled back.

One path for everything a run page learns live: `broadcast_on_commit(run, events)`. Ingested events carry
their sequence number (a reconnecting page replays them from `RunEvent`); changes the dashboard makes
itself (a run queued, cancelled, claimed, marked LOST) carry none and reach a reconnecting page through
the snapshot instead.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


def run_group(run_id: int) -> str:
    return f"run.{run_id}"


def broadcast_on_commit(run: Any, events: list[dict[str, Any]]) -> None:
    """Send `events` of `run` to its subscribers once the current transaction commits (at once outside
    one). One group message per call: fewer channel-layer round trips under load."""
    if not events:
        return
    run_id = run.pk

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(
                run_group(run_id), {"type": "run.events", "run": run_id, "events": events}
            )
        except Exception:  # a dead broker must not fail the write that already committed
            log.exception("could not broadcast events of run %s", run_id)

    transaction.on_commit(send)

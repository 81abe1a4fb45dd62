"""Push compact events to channel-layer groups — only after the commit, so a browser never sees a change
that was rolled back.

One path for everything a page learns live, `send_on_commit(groups, kind, events)`, with one wire format:
a group message `{"type": kind, "events": [...]}` whose events are JSON objects with a `type`.
- A run page: `broadcast_on_commit(run, events)` to the group `run.<id>`. Ingested events carry their
  sequence number (a reconnecting page replays them from `RunEvent`); changes the dashboard makes itself
  (a run queued, cancelled, claimed, marked LOST) carry none and reach a reconnecting page through the
  snapshot instead.
- Reviewing together: the events of webapp/review/live.py to `user.<id>` (a member's notifications and
  unread count, on every page they have open) and `trajectory.<id>` (its discussion changed).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

RUN_EVENTS = "run.events"
REVIEW_EVENTS = "review.events"


def run_group(run_id: int) -> str:
    return f"run.{run_id}"


def user_group(user_id: int) -> str:
    return f"user.{user_id}"


def trajectory_group(trajectory_id: int) -> str:
    return f"trajectory.{trajectory_id}"


def send_on_commit(groups: Iterable[str], kind: str, events: list[dict[str, Any]], **extra: Any) -> None:
    """Send `events` to each of `groups` once the current transaction commits (at once outside one).
    One group message per group and call: fewer channel-layer round trips under load."""
    groups = list(dict.fromkeys(groups))
    if not events or not groups:
        return
    message = {"type": kind, **extra, "events": events}

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        for group in groups:
            try:
                async_to_sync(layer.group_send)(group, message)
            except Exception:  # a dead broker must not fail the write that already committed
                log.exception("could not broadcast %s to %s", kind, group)

    transaction.on_commit(send)


def broadcast_on_commit(run: Any, events: list[dict[str, Any]]) -> None:
    """Send `events` of `run` to the pages following it, after the commit."""
    send_on_commit([run_group(run.pk)], RUN_EVENTS, events, run=run.pk)

"""ws/runs/<id>/ — one run's live stream. The protocol is documented in docs/live.md. And ws/review/ —
what reviewing together sends a member's pages (ReviewConsumer, below; docs/review.md).

Thin on purpose: access goes through webapp.projects.access, ORM work runs in database_sync_to_async
helpers, and the hot path (a group message → frames to the browser) does a comparison and a send per
event, nothing else.

Ordering without gaps: the consumer joins the run's group *before* it reads the snapshot and the stored
events. Channels handles one message at a time per consumer, so live messages that arrive meanwhile wait
until the replay has been sent; then every event whose seq the connection already sent is dropped. An
event committed before the read is in the replay; one committed after it is broadcast after its commit,
when the consumer is already in the group.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from webapp.core.broadcast import REVIEW_EVENTS, run_group, trajectory_group, user_group
from webapp.experiments.models import Run
from webapp.live import selectors
from webapp.projects.access import Forbidden, NotFound, access_run, access_trajectory

# Close codes (sent after accepting, so browsers see them; a refused handshake reaches a browser as 1006).
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404


def _load_run(user, run_id: int) -> Run:
    return access_run(user, run_id)


def _snapshot_and_replay(run_id: int, after_seq: int) -> tuple[dict[str, Any], list[dict[str, Any]], bool]:
    run = Run.objects.get(pk=run_id)
    events, truncated = selectors.events_after(run_id, after_seq)
    return selectors.run_snapshot(run), events, truncated


def query_int(scope: dict[str, Any], name: str) -> int | None:
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get(name)
    if not values:
        return None
    try:
        return max(0, int(values[-1]))
    except ValueError:
        return None


class RunConsumer(AsyncJsonWebsocketConsumer):
    run_id: int
    group: str | None = None
    sent_seq: int = 0  # highest event seq this connection has sent

    async def connect(self) -> None:
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        # Accept first, then close with an application code: a browser cannot read the reason of a
        # refused handshake, and the page needs it to stop reconnecting.
        await self.accept()
        if not await self._may_read():
            return
        self.group = run_group(self.run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self._send_snapshot_and_replay(query_int(self.scope, "last_seq") or 0)

    async def _may_read(self) -> bool:
        """Check access through the helper; on refusal, close with the matching code."""
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return False
        try:
            await database_sync_to_async(_load_run)(user, self.run_id)
        except NotFound:
            await self.close(code=CLOSE_NOT_FOUND)
            return False
        except Forbidden:
            await self.close(code=CLOSE_FORBIDDEN)
            return False
        return True

    async def disconnect(self, code: int) -> None:
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """A frame that is not a JSON text gets an error frame; the socket stays open (AsyncJsonWebsocket-
        Consumer would raise, and the server would close it with 1011)."""
        if text_data is None:
            await self.send_json({"type": "error", "detail": "frames are JSON text, not binary"})
            return
        try:
            content = await self.decode_json(text_data)
        except (ValueError, RecursionError):
            await self.send_json(
                {"type": "error", "detail": "not JSON; send {'type': 'resume', 'last_seq': N}"}
            )
            return
        await self.receive_json(content, **kwargs)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if self.group is None:
            return
        if isinstance(content, dict) and content.get("type") == "resume":
            last_seq = content.get("last_seq", 0)
            if isinstance(last_seq, bool) or not isinstance(last_seq, int) or last_seq < 0:
                await self.send_json({"type": "error", "detail": "last_seq must be a non-negative integer"})
                return
            # Access is checked again: a member removed from the project stops here.
            if await self._may_read():
                await self._send_snapshot_and_replay(last_seq)
        elif isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong", "last_seq": self.sent_seq})
        else:
            await self.send_json(
                {"type": "error", "detail": "unknown message; send {'type': 'resume', 'last_seq': N}"}
            )

    async def _send_snapshot_and_replay(self, after_seq: int) -> None:
        # Never resend what this connection already sent.
        after_seq = max(after_seq, self.sent_seq)
        snapshot, events, truncated = await database_sync_to_async(_snapshot_and_replay)(
            self.run_id, after_seq
        )
        await self.send_json(
            {
                "type": "snapshot",
                "run": snapshot,
                "replay": {"after_seq": after_seq, "count": len(events), "truncated": truncated},
            }
        )
        for event in events:
            await self._send_event(event)

    async def _send_event(self, event: dict[str, Any]) -> None:
        seq = event.get("seq")
        if seq is not None:
            if seq <= self.sent_seq:
                return
            self.sent_seq = seq
        await self.send_json({"type": "event", "event": event})

    # --- channel-layer handlers (group `run.<id>`, see webapp/core/broadcast.py) ---------------------

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels closes stale database connections before every handler, through a thread-pool hop
        # (`aclose_old_connections`). Forwarding a broadcast touches no database, and with 50 pages on a run
        # that hop per page per batch was the largest cost of the fan-out (bench/live_latency.py): skip it.
        if message.get("type") == "run.events":
            await self.run_events(message)
        else:
            await super().dispatch(message)

    async def run_events(self, message: dict[str, Any]) -> None:
        for event in message["events"]:
            await self._send_event(event)


# --- ws/review/ ------------------------------------------------------------------------------------------
# What reviewing together sends live to a signed-in member's pages (docs/review.md, "Live"). Every page joins
# the member's group `user.<id>` (notifications, the unread badge); a trajectory page adds ?trajectory=<id>
# and also joins `trajectory.<id>` (its discussion changed), once access_trajectory allows it. Then the server
# sends {"type": "ready"}: an event committed after that reaches the page. The events
# (webapp/review/live.py) are forwarded as they come; nothing touches the database after the join.


def _check_trajectory(user, trajectory_id: int) -> None:
    access_trajectory(user, trajectory_id)


class ReviewConsumer(AsyncJsonWebsocketConsumer):
    groups_joined: list[str]

    async def connect(self) -> None:
        self.groups_joined = []
        await self.accept()  # then close with an application code, which a browser can read
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        wanted = [user_group(user.pk)]
        trajectory_id = query_int(self.scope, "trajectory")
        if trajectory_id is not None:
            try:
                await database_sync_to_async(_check_trajectory)(user, trajectory_id)
            except NotFound:
                await self.close(code=CLOSE_NOT_FOUND)
                return
            except Forbidden:
                await self.close(code=CLOSE_FORBIDDEN)
                return
            wanted.append(trajectory_group(trajectory_id))
        for group in wanted:
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.append(group)
        await self.send_json({"type": "ready"})

    async def disconnect(self, code: int) -> None:
        for group in self.groups_joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def dispatch(self, message: dict[str, Any]) -> None:
        # As RunConsumer: forwarding touches no database, so skip Channels' per-message connection hop.
        if message.get("type") == REVIEW_EVENTS:
            await self.review_events(message)
        else:
            await super().dispatch(message)

    async def review_events(self, message: dict[str, Any]) -> None:
        for event in message["events"]:
            await self.send_json({"type": "event", "event": event})

"""What reviewing together sends live, in the wire format of webapp/core/broadcast.py (group message
`review.events`, forwarded as is by ReviewConsumer in webapp/live/consumers.py; the page's client is
static/js/review_live.js; docs/review.md lists the events):

- `{"type": "notifications", "unread": N, "new": {...} | null}` to `user.<id>`: the member's unread count
  changed (a mention or a reply arrived, or they read some); `new` says who did what, for the page's note.
- `{"type": "discussion", "trajectory": T, "comment": C, "thread": R, "turn_index": I | null, "change": …}`
  to `trajectory.<id>`: a comment was added, replied to, edited, deleted, resolved or reopened. The page
  fetches the server-rendered discussion again (nothing is built from the event's text).

Both are sent after the commit, by the services that made the change.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.urls import reverse

from webapp.core.broadcast import REVIEW_EVENTS, send_on_commit, trajectory_group, user_group
from webapp.review.models import Comment, Notification


def _unread(user_id: int) -> int:
    return Notification.objects.filter(recipient_id=user_id, read_at__isnull=True).count()


def notification_summary(notification: Notification) -> dict[str, Any]:
    return {
        "id": notification.pk,
        "reason": notification.reason,
        "text": f"{notification.actor.username if notification.actor else 'someone'} "
        f"{notification.get_reason_display()} on trajectory {notification.trajectory_id}",
        "url": reverse("notifications:open", args=[notification.pk]),
    }


def send_notifications(created: Iterable[Notification]) -> None:
    """Each recipient of a new notification learns it, with their new unread count."""
    for notification in created:
        event = {
            "type": "notifications",
            "unread": _unread(notification.recipient_id),
            "new": notification_summary(notification),
        }
        send_on_commit([user_group(notification.recipient_id)], REVIEW_EVENTS, [event])


def send_unread(user_ids: Iterable[int]) -> None:
    """The unread count of each of `user_ids` changed without anything new (read, or a comment deleted)."""
    for user_id in dict.fromkeys(user_ids):
        event = {"type": "notifications", "unread": _unread(user_id), "new": None}
        send_on_commit([user_group(user_id)], REVIEW_EVENTS, [event])


def send_discussion_changed(comment: Comment, change: str) -> None:
    event = {
        "type": "discussion",
        "trajectory": comment.trajectory_id,
        "comment": comment.pk,
        "thread": comment.parent_id or comment.pk,
        "turn_index": comment.turn_index,
        "change": change,
    }
    send_on_commit([trajectory_group(comment.trajectory_id)], REVIEW_EVENTS, [event])

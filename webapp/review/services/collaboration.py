"""Writes for reviewing together: comments, replies and @mentions, threads resolved, tags, flags,
notifications. Each change that a teammate's open page shows is sent live after the commit
(webapp/review/live.py)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from webapp.projects.access import Capability, can
from webapp.projects.models import Membership
from webapp.review import live
from webapp.review.models import (
    ActivityVerb,
    Comment,
    Flag,
    FlagReason,
    Notification,
    NotificationReason,
    Tag,
    TrajectoryTag,
    normalized_tag_name,
)
from webapp.review.services.activity import log_activity
from webapp.rollouts.models import Trajectory

MAX_COMMENT = 10_000
MAX_TAG = 50
# Django usernames: letters, digits and @ . + - _ ; a mention ends before trailing punctuation.
MENTION = re.compile(r"(?<![\w@.+-])@([\w.@+-]+)")


# --- comments and mentions --------------------------------------------------------------------------


def mentioned_usernames(body: str) -> list[str]:
    """`@name` tokens in order of appearance, without trailing sentence punctuation, each once."""
    names = [match.rstrip(".-+@") for match in MENTION.findall(body)]
    return list(dict.fromkeys(name for name in names if name))


def _notify(comment: Comment, actor, *, replied_to: Comment | None = None) -> list[Notification]:
    """Notify the members `comment` mentions, and the author of the comment it replies to (once each: a
    mention in a reply is the mention). Never the actor themselves; never twice for one comment."""
    names = {name.lower() for name in mentioned_usernames(comment.body)}
    members = Membership.objects.filter(project=comment.project).exclude(user=actor).select_related("user")
    reasons = {m.user: NotificationReason.MENTION for m in members if m.user.username.lower() in names}
    reply_to_author = replied_to.author if replied_to is not None and not replied_to.is_deleted else None
    if reply_to_author is not None and reply_to_author != actor and reply_to_author not in reasons:
        if any(m.user_id == reply_to_author.pk for m in members):
            reasons[reply_to_author] = NotificationReason.REPLY
    created = []
    for recipient, reason in reasons.items():
        notification, made = Notification.objects.get_or_create(
            recipient=recipient,
            comment=comment,
            defaults={
                "project": comment.project,
                "actor": actor,
                "trajectory": comment.trajectory,
                "reason": reason,
            },
        )
        if made:
            created.append(notification)
    live.send_notifications(created)
    return created


def _clean_body(body: str) -> str:
    body = (body or "").strip()
    if not body:
        raise ValidationError({"body": ["Write something first."]})
    if len(body) > MAX_COMMENT:
        raise ValidationError({"body": [f"At most {MAX_COMMENT} characters."]})
    return body


@transaction.atomic
def comment_create(
    *,
    trajectory: Trajectory,
    author,
    body: str,
    turn_index: int | None = None,
    reply_to: Comment | None = None,
) -> Comment:
    """A new thread on the trajectory (or on its turn `turn_index`), or, with `reply_to`, a reply in that
    comment's thread: it joins the thread's turn, reopens nothing, and notifies the author replied to."""
    body = _clean_body(body)
    parent = None
    if reply_to is not None:
        if reply_to.trajectory_id != trajectory.pk:
            raise ValidationError({"reply_to": ["That comment is on another trajectory."]})
        parent = reply_to.thread_root
        turn_index = parent.turn_index
    elif turn_index is not None and not trajectory.turns.filter(index=turn_index).exists():
        raise ValidationError({"turn_index": [f"This trajectory has no turn {turn_index}."]})
    project = trajectory.run.project
    comment = Comment.objects.create(
        project=project,
        trajectory=trajectory,
        turn_index=turn_index,
        parent=parent,
        author=author,
        body=body,
    )
    _notify(comment, author, replied_to=reply_to)
    log_activity(
        project,
        author,
        ActivityVerb.COMMENT_REPLIED if parent else ActivityVerb.COMMENT_ADDED,
        trajectory=trajectory,
        comment=comment.pk,
        turn_index=turn_index,
    )
    live.send_discussion_changed(comment, "replied" if parent else "added")
    return comment


@transaction.atomic
def comment_thread_resolve(*, comment: Comment, user, resolved: bool = True) -> Comment:
    """Mark `comment`'s thread resolved (or open again). Who may: Comment.may_be_resolved_by. A
    conditional update, so resolving twice records it once."""
    root = comment.thread_root
    if not root.may_be_resolved_by(user, can_launch=can(user, root.project, Capability.LAUNCH)):
        raise ValidationError("Only whoever started the thread, a researcher or an owner can resolve it.")
    threads = Comment.objects.filter(pk=root.pk)
    if resolved:
        changed = threads.filter(resolved_at__isnull=True).update(
            resolved_at=timezone.now(), resolved_by=user
        )
    else:
        changed = threads.filter(resolved_at__isnull=False).update(resolved_at=None, resolved_by=None)
    if changed:
        log_activity(
            root.project,
            user,
            ActivityVerb.THREAD_RESOLVED if resolved else ActivityVerb.THREAD_REOPENED,
            trajectory=root.trajectory,
            comment=root.pk,
            turn_index=root.turn_index,
        )
        live.send_discussion_changed(root, "resolved" if resolved else "reopened")
    root.refresh_from_db()
    return root


@transaction.atomic
def comment_edit(*, comment: Comment, user, body: str) -> Comment:
    """Only the author edits; the previous text is kept in the activity log. New mentions notify."""
    if comment.author_id != user.pk:
        raise ValidationError("Only the author can edit a comment.")
    if comment.is_deleted:
        raise ValidationError("This comment was deleted.")
    body = _clean_body(body)
    if body == comment.body:
        return comment
    previous = comment.body
    comment.body, comment.edited_at = body, timezone.now()
    comment.save(update_fields=["body", "edited_at"])
    _notify(comment, user)
    log_activity(
        comment.project,
        user,
        ActivityVerb.COMMENT_EDITED,
        trajectory=comment.trajectory,
        comment=comment.pk,
        previous=previous,
    )
    live.send_discussion_changed(comment, "edited")
    return comment


@transaction.atomic
def comment_delete(*, comment: Comment, user) -> Comment:
    """The author, or a project owner (moderation), deletes a comment: its text is gone, the row and the
    fact that it was deleted (by whom) stay."""
    if comment.author_id != user.pk and not can(user, comment.project, Capability.MANAGE):
        raise ValidationError("Only the author or a project owner can delete a comment.")
    if comment.is_deleted:
        return comment
    comment.body, comment.deleted_at = "", timezone.now()
    comment.save(update_fields=["body", "deleted_at"])
    notified = list(Notification.objects.filter(comment=comment).values_list("recipient_id", flat=True))
    Notification.objects.filter(comment=comment).delete()
    log_activity(
        comment.project, user, ActivityVerb.COMMENT_DELETED, trajectory=comment.trajectory, comment=comment.pk
    )
    live.send_unread(notified)
    live.send_discussion_changed(comment, "deleted")
    return comment


# --- tags and flags ----------------------------------------------------------------------------------


def _clean_tag_name(name: str) -> str:
    name = normalized_tag_name(name)
    if not name:
        raise ValidationError({"name": ["A tag needs a name."]})
    if len(name) > MAX_TAG:
        raise ValidationError({"name": [f"At most {MAX_TAG} characters."]})
    return name


@transaction.atomic
def tag_add(*, trajectory: Trajectory, user, name: str) -> TrajectoryTag:
    """Tag a trajectory, creating the project's tag of that name (case-insensitive) on first use."""
    name = _clean_tag_name(name)
    project = trajectory.run.project
    tag = Tag.objects.filter(project=project, name__iexact=name).first()
    if tag is None:
        try:
            with transaction.atomic():
                tag = Tag.objects.create(project=project, name=name)
        except IntegrityError:  # created by someone else a moment ago
            tag = Tag.objects.get(project=project, name=name)
    link, created = TrajectoryTag.objects.get_or_create(
        trajectory=trajectory, tag=tag, defaults={"added_by": user}
    )
    if created:
        log_activity(project, user, ActivityVerb.TAG_ADDED, trajectory=trajectory, tag=tag.name)
    return link


@transaction.atomic
def tag_remove(*, trajectory: Trajectory, user, tag: Tag) -> bool:
    deleted, _ = TrajectoryTag.objects.filter(trajectory=trajectory, tag=tag).delete()
    if deleted:
        log_activity(
            trajectory.run.project, user, ActivityVerb.TAG_REMOVED, trajectory=trajectory, tag=tag.name
        )
    return bool(deleted)


@transaction.atomic
def flag_raise(*, trajectory: Trajectory, user, reason: str, note: str = "") -> Flag:
    if reason not in FlagReason.values:
        raise ValidationError({"reason": [f"Choose one of: {', '.join(FlagReason.values)}."]})
    note = (note or "").strip()
    if len(note) > MAX_COMMENT:
        raise ValidationError({"note": [f"At most {MAX_COMMENT} characters."]})
    project = trajectory.run.project
    flag = Flag.objects.create(
        project=project, trajectory=trajectory, reason=reason, note=note, raised_by=user
    )
    log_activity(project, user, ActivityVerb.FLAG_RAISED, trajectory=trajectory, flag=flag.pk, reason=reason)
    return flag


@transaction.atomic
def flag_resolve(*, flag: Flag, user) -> Flag:
    """Resolve an open flag (conditional update: resolving twice records it once)."""
    now = timezone.now()
    if Flag.objects.filter(pk=flag.pk, resolved_at__isnull=True).update(resolved_at=now, resolved_by=user):
        log_activity(
            flag.project,
            user,
            ActivityVerb.FLAG_RESOLVED,
            trajectory=flag.trajectory,
            flag=flag.pk,
            reason=flag.reason,
        )
    flag.refresh_from_db()
    return flag


def notifications_mark_read(*, user, ids: Iterable[int] | None = None) -> int:
    """Mark the user's notifications read (all, or `ids`); their other open pages' badges follow."""
    unread = Notification.objects.filter(recipient=user, read_at__isnull=True)
    if ids is not None:
        unread = unread.filter(pk__in=list(ids))
    marked = unread.update(read_at=timezone.now())
    if marked:
        live.send_unread([user.pk])
    return marked

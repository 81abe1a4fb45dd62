"""Comments with @mentions, tags, flags and the activity log, through the services."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from tests.webapp.review_factories import make_trajectory
from webapp.review import selectors, services
from webapp.review.models import Activity, Notification, Tag


def review_activity():
    """The review's own activities (the fixtures' launches and new versions are recorded too)."""
    return Activity.objects.exclude(verb__regex=r"^(run|environment|rubric|reward_model)\.")


@pytest.fixture
def trajectory(run):
    return make_trajectory(run, reward=1.0)


def verbs(project):
    return list(review_activity().filter(project=project).order_by("id").values_list("verb", flat=True))


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ("@bob look", ["bob"]),
        ("ask @carol, then @dave.", ["carol", "dave"]),
        ("mail alice@example.com", []),
        ("@bob @bob twice", ["bob"]),
        ("(@carol)", ["carol"]),
    ],
)
def test_mentions_are_parsed(body, names):
    assert services.mentioned_usernames(body) == names


def test_a_mention_of_a_member_notifies_them_once(trajectory, users, project):
    comment = services.comment_create(
        trajectory=trajectory, author=users["carol"], body="@bob @eve @carol reward looks off"
    )
    # bob is a member; eve is an outsider; carol wrote it.
    assert [n.recipient.username for n in Notification.objects.all()] == ["bob"]
    assert selectors.unread_notification_count(users["bob"]) == 1
    services.comment_edit(
        comment=comment, user=users["carol"], body="@bob @dave reward looks off, see turn 2"
    )
    assert sorted(Notification.objects.values_list("recipient__username", flat=True)) == ["bob", "dave"]
    assert services.notifications_mark_read(user=users["bob"]) == 1
    assert selectors.unread_notification_count(users["bob"]) == 0


def test_comments_on_a_turn_and_their_history(trajectory, users, project):
    comment = services.comment_create(trajectory=trajectory, author=users["carol"], body="odd", turn_index=2)
    with pytest.raises(ValidationError):
        services.comment_create(trajectory=trajectory, author=users["carol"], body="x", turn_index=99)
    with pytest.raises(ValidationError):
        services.comment_create(trajectory=trajectory, author=users["carol"], body="   ")
    with pytest.raises(ValidationError, match="Only the author"):
        services.comment_edit(comment=comment, user=users["bob"], body="mine now")
    services.comment_edit(comment=comment, user=users["carol"], body="odd answer")
    edited = review_activity().get(verb="comment.edited")
    assert edited.data["previous"] == "odd" and edited.actor == users["carol"]
    with pytest.raises(ValidationError, match="author or a project owner"):
        services.comment_delete(comment=comment, user=users["bob"])
    services.comment_delete(comment=comment, user=users["alice"])  # the owner moderates
    comment.refresh_from_db()
    assert comment.is_deleted and comment.body == ""
    assert verbs(project) == ["comment.added", "comment.edited", "comment.deleted"]


def test_tags_are_project_wide_and_case_insensitive(trajectory, users, project, run):
    services.tag_add(trajectory=trajectory, user=users["carol"], name="  reward   hacking ")
    other = make_trajectory(run, group=1)
    services.tag_add(trajectory=other, user=users["bob"], name="Reward Hacking")
    services.tag_add(
        trajectory=other, user=users["bob"], name="reward hacking"
    )  # already there: nothing logged
    assert list(Tag.objects.values_list("name", flat=True)) == ["reward hacking"]
    tag = Tag.objects.get()
    assert services.tag_remove(trajectory=other, user=users["bob"], tag=tag)
    assert not services.tag_remove(trajectory=other, user=users["bob"], tag=tag)
    assert verbs(project) == ["tag.added", "tag.added", "tag.removed"]
    with pytest.raises(ValidationError):
        services.tag_add(trajectory=trajectory, user=users["carol"], name="x" * 51)


def test_flags_are_raised_and_resolved_once(trajectory, users, project):
    flag = services.flag_raise(
        trajectory=trajectory, user=users["carol"], reason="reward_wrong", note="4 is right"
    )
    assert list(selectors.open_flags(project=project)) == [flag]
    services.flag_resolve(flag=flag, user=users["bob"])
    services.flag_resolve(flag=flag, user=users["alice"])
    assert flag.resolved_by == users["bob"] and not flag.is_open
    assert verbs(project) == ["flag.raised", "flag.resolved"]
    with pytest.raises(ValidationError):
        services.flag_raise(trajectory=trajectory, user=users["carol"], reason="because")


def test_recent_activity_is_newest_first(trajectory, users, project):
    services.comment_create(trajectory=trajectory, author=users["carol"], body="first")
    services.tag_add(trajectory=trajectory, user=users["bob"], name="good")
    assert [a.verb for a in selectors.recent_activity(project=project)][:2] == ["tag.added", "comment.added"]

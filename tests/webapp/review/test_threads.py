"""Threads: a reply notifies the author it answers (once, even when it also mentions them), joins the
thread's turn, and the thread is resolved by whoever started it, a researcher or an owner — not by another
annotator. The discussion lists threads by turn, and a turn shows its own."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from tests.webapp.review_factories import make_trajectory
from webapp.review import selectors, services
from webapp.review.models import ActivityVerb, Notification

pytestmark = pytest.mark.django_db


@pytest.fixture
def trajectory(run):
    return make_trajectory(run)


def test_a_reply_notifies_the_author_replied_to_once(trajectory, users):
    carol, alice, bob = users["carol"], users["alice"], users["bob"]
    root = services.comment_create(trajectory=trajectory, author=carol, body="odd reward", turn_index=2)
    reply = services.comment_create(
        trajectory=trajectory, author=alice, body="@carol @bob agreed", reply_to=root
    )
    assert reply.parent == root and reply.turn_index == 2
    notes = {n.recipient.username: n.reason for n in Notification.objects.filter(comment=reply)}
    assert notes == {"carol": "mention", "bob": "mention"}  # carol once: her mention counts as the reply

    again = services.comment_create(trajectory=trajectory, author=bob, body="me too", reply_to=reply)
    assert again.parent == root  # a reply to a reply stays in the thread
    assert [(n.recipient, n.reason) for n in Notification.objects.filter(comment=again)] == [(alice, "reply")]

    services.comment_create(trajectory=trajectory, author=carol, body="thanks", reply_to=root)
    assert not Notification.objects.filter(comment__body="thanks").exists()  # never oneself


def test_a_reply_belongs_to_the_trajectory_of_its_thread(trajectory, run, users):
    root = services.comment_create(trajectory=trajectory, author=users["carol"], body="here")
    other = make_trajectory(run, group=3)
    with pytest.raises(ValidationError, match="another trajectory"):
        services.comment_create(trajectory=other, author=users["bob"], body="there", reply_to=root)


@pytest.mark.parametrize(
    ("who", "may"), [("carol", True), ("alice", True), ("bob", True), ("frank", False)], ids=str
)
def test_who_resolves_a_thread(trajectory, users, who, may, django_user_model):
    from webapp.projects.models import Membership

    frank = django_user_model.objects.create_user("frank", "frank@example.com", "a-long-password-1")
    Membership.objects.create(project=trajectory.run.project, user=frank, role="annotator")
    users = {**users, "frank": frank}
    root = services.comment_create(trajectory=trajectory, author=users["carol"], body="started by carol")
    if not may:
        with pytest.raises(ValidationError, match="started the thread"):
            services.comment_thread_resolve(comment=root, user=users[who])
        return
    resolved = services.comment_thread_resolve(comment=root, user=users[who])
    assert resolved.is_resolved and resolved.resolved_by == users[who]
    services.comment_thread_resolve(comment=root, user=users[who])  # twice: recorded once
    assert root.project.activities.filter(verb=ActivityVerb.THREAD_RESOLVED).count() == 1
    reopened = services.comment_thread_resolve(comment=root, user=users[who], resolved=False)
    assert not reopened.is_resolved


def test_the_discussion_lists_threads_by_turn_and_each_turn_has_its_own(trajectory, users):
    carol = users["carol"]
    on_turn = services.comment_create(trajectory=trajectory, author=carol, body="on two", turn_index=2)
    whole = services.comment_create(trajectory=trajectory, author=carol, body="overall")
    services.comment_create(trajectory=trajectory, author=users["bob"], body="yes", reply_to=on_turn)
    panel = selectors.collaboration_panel(trajectory, carol)
    assert [(turn, [t.root for t in threads]) for turn, threads in panel.by_turn] == [
        (None, [whole]),
        (2, [on_turn]),
    ]
    turns = list(trajectory.turns.order_by("index"))
    selectors.annotate_turn_threads(trajectory, turns)
    assert [len(turn.comment_threads) for turn in turns] == [0, 0, 1]
    assert [reply.body for reply in turns[2].comment_threads[0].replies] == ["yes"]


def test_the_page_offers_reply_and_resolve_and_the_turn_shows_its_thread(trajectory, users, client):
    root = services.comment_create(
        trajectory=trajectory, author=users["carol"], body="look here", turn_index=2
    )
    services.comment_create(trajectory=trajectory, author=users["alice"], body="seen it", reply_to=root)
    slug = trajectory.run.project.slug
    client.force_login(users["bob"])
    page = client.get(reverse("rollouts:trajectory_detail", args=[slug, trajectory.pk])).content.decode()
    assert f'data-reply-form="{root.pk}"' in page and "Resolve thread" in page
    assert 'data-turn-discussion="2"' in page and "1 thread" in page and "seen it" in page
    assert "On turn #2" in page

    response = client.post(
        reverse("review:thread_resolve", args=[slug, root.pk]), {"resolved": "1"}, HTTP_HX_REQUEST="true"
    )
    assert "resolved by bob" in response.content.decode()
    aside = client.get(reverse("review:turn_discussion", args=[slug, trajectory.pk, 2])).content.decode()
    assert "✓ resolved" in aside
    assert client.get(reverse("review:turn_discussion", args=[slug, trajectory.pk, 99])).status_code == 404

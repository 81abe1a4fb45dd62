"""ws/review/ through the real stack (webapp.asgi.application, session auth, the real Redis channel layer):
a member's pages hear of a mention or a reply addressed to them and of a change in the discussion of the
trajectory they have open — after the commit, never a rolled-back one — and outsiders are turned away."""

from __future__ import annotations

from contextlib import asynccontextmanager

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import transaction

from tests.webapp.live.test_consumers import ORIGIN, cookie_of, run_async  # noqa: F401  (cookie_of: a fixture)
from tests.webapp.review_factories import make_trajectory
from webapp.asgi import application
from webapp.review import services

pytestmark = pytest.mark.django_db(transaction=True)


@asynccontextmanager
async def review_socket(cookie: bytes | None, query: str = ""):
    headers = [ORIGIN] + ([(b"cookie", cookie)] if cookie else [])
    communicator = WebsocketCommunicator(application, f"/ws/review/{query}", headers=headers)
    connected, _ = await communicator.connect(timeout=10)
    assert connected
    try:
        yield communicator
    finally:
        await communicator.disconnect()


async def ready(ws) -> None:
    assert await ws.receive_json_from(timeout=10) == {"type": "ready"}


async def next_event(ws) -> dict:
    frame = await ws.receive_json_from(timeout=10)
    assert frame["type"] == "event", frame
    return frame["event"]


def test_strangers_are_turned_away_and_a_trajectory_needs_access(run, users, cookie_of):  # noqa: F811
    trajectory = make_trajectory(run)
    refused = [
        (None, "", 4401),
        (cookie_of("eve"), f"?trajectory={trajectory.pk}", 4404),
        (cookie_of("carol"), "?trajectory=999999", 4404),
    ]

    async def scenario():
        for cookie, query, code in refused:
            async with review_socket(cookie, query) as ws:
                assert await ws.receive_output(timeout=10) == {"type": "websocket.close", "code": code}

    run_async(scenario)


def test_a_mention_reaches_the_member_and_the_comment_reaches_the_open_trajectory(
    run,
    users,
    cookie_of,  # noqa: F811
):
    trajectory = make_trajectory(run)
    comment_as = sync_to_async(services.comment_create)
    alice, dave = cookie_of("alice"), cookie_of("dave")

    async def scenario():
        async with (
            review_socket(alice) as alice_anywhere,
            review_socket(dave, f"?trajectory={trajectory.pk}") as dave_on_trajectory,
        ):
            await ready(alice_anywhere)
            await ready(dave_on_trajectory)
            comment = await comment_as(
                trajectory=trajectory, author=users["carol"], body="@alice see turn 2", turn_index=2
            )
            news = await next_event(alice_anywhere)
            assert news["type"] == "notifications" and news["unread"] == 1
            assert news["new"]["text"] == f"carol mentioned you on trajectory {trajectory.pk}"
            assert news["new"]["reason"] == "mention"
            changed = await next_event(dave_on_trajectory)
            assert changed == {
                "type": "discussion",
                "trajectory": trajectory.pk,
                "comment": comment.pk,
                "thread": comment.pk,
                "turn_index": 2,
                "change": "added",
            }
            assert await dave_on_trajectory.receive_nothing(timeout=0.2)  # dave was not mentioned

            read = sync_to_async(services.notifications_mark_read)
            await read(user=users["alice"])
            assert (await next_event(alice_anywhere)) == {"type": "notifications", "unread": 0, "new": None}

    run_async(scenario)


def test_nothing_is_sent_for_a_comment_that_was_rolled_back(run, users, cookie_of):  # noqa: F811
    trajectory = make_trajectory(run)

    def comment_then_fail():
        with pytest.raises(RuntimeError), transaction.atomic():
            services.comment_create(trajectory=trajectory, author=users["carol"], body="@alice never mind")
            raise RuntimeError("the write fails after the comment")

    cookie = cookie_of("alice")

    async def scenario():
        async with review_socket(cookie, f"?trajectory={trajectory.pk}") as alice:
            await ready(alice)
            await sync_to_async(comment_then_fail)()
            assert await alice.receive_nothing(timeout=0.5)

    run_async(scenario)

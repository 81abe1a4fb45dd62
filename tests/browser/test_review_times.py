"""Times in the reader's zone, in real Chromium: alice in Berlin and carol in New York read the same
queue's "reserved for you until" and the same activity page; each sees the hour of their own zone, the
zone named, and a relative time ("5 minutes ago") gives its exact time on hover. And a mention reaches
carol's badge on whatever page she has open (here the activity page), without a reload."""

from __future__ import annotations

import re
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import elsewhere
from tests.browser.reviewing import (
    ZONES,
    assert_not_reloaded,
    expect_unread,
    member_page,
    wait_until_live,
)
from tests.webapp.review_factories import make_group, make_trajectory
from webapp.review import services
from webapp.review.models import Comment, PairSlot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]


def local_hour_minute(moment, username: str) -> str:
    return moment.astimezone(ZoneInfo(ZONES[username])).strftime("%H:%M")


def test_each_reader_sees_their_own_zone_and_news_reach_any_page(project, run, users, server, browser):
    for group in range(2):  # a pair for each of the two annotators
        make_group(run, group=group, rewards=[1.0, 0.0])
    queue = services.queue_create(
        project=project,
        user=users["bob"],
        name="zones",
        runs=[run],
        annotators=[users["carol"], users["alice"]],
    )
    trajectory = make_trajectory(run, group=9)
    comment = services.comment_create(trajectory=trajectory, author=users["bob"], body="a note")

    for name in ("alice", "carol"):
        page = member_page(browser, server, name)
        page.goto(f"{server}/p/{project.slug}/review/queues/{queue.pk}/annotate/")
        until = page.locator("[data-lock-until] time[data-when=time]")
        expect(until).to_have_attribute("data-localized", "1")
        slot = PairSlot.objects.filter(holder=users[name]).exclude(locked_until=None).get()
        text = until.inner_text()
        assert local_hour_minute(slot.locked_until, name) in text, text
        assert "UTC" not in text or ZONES[name] == "UTC"
        assert ZONES[name] in until.get_attribute("title")

        page.goto(f"{server}/p/{project.slug}/activity/")
        relative = page.locator("[data-activity] li.activity", has_text="commented").locator("time").first
        expect(relative).to_have_attribute("data-localized", "1")
        assert re.search(r"just now|second|minute", relative.inner_text()), relative.inner_text()
        title = relative.get_attribute("title")
        assert ZONES[name] in title and local_hour_minute(comment.created_at, name) in title, title
        if name == "carol":
            wait_until_live(page)
            page.evaluate("window.notReloaded = true")
            elsewhere(
                lambda: services.comment_create(
                    trajectory=trajectory, author=users["alice"], body="@carol over to you"
                )
            )
            expect_unread(page, 1)
            expect(page.locator("[data-live-note]")).to_contain_text("alice mentioned you")
            assert_not_reloaded(page)
    assert Comment.objects.count() == 2

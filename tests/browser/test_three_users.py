"""Three people review one finished run together, each in their own Chromium context, time zone and under
the Content-Security-Policy: alice (owner, Berlin), bob (researcher, Tokyo) and carol (annotator, New York).

bob assigns himself and carol to a two-judgements-a-pair queue; both judge with the keyboard and split on
one pair. alice, who is no annotator of the queue, is offered no pair and no lock. On the trajectory bob
preferred, bob comments on its turn #2 mentioning alice: the mention reaches her open page live (the
badge, the discussion, beside turn #2); she replies in the thread and bob hears of it live. Then she opens
the queue's disagreements, reads both votes and rationales side by side and settles the pair; κ after
adjudication is on the page beside κ before; the next dataset snapshot exports her decision with its
provenance (who, when, the votes it overrode). carol can see neither the disagreements nor the Workers
page. Each reads the times in their own zone."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.browser.reviewing import (
    ZONES,
    assert_not_reloaded,
    expect_unread,
    member_page,
    open_trajectory,
    post_comment,
    reply,
    thread_of,
)
from tests.webapp.review_factories import make_group
from webapp.experiments.models import Run, RunStatus
from webapp.review import exports
from webapp.review.models import Notification, PairSlot, PreferencePair, PreferenceQueue, PreferenceSnapshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

GROUPS = 3


@pytest.fixture
def finished_run(run):
    for group in range(GROUPS):
        make_group(run, group=group, rewards=[1.0, 0.0], prompt=f"What is {group} + 2?")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, current_step=1)
    return run


def judge_every_pair(page, server, slug, queue, *, contrary: set[int]) -> None:
    """Judge with the keyboard, with a reason: the rewarded answer ("answer g.0"), except in the groups
    `contrary` names."""
    page.goto(f"{server}/p/{slug}/review/queues/{queue.pk}/annotate/")
    for _ in range(GROUPS):
        page.wait_for_selector("#judgement-form[data-ready]", state="attached")
        group = int(re.search(r"What is (\d+) \+ 2", page.inner_text("[data-prompt]")).group(1))
        left_is_rewarded = bool(re.search(r"answer \d+\.0", page.inner_text('[data-side="left"]')))
        against = group in contrary
        page.keyboard.press("1" if left_is_rewarded != against else "2")
        reason = "the other one is terser" if against else "correct"
        page.fill("textarea[name=rationale]", f"group {group}: {reason}")
        page.locator("textarea[name=rationale]").blur()
        expect(page.locator("[data-lock]")).to_contain_text("reserved for you until")
        with page.expect_navigation():
            page.keyboard.press("Enter")
    expect(page.locator("[data-queue-done]")).to_be_visible()


def test_three_people_discuss_settle_a_disagreement_and_the_snapshot_exports_it(
    finished_run, project, users, server, browser
):
    slug = project.slug
    alice, bob, carol = (member_page(browser, server, name) for name in ("alice", "bob", "carol"))

    # 1. bob builds the queue for carol and himself, two judgements a pair ("skip equal rewards" is on).
    bob.goto(f"{server}/p/{slug}/review/queues/new/")
    expect(bob.locator("input[name=distinct_rewards]")).to_be_checked()
    bob.fill("input[name=name]", "three of us")
    bob.check(f"input[name=runs][value='{finished_run.pk}']")
    bob.check(f"input[name=annotators][value='{users['carol'].pk}']")
    bob.check(f"input[name=annotators][value='{users['bob'].pk}']")
    bob.fill("input[name=overlap]", "2")
    bob.click("button[type=submit]:has-text('Create queue')")
    bob.wait_for_url(re.compile(r"/review/queues/\d+/$"))
    queue = PreferenceQueue.objects.get()

    # 2. alice owns the project but is no annotator of this queue: no pair, no lock, and she is told why.
    response = alice.goto(f"{server}/p/{slug}/review/queues/{queue.pk}/annotate/")
    assert response.status == 403
    expect(alice.locator("main")).to_contain_text("You are not an annotator of this queue")
    assert not PairSlot.objects.filter(holder__isnull=False).exists()

    # 3. carol and bob judge every pair: both go against the reward on group 2, bob on group 1 too.
    judge_every_pair(carol, server, slug, queue, contrary={2})
    judge_every_pair(bob, server, slug, queue, contrary={1, 2})
    split_pair = PreferencePair.objects.select_related("b").get(queue=queue, a__group_index=1)

    # 4. carol may not read the others' votes, nor the machines' load.
    assert carol.goto(f"{server}/p/{slug}/review/queues/{queue.pk}/disagreements/").status == 403
    expect(carol.locator("main")).to_contain_text("may not see the votes")
    expect(carol.locator("header a[href='/workers/']")).to_have_count(0)
    assert carol.goto(f"{server}/workers/").status == 403

    # 5. On the answer bob preferred, he tells alice why, on its turn #2: she hears of it live.
    preferred = split_pair.b
    for page in (alice, bob):
        open_trajectory(page, server, project, preferred)
    expect_unread(alice, 0)
    post_comment(bob, "@alice I picked this one on purpose: terser", turn=2)
    expect(alice.locator("#collaboration .comment-body", has_text="on purpose")).to_be_visible(timeout=5_000)
    expect_unread(alice, 1)
    beside = alice.locator("#turn-2 [data-turn-discussion]")
    expect(beside).to_contain_text("I picked this one on purpose")
    # each reads the comment's time in their own zone
    alice_time = alice.locator("#collaboration time[data-when]").first
    bob_time = bob.locator("#collaboration time[data-when]").first
    expect(alice_time).to_have_attribute("title", re.compile(re.escape(ZONES["alice"])))
    expect(bob_time).to_have_attribute("title", re.compile(re.escape(ZONES["bob"])))

    # 6. alice replies in the thread; bob is notified and sees the reply without a reload.
    reply(alice, thread_of(alice, "on purpose"), "Terse, but the sum is wrong: I will settle it")
    expect_unread(bob, 1)
    expect(bob.locator("#collaboration .replies .comment-body", has_text="the sum is wrong")).to_be_visible()
    assert Notification.objects.get(recipient=users["bob"]).reason == "reply"
    for page in (alice, bob):
        assert_not_reloaded(page)

    # 7. alice finds the disagreement from the queue page and reads both votes side by side.
    alice.goto(f"{server}/p/{slug}/review/queues/{queue.pk}/")
    link = alice.locator("[data-disagreements-link] a")
    expect(link).to_contain_text("1 open, 0 settled")
    link.click()
    card = alice.locator(f"[data-disagreement='{split_pair.pk}']")
    expect(alice.locator("[data-disagreement]")).to_have_count(1)
    expect(card.locator("[data-vote='carol']")).to_contain_text("group 1: correct")
    expect(card.locator("[data-vote='bob']")).to_contain_text("group 1: the other one is terser")
    expect(card.locator("[data-side='a']")).to_contain_text("answer 1.0")
    expect(card.locator("[data-side='b']")).to_contain_text("answer 1.1")
    expect(card.locator("[data-decision]")).to_contain_text("split vote")
    kappa_before = float(alice.inner_text("[data-kappa-before]"))

    # 8. She settles it for A (the correct answer), with a reason; κ after adjudication rises.
    card.locator("input[name=choice][value=a]").check()
    card.locator("input[name=rationale]").fill("A is the right sum")
    with alice.expect_navigation():
        card.locator("button[type=submit]").click()
    expect(alice.locator(".messages")).to_contain_text("settled: A is better")
    expect(alice.locator("[data-no-disagreements]")).to_be_visible()
    assert float(alice.inner_text("[data-kappa-after]")) > kappa_before
    alice.goto(f"{server}/p/{slug}/review/queues/{queue.pk}/disagreements/?show=settled")
    settled_note = alice.locator(f"[data-disagreement='{split_pair.pk}'] [data-adjudication]")
    expect(settled_note).to_contain_text("Settled by alice")
    expect(settled_note.locator("time[data-when]")).to_have_attribute(
        "title", re.compile(re.escape(ZONES["alice"]))
    )

    # 9. bob exports a snapshot: the settled pair is in it, chosen as alice decided, with its provenance.
    bob.goto(f"{server}/p/{slug}/review/queues/{queue.pk}/")
    with bob.expect_navigation():
        bob.click("#snapshot-form button")
    expect(bob.locator("[data-adjudicated-count]")).to_have_text("1")
    snapshot = PreferenceSnapshot.objects.get()
    rows = [json.loads(line) for line in exports.dpo_jsonl(snapshot).splitlines()]
    assert len(rows) == GROUPS
    settled = next(row for row in rows if row["provenance"]["pair_id"] == split_pair.pk)
    assert settled["chosen"][0]["content"] == "<answer>answer 1.0</answer>"
    adjudication = settled["provenance"]["adjudication"]
    assert adjudication["by"] == "alice" and adjudication["rationale"] == "A is the right sum"
    assert sorted(vote["annotator"] for vote in adjudication["overridden"]) == ["bob", "carol"]

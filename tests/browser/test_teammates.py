"""A team grows in real headless Chromium: alice (owner) invites an annotator by a one-time link, revokes
a second link through its confirm dialog, the newcomer signs up through the first link (the only way to
sign up), judges preference pairs with the keyboard, and the queue's agreement between the newcomer and
carol (an annotator already there) appears."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from tests.browser.conftest import new_page, sign_in
from tests.conftest import PASSWORD
from tests.webapp.review_factories import make_group
from webapp.experiments.models import Run, RunStatus
from webapp.projects.models import Invitation, InvitationState, Membership
from webapp.review import services as review_services
from webapp.review.models import Judgement, PreferenceQueue

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

GROUPS = 5
NEW_PASSWORD = "frank-has-a-long-passphrase"


@pytest.fixture
def finished_run(run):
    for group in range(GROUPS):
        make_group(run, group=group, rewards=[1.0, 0.0], prompt=f"What is {group} + 2?")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, current_step=1)
    return run


def carol_judges_by_reward(queue: PreferenceQueue, carol) -> None:
    while (assignment := review_services.next_pair(queue=queue, annotator=carol)) is not None:
        pair = assignment.pair
        choice = "a" if pair.a.reward > pair.b.reward else "b"
        review_services.judgement_submit(pair=pair, annotator=carol, choice=choice)


def test_an_owner_invites_an_annotator_who_joins_judges_and_agreement_appears(
    finished_run, project, users, server, browser, page
):
    slug = project.slug
    sign_in(page, server, "alice", PASSWORD)

    # 1. alice makes two links on the Members page; each is shown once.
    page.goto(f"{server}/p/{slug}/members/")
    for note in ("Frank", "spare"):
        page.select_option("#invite-form select[name=role]", "annotator")
        page.fill("#invite-form input[name=note]", note)
        page.click("#invite-form button[type=submit]")
        page.wait_for_url(re.compile(r"/members/#invitations$"))
        if note == "Frank":
            link = page.input_value("[data-invitation-url]")
    assert "/invite/rsi_" in link
    spare = Invitation.objects.get(note="spare")

    # 2. Revoking asks first: "Keep it" keeps the link, "Revoke" revokes it.
    row = page.locator(f"tr[data-invitation-id='{spare.pk}']")
    row.locator("button:has-text('Revoke')").click()
    dialog = page.locator("[data-confirm-dialog]")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Revoke this invitation?")
    dialog.locator("[data-confirm-no]").click()
    expect(dialog).to_be_hidden()
    spare.refresh_from_db()
    assert spare.state() == InvitationState.PENDING
    row.locator("button:has-text('Revoke')").click()
    with page.expect_navigation():
        dialog.locator("[data-confirm-yes]").click()
    expect(page.locator(".messages")).to_contain_text("Invitation revoked")
    spare.refresh_from_db()
    assert spare.state() == InvitationState.REVOKED

    # 3. The newcomer signs up through the link and lands in the project as an annotator.
    frank_context = browser.new_context(viewport={"width": 1360, "height": 900}, bypass_csp=True)
    try:
        frank = new_page(frank_context)
        frank.goto(link)
        expect(frank.locator("h1")).to_contain_text(f"Join “{project.name}”")
        frank.fill("input[name=username]", "frank")
        frank.fill("input[name=password]", NEW_PASSWORD)
        frank.fill("input[name=password_again]", NEW_PASSWORD)
        frank.click("#signup-form button[type=submit]")
        frank.wait_for_url(f"**/p/{slug}/")
        expect(frank.locator(".messages")).to_contain_text("you are annotator")
        new_user = get_user_model().objects.get(username="frank")
        assert Membership.objects.get(project=project, user=new_user).role == "annotator"

        # The link worked once.
        again = frank_context.new_page()
        again.goto(link)
        expect(again.locator("[data-invitation=used]")).to_contain_text("used already")
        again.close()

        # 4. alice makes a preference queue for frank and carol, two judgements a pair.
        page.goto(f"{server}/p/{slug}/review/queues/new/")
        page.fill("input[name=name]", "team study")
        page.check(f"input[name=runs][value='{finished_run.pk}']")
        page.check(f"input[name=annotators][value='{users['carol'].pk}']")
        page.check(f"input[name=annotators][value='{new_user.pk}']")
        page.fill("input[name=overlap]", "2")
        page.click("button[type=submit]:has-text('Create queue')")
        page.wait_for_url(re.compile(r"/review/queues/\d+/$"))
        queue = PreferenceQueue.objects.get()
        carol_judges_by_reward(queue, users["carol"])

        # 5. frank judges every pair with the keyboard: the rewarded answer ("….0"), but for one pair.
        frank.goto(f"{server}/p/{slug}/review/queues/{queue.pk}/annotate/")
        for i in range(GROUPS):
            frank.wait_for_function("window.annotateReady === true")
            left_is_rewarded = re.search(r"answer \d+\.0", frank.inner_text('[data-side="left"]'))
            key = "1" if bool(left_is_rewarded) != (i == 0) else "2"
            frank.keyboard.press(key)
            with frank.expect_navigation():
                frank.keyboard.press("Enter")
        expect(frank.locator("[data-queue-done]")).to_be_visible()
    finally:
        frank_context.close()
    assert Judgement.objects.filter(pair__queue=queue, annotator=new_user).count() == GROUPS

    # 6. The agreement of frank and carol is on the queue's page: 4 of 5 pairs.
    page.goto(f"{server}/p/{slug}/review/queues/{queue.pk}/")
    matrix = page.locator("table.matrix")
    expect(matrix).to_contain_text("frank")
    expect(matrix).to_contain_text("carol")
    expect(matrix).to_contain_text("80% of 5")
    expect(page.locator("#agreement + .stats")).to_contain_text("Cohen's κ")

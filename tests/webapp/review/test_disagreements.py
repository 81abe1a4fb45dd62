"""Disagreements are work: the pairs a queue's voters split on, side by side with every vote and rationale;
settling one (owners and researchers) decides what the next dataset snapshot exports, with provenance;
κ before and after adjudication.

alice owns the project, bob researches, carol annotates, dave views."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.webapp.review_factories import make_group
from webapp.review import services, tally
from webapp.review.models import Activity, Adjudication, PairSlot


@pytest.fixture
def split_queue(run, users, project):
    """Three pairs judged by carol and bob: they agree on group 0 and split on groups 1 and 2."""
    for group in range(3):
        make_group(run, group=group, rewards=[1.0, 0.0])
    queue = services.queue_create(
        project=project,
        user=users["bob"],
        name="split",
        runs=[run],
        annotators=[users["carol"], users["bob"]],
        overlap=2,
        seed=1,
    )
    votes = {"carol": {0: "a", 1: "a", 2: "b"}, "bob": {0: "a", 1: "b", 2: "tie"}}
    for name, choices in votes.items():
        while (assignment := services.next_pair(queue=queue, annotator=users[name])) is not None:
            group = assignment.pair.a.group_index
            services.judgement_submit(
                pair=assignment.pair,
                annotator=users[name],
                choice=choices[group],
                rationale=f"{name} on group {group}",
            )
    return queue


def pair_of(queue, group):
    return queue.pairs.select_related("a").get(a__group_index=group)


def test_the_page_shows_the_split_pairs_with_every_vote_and_rationale(client_for, split_queue, project):
    url = reverse("review:disagreements", args=[project.slug, split_queue.pk])
    html = client_for("bob").get(url).content.decode()
    split = {pair_of(split_queue, g).pk for g in (1, 2)}
    shown = {int(part.split('"')[0]) for part in html.split('data-disagreement="')[1:]}
    assert shown == split  # group 0, where they agree, is not work
    one = html.split(f'data-disagreement="{pair_of(split_queue, 1).pk}"')[1].split("</section>")[0]
    assert "carol on group 1" in one and "bob on group 1" in one
    assert "&lt;answer&gt;answer 1.0&lt;/answer&gt;" in one and "answer 1.1" in one  # escaped
    assert "left out of datasets: split vote" in one
    assert "data-kappa-before" in html and "Cohen&#x27;s κ before adjudication" in html
    # the queue page links it with the count of open ones
    detail = client_for("bob").get(reverse("review:queue_detail", args=[project.slug, split_queue.pk]))
    assert "Disagreements: 2 open, 0 settled" in detail.content.decode()


def test_annotators_never_see_each_others_votes_there(client_for, split_queue, project):
    url = reverse("review:disagreements", args=[project.slug, split_queue.pk])
    response = client_for("carol").get(url)
    assert response.status_code == 403
    assert "may not see the votes a queue&#x27;s annotators split on" in response.content.decode()
    detail = client_for("carol").get(reverse("review:queue_detail", args=[project.slug, split_queue.pk]))
    assert "Disagreements:" not in detail.content.decode()


def test_a_settled_pair_is_exported_with_who_settled_it_and_the_votes_it_overrode(
    client_for, split_queue, project, users
):
    before = services.snapshot_create(split_queue, users["bob"])
    assert (
        before.provenance["counts"]["excluded_no_majority"] == 2
        and before.provenance["counts"]["included"] == 1
    )

    pair = pair_of(split_queue, 1)
    response = client_for("alice").post(
        reverse("review:adjudicate", args=[project.slug, split_queue.pk, pair.pk]),
        {"choice": "b", "rationale": "B shows its work"},
    )
    assert response.status_code == 302
    page = client_for("alice").get(response.url).content.decode()
    assert "Pair " in page and "settled: B is better" in page

    after = services.snapshot_create(split_queue, users["bob"])
    rows = services.snapshot_pairs(after)
    assert after.provenance["counts"]["included"] == 2 and after.provenance["counts"]["adjudicated"] == 1
    settled = next(row for row in rows if row["provenance"]["pair_id"] == pair.pk)
    assert settled["chosen"] == "<answer>answer 1.1</answer>"  # B, against carol's vote for A
    adjudication = settled["provenance"]["adjudication"]
    assert adjudication["by"] == "alice" and adjudication["choice"] == "b"
    assert adjudication["rationale"] == "B shows its work" and adjudication["at"]
    assert sorted((v["annotator"], v["choice"], v["rationale"]) for v in adjudication["overridden"]) == [
        ("bob", "b", "bob on group 1"),
        ("carol", "a", "carol on group 1"),
    ]
    assert "adjudication" in after.provenance["rule"]
    assert Activity.objects.filter(verb="pair.adjudicated", actor=users["alice"]).count() == 1
    # the page moves it from open to settled, and κ after adjudication rises above κ before
    html = client_for("bob").get(reverse("review:disagreements", args=[project.slug, split_queue.pk]))
    html = html.content.decode()
    assert f'data-disagreement="{pair.pk}"' not in html
    kappa_before = float(html.split("data-kappa-before>")[1].split("<")[0])
    kappa_after = float(html.split("data-kappa-after>")[1].split("<")[0])
    assert kappa_after > kappa_before
    settled_page = client_for("bob").get(
        reverse("review:disagreements", args=[project.slug, split_queue.pk]) + "?show=settled"
    )
    assert "Settled by <strong>alice</strong>" in settled_page.content.decode()


def test_changing_a_decision_keeps_one_per_pair_and_a_unanimous_pair_cannot_be_settled(split_queue, users):
    pair = pair_of(split_queue, 2)
    services.pair_adjudicate(pair=pair, user=users["bob"], choice="a")
    services.pair_adjudicate(pair=pair, user=users["alice"], choice="both_bad", rationale="both wrong")
    settled = Adjudication.objects.get(pair=pair)
    assert (settled.choice, settled.adjudicated_by) == ("both_bad", users["alice"])
    counts = services.snapshot_create(split_queue, users["bob"]).provenance["counts"]
    assert counts["excluded_both_bad"] == 1 and counts["adjudicated"] == 1
    with pytest.raises(Exception, match="no disagreement to settle"):
        services.pair_adjudicate(pair=pair_of(split_queue, 0), user=users["bob"], choice="b")


def test_viewers_and_annotators_may_not_settle(client_for, split_queue, project):
    pair = pair_of(split_queue, 1)
    url = reverse("review:adjudicate", args=[project.slug, split_queue.pk, pair.pk])
    for person in ("carol", "dave"):
        response = client_for(person).post(url, {"choice": "a"})
        assert response.status_code == 403 and "may not settle a disagreement" in response.content.decode()
    assert not Adjudication.objects.exists()


@pytest.mark.parametrize(
    "choices, adjudicated, outcome",
    [
        (["a", "a"], None, "a"),
        (["a", "b"], None, "no_majority"),
        (["tie", "tie", "a"], None, "tie"),
        (["a", "b"], "b", "b"),
        (["a", "a"], "both_bad", "both_bad"),
    ],
)
def test_the_tally_rule(choices, adjudicated, outcome):
    decision = tally.decide(choices, adjudicated)
    assert decision.outcome == outcome and decision.adjudicated == bool(adjudicated)
    assert decision.side == (outcome if outcome in ("a", "b") else None)


def test_an_owner_who_is_not_an_annotator_is_offered_no_pair_and_takes_no_lock(
    client_for, run, users, project
):
    make_group(run, rewards=[1.0, 0.0])
    queue = services.queue_create(
        project=project, user=users["bob"], name="q", runs=[run], annotators=[users["carol"]]
    )
    response = client_for("alice").get(reverse("review:annotate", args=[project.slug, queue.pk]))
    assert (
        response.status_code == 403 and "You are not an annotator of this queue" in response.content.decode()
    )
    assert not PairSlot.objects.filter(holder__isnull=False).exists()
    detail = client_for("alice").get(reverse("review:queue_detail", args=[project.slug, queue.pk]))
    assert reverse("review:annotate", args=[project.slug, queue.pk]) not in detail.content.decode()


def test_the_api_lists_disagreements_and_settles_one(signed_in, split_queue, users):
    bob = signed_in("bob")
    url = f"/api/preference-queues/{split_queue.pk}/disagreements/"
    body = bob.get(url).json()
    assert (body["open"], body["settled"], body["kappa_kind"]) == (2, 0, "Cohen's κ")
    pair = pair_of(split_queue, 1)
    listed = next(row for row in body["pairs"] if row["pair"] == pair.pk)
    assert sorted((v["voter"], v["choice"], v["rationale"]) for v in listed["votes"]) == [
        ("bob", "b", "bob on group 1"),
        ("carol", "a", "carol on group 1"),
    ]
    assert listed["decision"] == {"outcome": "no_majority", "adjudicated": False}

    settle = f"/api/preference-queues/{split_queue.pk}/pairs/{pair.pk}/adjudication/"
    answer = bob.post(settle, {"choice": "a", "rationale": "right sum"}, format="json")
    assert answer.status_code == 200 and answer.json()["adjudicated_by"] == "bob"
    body = bob.get(url + "?show=settled").json()
    assert [row["pair"] for row in body["pairs"]] == [pair.pk]
    assert body["pairs"][0]["decision"] == {"outcome": "a", "adjudicated": True}
    assert body["kappa_after"] > body["kappa_before"]

    agreed = f"/api/preference-queues/{split_queue.pk}/pairs/{pair_of(split_queue, 0).pk}/adjudication/"
    refused = bob.post(agreed, {"choice": "b"}, format="json")
    assert refused.status_code == 400 and "no disagreement to settle" in refused.content.decode()
    assert bob.post(settle, {"choice": "left"}, format="json").status_code == 400
    assert signed_in("carol").get(url).status_code == 403

"""The explorer's links lead where they say: every "group N" link opens that group, evaluation groups too."""

from __future__ import annotations

import re

from django.urls import reverse

from tests.webapp.review.test_explorer import item
from webapp.rollouts.ingest import ingest_batch


def test_every_group_link_opens_its_group_evaluation_groups_too(client_for, project, run):
    train = item(0, 0, 1.0, "ok", "The answer is 42.")
    evaluation = {**item(0, 0, 0.0, "ok", "The answer is 41."), "split": "eval", "task_id": "held-out-0"}
    ingest_batch(
        run=run,
        payload={"events": [{"seq": 1, "type": "trajectories", "step": 3, "items": [train, evaluation]}]},
    )
    client = client_for("dave")

    html = client.get(reverse("review:explorer", args=[project.slug])).content.decode()

    links = re.findall(r'<a href="([^"]+)" title="the whole group at this step">', html)
    assert len(links) == 2
    assert any("split=eval" in link for link in links)
    for link in links:
        assert client.get(link.replace("&amp;", "&")).status_code == 200, link


def test_row_links_are_the_reversed_urls_whatever_the_slug_holds(db):
    """The links are formatted from one reversed URL per name: the same as reversing each, even for a
    slug made of the numbers that stand in for the row's while reversing."""
    from types import SimpleNamespace

    from webapp.review.explorer import row_links

    row = SimpleNamespace(pk=123, run_id=900_000_002, step=40, group_index=2, split="eval")
    for slug in ("year", "900000001-900000002-900000003"):
        assert row_links(slug)(row) == {
            "trajectory": reverse("rollouts:trajectory_detail", args=[slug, 123]),
            "group": reverse("rollouts:group_detail", args=[slug, 900_000_002, 40, 2]) + "?split=eval",
            "run": reverse("experiments:run_detail", args=[slug, 900_000_002]),
        }

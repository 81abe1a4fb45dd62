"""One group, three readers: the live feed, the group page and the API give the same numbers, because all
three ask `trainers.learn.algorithms.group_stats`."""

from __future__ import annotations

import math

import pytest

from tests.webapp.factories import turn
from webapp.experiments.models import Run, RunStatus
from webapp.rollouts.models import RunEvent
from webapp.rollouts.selectors import trajectories as trajectory_selectors

REWARDS = [0.2, 1.0, 0.2, 0.0]


def item(group: int, sample: int, reward: float, split: str = "train") -> dict:
    return {
        "group": group,
        "sample": sample,
        "task_id": f"task-{group}",
        "reward": reward,
        "split": split,
        "turns": [turn("user", "2+2?"), turn("assistant", f"<answer>{reward}</answer>")],
    }


@pytest.fixture
def ingested(client, run):
    """A training group with spread, a training group without, and two evaluation tasks, as a trainer posts them."""
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
    items = [item(0, i, r) for i, r in enumerate(REWARDS)] + [item(1, i, 0.5) for i in range(3)]
    items += [item(0, 0, 1.0, "eval"), item(1, 0, 0.0, "eval")]
    response = client.post(
        f"/api/runs/{run.pk}/events",
        {"events": [{"seq": 1, "type": "trajectories", "step": 3, "items": items}]},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {run.ingest_token()}",
    )
    assert response.status_code == 200, response.content
    return run


def test_the_feed_the_group_page_and_the_api_agree_on_every_group(ingested, signed_in):
    run = ingested
    feed = {(g["split"], g["group"]): g for g in RunEvent.objects.get(run=run, seq=1).summary["groups"]}
    api = {
        (g["split"], g["group"]): g
        for g in signed_in("dave").get(f"/api/runs/{run.pk}/groups/").json()["groups"]
    }
    assert set(feed) == set(api) == {("train", 0), ("train", 1), ("eval", 0), ("eval", 1)}
    for (split, group), live in feed.items():
        page = trajectory_selectors.group_detail(run=run, step=3, group_index=group, split=split)
        listed = api[(split, group)]
        assert live["size"] == len(page.members) == listed["size"]
        assert live["mean"] == pytest.approx(page.mean) == pytest.approx(listed["mean"])
        assert live["std"] == pytest.approx(page.std) == pytest.approx(listed["std"])
        assert live["zero_variance"] == page.zero_variance == listed["zero_variance"]

    spread = feed[("train", 0)]
    mean = sum(REWARDS) / 4
    assert spread["std"] == pytest.approx(math.sqrt(sum((r - mean) ** 2 for r in REWARDS) / 3))  # sample std
    assert feed[("train", 1)]["zero_variance"] is True
    # An evaluation task is scored, never trained on: it can never be "no learning signal".
    assert feed[("eval", 0)]["zero_variance"] is False and api[("eval", 1)]["zero_variance"] is False

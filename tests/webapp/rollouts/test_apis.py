"""Trajectories, metrics and checkpoints of a run through the JSON API (dave, a viewer, reads)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from webapp.rollouts.ingest import insert_metrics
from webapp.rollouts.models import Trajectory, Turn


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def dave(users) -> APIClient:
    client = APIClient()
    client.force_login(users["dave"])
    return client


@pytest.fixture
def rollouts(run) -> list[Trajectory]:
    """Two steps × two groups × two samples of training rollouts, plus one eval episode."""
    made = []
    for step in (1, 2):
        for group in (0, 1):
            for sample in (0, 1):
                made.append(
                    Trajectory.objects.create(
                        run=run,
                        step=step,
                        group_index=group,
                        sample_index=sample,
                        task_id=f"task-{group}",
                        reward=step * 0.25 + sample * 0.5,
                        advantage=0.5 - sample,
                        num_turns=2,
                    )
                )
    made.append(
        Trajectory.objects.create(
            run=run, step=2, split="eval", task_id="eval-0", reward=1.0, status="truncated"
        )
    )
    return made


def ids(response) -> list[int]:
    assert response.status_code == 200, response.content
    return [t["id"] for t in response.json()["results"]]


def test_trajectories_come_in_step_group_sample_order(dave, run, rollouts):
    body = dave.get(f"/api/runs/{run.pk}/trajectories/").json()
    assert body["count"] == 9
    keys = [(t["step"], t["split"], t["group_index"], t["sample_index"]) for t in body["results"]]
    assert keys == sorted(keys, key=lambda k: (k[0], k[2], k[3]))
    assert "turns" not in body["results"][0]


@pytest.mark.parametrize(
    "query, expected",
    [
        ("step=1", lambda t: t.step == 1),
        ("split=eval", lambda t: t.split == "eval"),
        ("min_reward=0.75", lambda t: t.reward >= 0.75),
        ("max_reward=0.5", lambda t: t.reward <= 0.5),
        (
            "step=2&split=train&min_reward=0.6",
            lambda t: t.step == 2 and t.split == "train" and t.reward >= 0.6,
        ),
        ("group=1&step=1", lambda t: t.group_index == 1 and t.step == 1),
        ("task_id=task-0", lambda t: t.task_id == "task-0"),
        ("status=truncated", lambda t: t.status == "truncated"),
    ],
)
def test_trajectory_filters(query, expected, dave, run, rollouts):
    assert sorted(ids(dave.get(f"/api/runs/{run.pk}/trajectories/?{query}"))) == sorted(
        t.pk for t in rollouts if expected(t)
    )


@pytest.mark.parametrize(
    "query, path",
    [("step=abc", "step"), ("split=test", "split"), ("min_reward=high", "min_reward"), ("step=-1", "step")],
)
def test_bad_trajectory_filters_are_400_by_name(query, path, dave, run):
    response = dave.get(f"/api/runs/{run.pk}/trajectories/?{query}")
    assert response.status_code == 400
    assert list(response.json()["fields"]) == [path]


def test_a_trajectory_comes_with_its_turns_in_order(dave, run):
    trajectory = Trajectory.objects.create(run=run, step=3, task_id="t", reward=1.0, num_turns=3)
    Turn.objects.create(trajectory=trajectory, index=2, role="tool", tool_name="calculator", tool_result="5")
    Turn.objects.create(trajectory=trajectory, index=0, role="user", text="2+3?")
    Turn.objects.create(
        trajectory=trajectory,
        index=1,
        role="assistant",
        text="call",
        tool_name="calculator",
        tool_args={"expression": "2+3"},
        token_ids=[1, 2, 3],
        loss_mask=[1, 1, 0],
    )
    url = f"/api/runs/{run.pk}/trajectories/{trajectory.pk}/"

    body = dave.get(url).json()
    assert [t["index"] for t in body["turns"]] == [0, 1, 2]
    assert body["turns"][1]["tool_args"] == {"expression": "2+3"}
    assert "token_ids" not in body["turns"][1]

    with_tokens = dave.get(f"{url}?include_tokens=true").json()
    assert with_tokens["turns"][1]["token_ids"] == [1, 2, 3]
    assert with_tokens["turns"][1]["loss_mask"] == [1, 1, 0]

    assert dave.get(f"/api/runs/{run.pk}/trajectories/999999/").status_code == 404


def test_metrics_come_back_as_per_key_series(dave, run):
    insert_metrics(
        run.pk,
        [
            (0, None, None, {"reward/mean": 0.0, "loss": 1.0, "kl": 0.0}),
            *((step, None, None, {"reward/mean": step / 10, "loss": 1 - step / 10}) for step in range(1, 5)),
        ],
    )

    body = dave.get(f"/api/runs/{run.pk}/metrics/?keys=reward/mean,loss").json()
    assert body["run"] == run.pk
    assert body["keys"] == ["kl", "loss", "reward/mean"]
    assert list(body["series"]) == ["reward/mean", "loss"]  # in the order asked for
    reward = body["series"]["reward/mean"]
    assert reward["steps"] == [0, 1, 2, 3, 4]
    assert reward["values"] == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])
    assert reward["downsampled"] is False and reward["total_points"] == 5

    everything = dave.get(f"/api/runs/{run.pk}/metrics/").json()
    assert list(everything["series"]) == ["kl", "loss", "reward/mean"]
    unknown = dave.get(f"/api/runs/{run.pk}/metrics/?keys=nope").json()
    assert unknown["series"] == {}


def test_long_metric_series_are_downsampled_on_the_server(dave, run):
    insert_metrics(run.pk, [(step, None, None, {"reward/mean": float(step % 10)}) for step in range(1000)])
    series = dave.get(f"/api/runs/{run.pk}/metrics/?keys=reward/mean&max_points=100").json()["series"][
        "reward/mean"
    ]
    assert series["downsampled"] is True
    assert series["total_points"] == 1000
    assert len(series["steps"]) <= 100
    assert series["steps"][0] == 0 and series["steps"][-1] == 999  # the curve's first and last point
    # Each bucket keeps its lowest and its highest point, not a mean: the spikes survive.
    assert min(series["values"]) == 0.0 and max(series["values"]) == 9.0
    assert set(series["values"][1:-1]) == {0.0, 9.0}

    spiky = [(step, None, None, {"kl": 5.0 if step == 500 else 0.0}) for step in range(1000)]
    insert_metrics(run.pk, spiky)
    kl = dave.get(f"/api/runs/{run.pk}/metrics/?keys=kl&max_points=50").json()["series"]["kl"]
    assert 5.0 in kl["values"] and kl["steps"][kl["values"].index(5.0)] == 500

    bad = dave.get(f"/api/runs/{run.pk}/metrics/?max_points=1")
    assert bad.status_code == 400 and list(bad.json()["fields"]) == ["max_points"]


def test_checkpoints_are_listed_by_step_with_pruned_ones_marked(dave, run):
    run.checkpoints.create(step=20, path="/ckpt/20", metrics={"reward/mean": 0.4})
    run.checkpoints.create(step=10, path="/ckpt/10", deleted=True)
    body = dave.get(f"/api/runs/{run.pk}/checkpoints/").json()
    assert [(c["step"], c["deleted"]) for c in body["results"]] == [(10, True), (20, False)]
    assert body["results"][1]["metrics"] == {"reward/mean": 0.4}

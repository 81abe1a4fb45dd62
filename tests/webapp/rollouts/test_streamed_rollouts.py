"""A real run reporting over HTTP to the real dashboard: each group of a step is stored (and in the live
feed's event log) as soon as it is scored — the first group before the step's last group is scored, and
every group before the step's update."""

from __future__ import annotations

import time

import pytest

from trainers.recipes.grpo import Trainer
from trainers.rubrics import build_rubric
from trainers.sdk.reporting import HttpSink
from webapp.experiments.models import Run
from webapp.rollouts.models import RunEvent, Trajectory

pytestmark = pytest.mark.slow


@pytest.fixture
def reporting_run(transactional_db, project, environment, rubric, users):
    from webapp.experiments.services import run_create

    return run_create(
        project=project,
        name="streamed",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )


class StoredBeforeScoring:
    """The environment's reward, scored group by group; before scoring the step's last group it waits (at
    most 30 s) for the dashboard to hold every earlier group, and notes which groups it held. (Waiting for
    the first group only raced on a loaded CI: the second group's batch was still on its way.)"""

    def __init__(self, run: Run, groups: int) -> None:
        self.inner = build_rubric(
            {"criteria": [{"name": "environment", "kind": "env_reward", "weight": 1.0, "params": {}}]}
        )
        self.run, self.groups, self.calls = run, groups, 0
        self.stored_before_last: list[int] | None = None

    def score_group(self, trajectories):
        self.calls += 1
        if self.calls == self.groups:
            stored = Trajectory.objects.filter(run=self.run, step=1, split="train")
            deadline = time.monotonic() + 30
            earlier = set(range(self.groups - 1))
            while (
                not earlier <= set(stored.values_list("group_index", flat=True))
                and time.monotonic() < deadline
            ):
                time.sleep(0.05)
            self.stored_before_last = sorted(set(stored.values_list("group_index", flat=True)))
        return self.inner.score_group(trajectories)


def test_each_group_reaches_the_dashboard_as_soon_as_it_is_scored(live_server, reporting_run):
    run, token = reporting_run
    Run.objects.filter(pk=run.pk).update(status="RUNNING")
    sink = HttpSink(live_server.url, run.pk, token, flush_interval_s=0.05)
    watcher = StoredBeforeScoring(run, groups=3)
    config = {
        "max_steps": 1,
        "group_size": 2,
        "prompts_per_step": 3,
        "max_new_tokens": 8,
        "max_turns": 1,
        "eval_tasks": 0,
        "checkpoint_every": 0,
        "environment": {"kind": "arithmetic_calculator", "config": {}},
    }
    result = Trainer(config, sink=sink, rubric=watcher).run()
    assert sink.close(60)
    assert result.status == "SUCCEEDED"
    # While the last group was being scored, the dashboard already held the first two.
    assert watcher.stored_before_last == [0, 1]
    # The live feed's events: one per group, in order, every one before the update began.
    events = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", "summary"))
    feed = [(i, s["groups"]) for i, (kind, s) in enumerate(events) if kind == "trajectories"]
    assert [[g["group"] for g in groups] for _, groups in feed] == [[0], [1], [2]]
    update = next(i for i, (kind, s) in enumerate(events) if kind == "phase" and s.get("phase") == "updating")
    assert all(i < update for i, _ in feed)
    assert Trajectory.objects.filter(run=run, step=1).count() == 6

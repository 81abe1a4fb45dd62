"""The run-level reward-hacking alarm, live (the rule itself: trainers/rubrics/alarms.py, read through
`webapp.rollouts.selectors.runs.run_hacking_alarm`).

The alarm reads the per-step criterion means (`criterion/<name>` metrics), the environment verifier's
accuracy (`accuracy`) and held-out accuracy (`eval/accuracy`), so after an ingested batch that carried
some, the run's open pages are told whether it is on, with the trajectories that show it: a seq-less
`hacking_alarm` message (like the heartbeat; docs/live.md), never stored. A page that connects later reads
the same value from the websocket's snapshot (`webapp.live.selectors.run_snapshot`), and a reload renders
it from there too. A run launched with `stop_on_hacking_alarm` stops itself on the same rule
(`trainers.rubrics.alarms.AlarmWatch` in the trainer: its log says why, and it keeps a checkpoint).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.urls import reverse

from trainers.rubrics.alarms import HELD_OUT, VERIFIER
from webapp.core.broadcast import broadcast_on_commit
from webapp.experiments.models import Run
from webapp.rollouts.selectors.runs import (
    hacking_alarm_examples,
    run_can_raise_hacking_alarm,
    run_hacking_alarm,
)

CRITERION_PREFIX = "criterion/"


def hacking_alarm_state(run: Run) -> dict[str, Any] | None:
    """The alarm as the run page shows it ({first_step, last_step, learned_change, verifiable_change,
    check, message, examples: [{id, url, step, split, reward}]}), None when it is off."""
    alarm = run_hacking_alarm(run)
    if alarm is None:
        return None
    slug = Run.objects.filter(pk=run.pk).values_list("project__slug", flat=True).get()
    examples = [
        {
            "id": trajectory.pk,
            "url": reverse("rollouts:trajectory_detail", args=[slug, trajectory.pk]),
            "step": trajectory.step,
            "split": trajectory.split,
            "reward": trajectory.reward,
        }
        for trajectory in hacking_alarm_examples(run, alarm)
    ]
    return {**alarm.as_dict(), "examples": examples}


def _carries_alarm_inputs(summaries: Iterable[dict[str, Any]]) -> bool:
    return any(
        key.startswith(CRITERION_PREFIX) or key in (VERIFIER, HELD_OUT)
        for summary in summaries
        if summary.get("type") == "metrics"
        for key in summary.get("values") or {}
    )


def announce_hacking_alarm(run: Run, summaries: Iterable[dict[str, Any]]) -> None:
    """After an ingested batch (its stored event summaries): when it carried what the alarm reads and the
    run's rubric has a learned criterion, send the alarm's state to the run's pages."""
    if not _carries_alarm_inputs(summaries) or not run_can_raise_hacking_alarm(run):
        return
    broadcast_on_commit(run, [{"type": "hacking_alarm", "alarm": hacking_alarm_state(run)}])

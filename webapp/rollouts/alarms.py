"""The run-level reward-hacking alarm, live (the rule itself: trainers/rubrics/alarms.py, read through
`webapp.rollouts.selectors.runs.run_hacking_alarm`).

The alarm reads the per-step criterion means (`criterion/<name>` metrics), so after an ingested batch that
carried some, the run's open pages are told whether it is on: a seq-less `hacking_alarm` message (like the
heartbeat; docs/live.md), never stored. A page that connects later reads the same value from the
websocket's snapshot (`webapp.live.selectors.run_snapshot`), and a reload renders it from there too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from webapp.core.broadcast import broadcast_on_commit
from webapp.experiments.models import Run
from webapp.rollouts.selectors.runs import run_can_raise_hacking_alarm, run_hacking_alarm

CRITERION_PREFIX = "criterion/"


def hacking_alarm_state(run: Run) -> dict[str, Any] | None:
    """The alarm as the run page shows it ({first_step, last_step, learned_change, verifiable_change,
    message}), None when it is off."""
    alarm = run_hacking_alarm(run)
    return alarm.as_dict() if alarm is not None else None


def announce_hacking_alarm(run: Run, summaries: Iterable[dict[str, Any]]) -> None:
    """After an ingested batch (its stored event summaries): when it carried criterion means and the run's
    rubric has a learned and a verifiable criterion to compare, send the alarm's state to the run's pages."""
    carried = any(
        key.startswith(CRITERION_PREFIX)
        for summary in summaries
        if summary.get("type") == "metrics"
        for key in summary.get("values") or {}
    )
    if carried and run_can_raise_hacking_alarm(run):
        broadcast_on_commit(run, [{"type": "hacking_alarm", "alarm": hacking_alarm_state(run)}])

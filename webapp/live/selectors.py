"""Reads for the live pages: the websocket snapshot and replay, per-step histograms, compare. Metric
curves come from `webapp.rollouts.selectors.metrics`, the one downsampling."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, F, FloatField, IntegerField, Max, Min, Value
from django.db.models.functions import Cast, Floor, Least

from trainers.registry import environment_kinds
from trainers.types import applied_max_turns
from webapp.experiments.models import Run
from webapp.fleet.selectors import run_queue_state
from webapp.rollouts.alarms import hacking_alarm_state
from webapp.rollouts.models import RunEvent, Trajectory, task_headline, task_hover

# A resuming client gets at most this many missed events over the socket; past it, the snapshot says
# the replay was truncated and the page reloads its curves over HTTP instead.
REPLAY_LIMIT = 5000


# --- websocket snapshot and replay -------------------------------------------------------------------


# The newest phase is looked for among this many of the run's newest events: an older one is stale (and
# a run whose trainer reports no phases is not scanned from its first event at every page load).
PHASE_LOOKBACK = 2000


def run_snapshot(run: Run) -> dict[str, Any]:
    """What the run page shows, as of now: the websocket's first frame, and the page's own first state
    (rendered into it), so a page opened mid-run and one that followed it live agree."""
    return {
        "id": run.pk,
        **run.page_state(),
        "current_step": run.current_step,
        "max_steps": run.max_steps,
        "best_reward": run.best_reward,
        "best_reward_step": run.best_reward_step,
        "last_reward": run.last_reward,
        "last_seq": run.last_seq,
        "phase": latest_phase(run),
        "hacking_alarm": hacking_alarm_state(run),
        # Where a queued run stands (position, runs ahead, workers); `queue` messages keep it true.
        "queue": run_queue_state(run),
    }


def latest_phase(run: Run) -> dict[str, Any] | None:
    """The summary of the run's newest `phase` event (what the trainer is doing), None before the first."""
    return (
        RunEvent.objects.filter(run=run, type="phase", seq__gt=run.last_seq - PHASE_LOOKBACK)
        .order_by("-seq")
        .values_list("summary", flat=True)
        .first()
    )


def events_after(
    run_id: int, after_seq: int, *, limit: int | None = None
) -> tuple[list[dict[str, Any]], bool]:
    """Stored event summaries with seq > after_seq, oldest first; at most the newest `limit` (default
    REPLAY_LIMIT) of them. Returns (summaries, truncated): truncated means older ones were skipped.
    """
    limit = REPLAY_LIMIT if limit is None else limit
    newest = list(
        RunEvent.objects.filter(run_id=run_id, seq__gt=after_seq)
        .order_by("-seq")
        .values_list("summary", flat=True)[: limit + 1]
    )
    truncated = len(newest) > limit
    newest = newest[:limit]
    newest.reverse()
    return newest, truncated


def recent_events(run: Run, kind: str, *, limit: int, until_seq: int | None = None) -> list[dict[str, Any]]:
    """The newest `limit` stored summaries of one type (at or before `until_seq`), oldest first."""
    events = RunEvent.objects.filter(run=run, type=kind)
    if until_seq is not None:
        events = events.filter(seq__lte=until_seq)
    rows = list(events.order_by("-seq").values_list("summary", flat=True)[:limit])
    rows.reverse()
    return rows


# --- per-step histograms ---------------------------------------------------------------------------------

# What a histogram may count, and the trajectory column it reads.
HISTOGRAM_FIELDS = {"reward": "reward", "length": "completion_tokens"}
DEFAULT_BINS = 20
MAX_BINS = 100
MAX_COLUMNS = 200  # step columns; a longer run groups neighbouring steps into one column


@dataclass(frozen=True)
class Bins:
    """Equal-width bins over [lo, lo + count * width); the last bin also takes the top value."""

    lo: float
    width: float
    count: int

    @property
    def edges(self) -> list[float]:
        return [self.lo + i * self.width for i in range(self.count + 1)]

    def bounds(self, index: int) -> tuple[float, float]:
        return self.lo + index * self.width, self.lo + (index + 1) * self.width


def histogram_bins(lo: float, hi: float, *, field: str, bins: int) -> Bins:
    """Bins covering [lo, hi]. Lengths are whole tokens: integer-wide bins, never more than the values."""
    if field == "length":
        width = max(1, math.ceil((hi - lo + 1) / bins))
        return Bins(float(lo), float(width), max(1, math.ceil((hi - lo + 1) / width)))
    if hi <= lo:
        return Bins(float(lo) - 0.5, 1.0, 1)  # every value alike: one bin around it
    return Bins(float(lo), (hi - lo) / bins, bins)


def step_histograms(run: Run, *, field: str, split: str, bins: int = DEFAULT_BINS) -> dict[str, Any]:
    """Per step, how many trajectories fall in each bin of `field` (reward or response length), counted in
    the database: one aggregate for the extent, one grouped count (step column × bin). Runs longer than
    MAX_COLUMNS steps get columns of `stride` neighbouring steps.

    Returns {"field", "split", "edges", "stride", "steps": [first step of each column], "counts": [[per bin]
    per column]} — columns without trajectories are left out.
    """
    column = HISTOGRAM_FIELDS[field]
    bins = max(1, min(MAX_BINS, bins))
    rows = Trajectory.objects.filter(run=run, split=split)
    extent = rows.aggregate(lo=Min(column), hi=Max(column), first=Min("step"), last=Max("step"))
    empty = {"field": field, "split": split, "edges": [], "stride": 1, "steps": [], "counts": []}
    if extent["lo"] is None:
        return empty
    grid = histogram_bins(extent["lo"], extent["hi"], field=field, bins=bins)
    first = extent["first"]
    stride = max(1, math.ceil((extent["last"] - first + 1) / MAX_COLUMNS))
    bin_of = Least(
        Cast(Floor((Cast(F(column), FloatField()) - Value(grid.lo)) / Value(grid.width)), IntegerField()),
        Value(grid.count - 1),
    )
    column_of = Cast(Floor((F("step") - Value(first)) / Value(float(stride))), IntegerField())
    cells = (
        rows.annotate(column=column_of, bin=bin_of).values("column", "bin").annotate(n=Count("id")).order_by()
    )
    columns: dict[int, list[int]] = {}
    for cell in cells:
        columns.setdefault(cell["column"], [0] * grid.count)[cell["bin"]] = cell["n"]
    ordered = sorted(columns)
    return {
        "field": field,
        "split": split,
        "edges": grid.edges,
        "stride": stride,
        "steps": [first + c * stride for c in ordered],
        "counts": [columns[c] for c in ordered],
    }


def bin_trajectories(
    run: Run,
    *,
    field: str,
    split: str,
    step_min: int,
    step_max: int,
    low: float | None,
    high: float | None,
    last_bin: bool = False,
    limit: int = 50,
) -> list[dict[str, Any]]:
    """The trajectories of one histogram cell (steps step_min…step_max, `field` in [low, high), or
    [low, high] for the last bin), best reward first: what a click on the histogram lists in the feed."""
    column = HISTOGRAM_FIELDS[field]
    rows = Trajectory.objects.filter(run=run, split=split, step__gte=step_min, step__lte=step_max)
    if low is not None:
        rows = rows.filter(**{f"{column}__gte": low})
    if high is not None:
        rows = rows.filter(**{f"{column}__{'lte' if last_bin else 'lt'}": high})
    found: list[dict[str, Any]] = list(
        rows.order_by("-reward", "step", "group_index", "sample_index").values(  # type: ignore[arg-type]
            "id",
            "step",
            "split",
            "task_id",
            "prompt",
            "answer",
            "reward",
            "completion_tokens",
            "status",
            group=F("group_index"),
            sample=F("sample_index"),
        )[:limit]
    )
    for row in found:  # the task as the feed names it (task_headline), not its whole prompt
        prompt = row.pop("prompt")
        row["task"], row["task_hover"] = (
            task_headline(prompt, row["task_id"]),
            task_hover(prompt, row["task_id"]),
        )
    return found


# --- compare -----------------------------------------------------------------------------------------

# How many runs the compare page overlays (the runs list lets people pick at most this many).
MAX_COMPARED_RUNS = 8


def flatten_config(config: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists are compared whole (a rubric's criteria list is one knob)."""
    if isinstance(config, dict):
        flat: dict[str, Any] = {}
        for key, value in config.items():
            flat.update(flatten_config(value, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: config}


# What a knob of the config differences is, where its name alone misleads.
KNOB_NOTES = {
    "max_turns": "the run's knob (0: the environment's own)",
    "environment.config.max_turns": "the environment's own",
    "max_turns (applied)": "the smaller of the two: what episodes got",
}


def environment_max_turns(flat: dict[str, Any]) -> int:
    """The environment's own max_turns in a flattened run config: its config's, else its kind's default."""
    if "environment.config.max_turns" in flat:
        return int(flat["environment.config.max_turns"] or 0)
    kind = environment_kinds().get(str(flat.get("environment.kind")))
    default = (
        ((kind.config_schema.get("properties") or {}).get("max_turns") or {}).get("default") if kind else 0
    )
    return int(default or 0)


def config_differences(runs: list[Run]) -> list[dict[str, Any]]:
    """The knobs whose values differ between the runs: [{"knob", "values": [per run, as JSON text]}].

    The environment and rubric are compared by pinned version as well as by content, so two runs of
    "the same" rubric at v1 and v3 show up even when the difference is in a criterion's parameters.
    """
    flats = []
    for run in runs:
        flat = flatten_config(run.resolved_config or {})
        flat["preset"] = run.preset
        flat["queue"] = run.queue
        flat["origin"] = run.origin
        flat["environment.version"] = run.environment_label
        flat["rubric.version"] = run.rubric_label
        flat["parent"] = f"{run.lineage} of #{run.parent_id}" if run.parent_id else None
        # The two max_turns (the run's knob, the environment's own) and the one that applies.
        flat["max_turns (applied)"] = applied_max_turns(
            int(flat.get("max_turns") or 0), environment_max_turns(flat)
        )
        flats.append(flat)
    knobs = sorted(set().union(*flats)) if flats else []
    missing = object()
    differences = []
    for knob in knobs:
        values = [flat.get(knob, missing) for flat in flats]
        encoded = ["—" if v is missing else json.dumps(v, sort_keys=True) for v in values]
        if len(set(encoded)) > 1:
            differences.append({"knob": knob, "values": encoded, "note": KNOB_NOTES.get(knob, "")})
    return differences

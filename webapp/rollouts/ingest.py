"""Run event ingestion: validate a batch, store it in one transaction, broadcast after commit.

Idempotent on (run, seq): a batch posted again (a retry after a lost reply) stores nothing twice.
All-or-nothing: any invalid event rejects the whole batch with field paths, and nothing is written.
The wire format is documented in docs/api.md ("Run event ingestion").
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, models, transaction
from django.utils import timezone

from webapp.experiments.models import Checkpoint, Run, RunStatus
from webapp.experiments.services import run_progress_fields, run_transition
from webapp.live.broadcast import broadcast_run_events_on_commit
from webapp.rollouts.models import MetricPoint, RunEvent, Trajectory, Turn
from webapp.rollouts.search import index_new_trajectories

EVENT_TYPES = ("status", "metrics", "trajectories", "checkpoint", "log", "heartbeat")
TRAINER_STATUSES = (RunStatus.STARTING, RunStatus.RUNNING, RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)
ROLES = ("system", "user", "assistant", "tool")
SPLITS = ("train", "eval")
TRAJECTORY_STATUSES = ("ok", "truncated", "error")
MAX_ITEMS_PER_EVENT = 2000
MAX_TURNS_PER_TRAJECTORY = 2000
MAX_TEXT = 200_000
REWARD_METRIC = "reward/mean"


class BatchInvalid(Exception):
    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("invalid event batch")
        self.errors = errors


@dataclass
class IngestResult:
    accepted: int
    duplicates: int
    last_seq: int
    cancel_requested: bool
    summaries: list[dict[str, Any]] = field(default_factory=list)

    def reply(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "last_seq": self.last_seq,
            "control": {"cancel": self.cancel_requested},
        }


# --- validation ---------------------------------------------------------------------------------------


class _Checker:
    """Collects errors as {path: [messages]} while walking a batch."""

    def __init__(self) -> None:
        self.errors: dict[str, list[str]] = {}

    def fail(self, path: str, message: str) -> None:
        self.errors.setdefault(path, []).append(message)

    def integer(self, obj: dict, key: str, path: str, *, required: bool = True, minimum: int = 0) -> None:
        value = obj.get(key)
        if value is None:
            if required:
                self.fail(f"{path}.{key}", "This field is required.")
            return
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"{path}.{key}", "Must be an integer.")
        elif value < minimum:
            self.fail(f"{path}.{key}", f"Must be ≥ {minimum}.")

    def number(self, obj: dict, key: str, path: str, *, required: bool = True, nullable: bool = False) -> None:
        value = obj.get(key)
        if value is None:
            if required and not (nullable and key in obj):
                self.fail(f"{path}.{key}", "This field is required.")
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.fail(f"{path}.{key}", "Must be a finite number.")

    def string(self, obj: dict, key: str, path: str, *, required: bool = True, max_len: int = MAX_TEXT,
               choices: tuple[str, ...] | None = None) -> None:
        value = obj.get(key)
        if value is None:
            if required:
                self.fail(f"{path}.{key}", "This field is required.")
            return
        if not isinstance(value, str):
            self.fail(f"{path}.{key}", "Must be a string.")
        elif len(value) > max_len:
            self.fail(f"{path}.{key}", f"At most {max_len} characters.")
        elif choices is not None and value not in choices:
            self.fail(f"{path}.{key}", f"Must be one of: {', '.join(choices)}.")

    def int_list(self, obj: dict, key: str, path: str) -> None:
        value = obj.get(key)
        if value is None:
            return
        # type() is exact: JSON integers are ints, and bool (an int subclass) is refused. set(map(…)) runs in C,
        # which matters for token id lists thousands long.
        if not isinstance(value, list) or (value and set(map(type, value)) != {int}):
            self.fail(f"{path}.{key}", "Must be a list of integers.")


def validate_batch(payload: Any) -> list[dict[str, Any]]:
    """Return the batch's events, or raise BatchInvalid with every problem found."""
    check = _Checker()
    if not isinstance(payload, dict) or not isinstance(payload.get("events"), list):
        raise BatchInvalid({"events": ["The body must be a JSON object with a list under 'events'."]})
    events = payload["events"]
    if not events:
        raise BatchInvalid({"events": ["The batch is empty."]})
    seen: set[int] = set()
    for i, event in enumerate(events):
        path = f"events.{i}"
        if not isinstance(event, dict):
            check.fail(path, "Each event must be a JSON object.")
            continue
        check.integer(event, "seq", path, minimum=1)
        seq = event.get("seq")
        if isinstance(seq, int):
            if seq in seen:
                check.fail(f"{path}.seq", f"Sequence number {seq} appears twice in this batch.")
            seen.add(seq)
        check.number(event, "time", path, required=False)
        kind = event.get("type")
        if kind not in EVENT_TYPES:
            check.fail(f"{path}.type", f"Must be one of: {', '.join(EVENT_TYPES)}.")
            continue
        _VALIDATORS[kind](check, event, path)
    if check.errors:
        raise BatchInvalid(check.errors)
    return events


def _validate_status(check: _Checker, event: dict, path: str) -> None:
    check.string(event, "status", path, choices=tuple(TRAINER_STATUSES))
    check.string(event, "message", path, required=False)
    check.string(event, "traceback", path, required=False)


def _validate_metrics(check: _Checker, event: dict, path: str) -> None:
    check.integer(event, "step", path)
    check.integer(event, "tokens", path, required=False)
    values = event.get("values")
    if not isinstance(values, dict) or not values:
        check.fail(f"{path}.values", "Must be a non-empty object of metric name → number.")
        return
    for key, value in values.items():
        if len(key) > 100:
            check.fail(f"{path}.values", f"Metric name {key[:40]!r}… is longer than 100 characters.")
        elif value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
        ):
            check.fail(f"{path}.values.{key}", "Must be a finite number or null.")


def _validate_trajectories(check: _Checker, event: dict, path: str) -> None:
    check.integer(event, "step", path)
    items = event.get("items")
    if not isinstance(items, list) or not items:
        check.fail(f"{path}.items", "Must be a non-empty list of trajectories.")
        return
    if len(items) > MAX_ITEMS_PER_EVENT:
        check.fail(f"{path}.items", f"At most {MAX_ITEMS_PER_EVENT} trajectories per event.")
        return
    for j, item in enumerate(items):
        p = f"{path}.items.{j}"
        if not isinstance(item, dict):
            check.fail(p, "Must be an object.")
            continue
        check.integer(item, "group", p)
        check.integer(item, "sample", p)
        check.string(item, "task_id", p, max_len=200)
        check.integer(item, "seed", p, required=False, minimum=-(2**63))
        check.string(item, "split", p, required=False, choices=SPLITS)
        check.string(item, "prompt", p, required=False)
        check.number(item, "reward", p)
        check.number(item, "advantage", p, required=False, nullable=True)
        check.string(item, "status", p, required=False, choices=TRAJECTORY_STATUSES)
        for key in ("policy_version", "prompt_tokens", "completion_tokens", "rubric_version"):
            check.integer(item, key, p, required=False)
        components = item.get("components", [])
        if not isinstance(components, list):
            check.fail(f"{p}.components", "Must be a list.")
        else:
            for k, component in enumerate(components):
                cp = f"{p}.components.{k}"
                if not isinstance(component, dict):
                    check.fail(cp, "Must be an object.")
                    continue
                check.string(component, "name", cp, max_len=200)
                for key in ("raw", "weight", "weighted"):
                    check.number(component, key, cp)
                check.string(component, "explanation", cp, required=False)
        if item.get("env_state") is not None and not isinstance(item["env_state"], dict):
            check.fail(f"{p}.env_state", "Must be an object or null.")
        turns = item.get("turns")
        if not isinstance(turns, list):
            check.fail(f"{p}.turns", "Must be a list of turns.")
            continue
        if len(turns) > MAX_TURNS_PER_TRAJECTORY:
            check.fail(f"{p}.turns", f"At most {MAX_TURNS_PER_TRAJECTORY} turns.")
            continue
        for k, turn in enumerate(turns):
            tp = f"{p}.turns.{k}"
            if not isinstance(turn, dict):
                check.fail(tp, "Must be an object.")
                continue
            check.string(turn, "role", tp, choices=ROLES)
            check.string(turn, "text", tp, required=False)
            check.string(turn, "tool_name", tp, required=False, max_len=100)
            check.string(turn, "tool_result", tp, required=False)
            check.number(turn, "reward", tp, required=False, nullable=True)
            check.int_list(turn, "token_ids", tp)
            check.int_list(turn, "loss_mask", tp)
            if turn.get("tool_args") is not None and not isinstance(turn["tool_args"], dict):
                check.fail(f"{tp}.tool_args", "Must be an object.")


def _validate_checkpoint(check: _Checker, event: dict, path: str) -> None:
    check.integer(event, "step", path)
    check.string(event, "path", path, max_len=500)
    check.string(event, "kind", path, required=False, choices=("full", "adapter"))
    if event.get("metrics") is not None and not isinstance(event["metrics"], dict):
        check.fail(f"{path}.metrics", "Must be an object.")


def _validate_log(check: _Checker, event: dict, path: str) -> None:
    check.string(event, "level", path, required=False, max_len=20)
    check.string(event, "message", path, max_len=20_000)


def _validate_heartbeat(check: _Checker, event: dict, path: str) -> None:
    return None


_VALIDATORS = {
    "status": _validate_status,
    "metrics": _validate_metrics,
    "trajectories": _validate_trajectories,
    "checkpoint": _validate_checkpoint,
    "log": _validate_log,
    "heartbeat": _validate_heartbeat,
}


# --- storing --------------------------------------------------------------------------------------------


def ingest_batch(*, run: Run, payload: Any) -> IngestResult:
    """Validate and store one batch for `run`. Raises BatchInvalid (nothing written)."""
    events = validate_batch(payload)
    with transaction.atomic():
        # One batch per run at a time: the row lock makes "which seqs are new" race-free, and keeps
        # cancel_requested as read here current until the commit (a cancel waits for the lock).
        locked = (
            Run.objects.select_for_update()
            .only("pk", "project_id", "status", "cancel_requested", "last_seq")
            .get(pk=run.pk)
        )
        seqs = [e["seq"] for e in events]
        # Run.last_seq is the highest stored seq (only this function writes either), so a batch entirely
        # above it — every batch but a retry — needs no look-up.
        if min(seqs) > locked.last_seq:
            stored: set[int] = set()
        else:
            stored = set(RunEvent.objects.filter(run=locked, seq__in=seqs).values_list("seq", flat=True))
        fresh = sorted((e for e in events if e["seq"] not in stored), key=lambda e: e["seq"])
        summaries, progress = _store(locked, fresh)
        last_seq = max(locked.last_seq, fresh[-1]["seq"] if fresh else 0)
        # One UPDATE of the run per batch: sequence, heartbeat and the progress the list pages show.
        Run.objects.filter(pk=locked.pk).update(last_seq=last_seq, heartbeat_at=timezone.now(), **progress)
        broadcast_run_events_on_commit(locked, summaries)
    return IngestResult(len(fresh), len(events) - len(fresh), last_seq, locked.cancel_requested, summaries)


def _insert_rows(model: type[models.Model], field_names: list[str], rows: list[tuple]) -> None:
    """Insert plain rows (values in `field_names` order; JSON fields as JSON text) without building model
    instances: COPY on Postgres — the hot path of ingestion, several times faster than bulk_create —
    and executemany elsewhere (the embedded SQLite)."""
    if not rows:
        return
    columns = [model._meta.get_field(name).column for name in field_names]
    table = connection.ops.quote_name(model._meta.db_table)
    column_list = ", ".join(connection.ops.quote_name(c) for c in columns)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            _copy(cursor, table, column_list, rows)
        else:
            placeholders = ", ".join(["%s"] * len(columns))
            cursor.executemany(f"INSERT INTO {table} ({column_list}) VALUES ({placeholders})", rows)


def _copy(cursor: Any, table: str, column_list: str, rows: list[tuple]) -> None:
    # write_row formats in C (psycopg[binary]); joining the text ourselves measured slower.
    with cursor.cursor.copy(f"COPY {table} ({column_list}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def _insert_objects(objs: list[models.Model]) -> None:
    """bulk_create, and the objects get their ids. On Postgres without the ORM's array-bound INSERT …
    RETURNING (most of a trajectories batch's time when profiled): the ids are drawn from the table's
    sequence in one query and the rows go in by COPY."""
    if not objs:
        return
    model = type(objs[0])
    if connection.vendor != "postgresql":
        model.objects.bulk_create(objs, batch_size=1000)
        return
    meta = model._meta
    fields = list(meta.concrete_fields)
    table = connection.ops.quote_name(meta.db_table)
    column_list = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
            [meta.db_table, meta.pk.column, len(objs)],
        )
        for obj, (pk,) in zip(objs, cursor.fetchall(), strict=True):
            obj.pk = pk
        now = timezone.now()
        for obj in objs:
            for f in fields:
                if getattr(f, "auto_now_add", False) or getattr(f, "auto_now", False):
                    setattr(obj, f.attname, now)
        # Attribute values as COPY takes them (field.get_db_prep_save per value was a third of the time);
        # JSON fields as JSON text.
        json_fields = {f.attname for f in fields if isinstance(f, models.JSONField)}
        rows = [
            tuple(_json(getattr(obj, f.attname)) if f.attname in json_fields else getattr(obj, f.attname) for f in fields)
            for obj in objs
        ]
        _copy(cursor, table, column_list, rows)
    for obj in objs:
        obj._state.adding = False
        obj._state.db = connection.alias


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def _store(run: Run, events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Write the events; returns their summaries and the run's progress fields to update."""
    metric_rows: list[tuple] = []
    event_rows: list[tuple] = []
    now = timezone.now()
    summaries: list[dict[str, Any]] = []
    progress: list[tuple[int, float | None]] = []
    for event in events:
        kind = event["type"]
        summary: dict[str, Any] = {"seq": event["seq"], "type": kind, "time": event.get("time")}
        if kind == "metrics":
            values = {k: float(v) for k, v in event["values"].items() if v is not None}
            step, wall_time, tokens = event["step"], event.get("time"), event.get("tokens")
            metric_rows.extend((run.pk, k, step, v, wall_time, tokens) for k, v in values.items())
            summary.update(step=event["step"], tokens=event.get("tokens"), values=values)
            progress.append((event["step"], values.get(REWARD_METRIC)))
        elif kind == "trajectories":
            summary.update(step=event["step"], groups=_store_trajectories(run, event))
        elif kind == "checkpoint":
            checkpoint, _ = Checkpoint.objects.update_or_create(
                run=run, step=event["step"],
                defaults={"path": event["path"], "kind": event.get("kind", "full"), "metrics": event.get("metrics") or {}},
            )
            summary.update(step=event["step"], id=checkpoint.pk, path=event["path"], metrics=checkpoint.metrics)
        elif kind == "status":
            fields: dict[str, Any] = {}
            if event["status"] == RunStatus.FAILED:
                fields = {"error_message": event.get("message", "")[:5000], "error_traceback": event.get("traceback", "")}
            run_transition(run.pk, event["status"], **fields)
            summary.update(status=event["status"], message=event.get("message", ""))
        elif kind == "log":
            summary.update(level=event.get("level", "info"), message=event["message"])
        event_rows.append((run.pk, event["seq"], kind, _json(summary), now))
        summaries.append(summary)
    _insert_rows(MetricPoint, ["run", "key", "step", "value", "wall_time", "tokens"], metric_rows)
    _insert_rows(RunEvent, ["run", "seq", "type", "summary", "created_at"], event_rows)
    if not progress:
        return summaries, {}
    rewards = [reward for _, reward in progress if reward is not None]
    last_step = max(step for step, _ in progress)
    # The latest step's reward is the run's "last reward" (several metrics events may share a step,
    # not all of them carrying the reward).
    last_reward = next((r for s, r in reversed(progress) if s == last_step and r is not None), None)
    return summaries, run_progress_fields(
        step=last_step, last_reward=last_reward, best_reward=max(rewards) if rewards else None
    )


def _store_trajectories(run: Run, event: dict[str, Any]) -> list[dict[str, Any]]:
    step = event["step"]
    items = event["items"]
    trajectories = [
        Trajectory(
            run=run,
            step=step,
            split=item.get("split", "train"),
            group_index=item["group"],
            sample_index=item["sample"],
            task_id=item["task_id"],
            seed=item.get("seed", 0),
            prompt=item.get("prompt") or _task_prompt(item),
            reward=item["reward"],
            components=item.get("components", []),
            advantage=item.get("advantage"),
            status=item.get("status", "ok"),
            num_turns=len(item["turns"]),
            num_tool_calls=sum(1 for t in item["turns"] if t.get("role") == "assistant" and t.get("tool_name")),
            prompt_tokens=item.get("prompt_tokens", 0),
            completion_tokens=item.get("completion_tokens", 0),
            policy_version=item.get("policy_version", 0),
            env_state=item.get("env_state"),
            rubric_version=item.get("rubric_version"),
        )
        for item in items
    ]
    _insert_objects(trajectories)
    turns = [
        (
            trajectory.pk,
            index,
            turn["role"],
            turn.get("text", ""),
            turn.get("tool_name") or "",
            _json(turn.get("tool_args")),
            turn.get("tool_result") or "",
            turn.get("reward"),
            _json(turn.get("token_ids")),
            _json(turn.get("loss_mask")),
        )
        for trajectory, item in zip(trajectories, items, strict=True)
        for index, turn in enumerate(item["turns"])
    ]
    _insert_rows(Turn, ["trajectory", "index", "role", "text", "tool_name", "tool_args", "tool_result", "reward",
                        "token_ids", "loss_mask"], turns)
    index_new_trajectories(trajectories, items)  # the explorer's full-text documents and criterion scores
    return group_summaries(trajectories, items)


def _task_prompt(item: dict[str, Any]) -> str:
    task = item.get("task")
    return str(task.get("prompt", ""))[:MAX_TEXT] if isinstance(task, dict) else ""


def group_summaries(trajectories: list[Trajectory], items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Compact per-group view for the live feed: mean/std, zero-variance flag, best and worst sample."""
    groups: dict[tuple[str, int], list[tuple[Trajectory, dict]]] = {}
    for trajectory, item in zip(trajectories, items, strict=True):
        groups.setdefault((trajectory.split, trajectory.group_index), []).append((trajectory, item))
    out = []
    for (split, group), members in sorted(groups.items()):
        rewards = [t.reward for t, _ in members]
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
        ranked = sorted(members, key=lambda m: m[0].reward)
        out.append({
            "split": split,
            "group": group,
            "task_id": members[0][0].task_id,
            "size": len(members),
            "mean": mean,
            "std": std,
            "zero_variance": max(rewards) - min(rewards) < 1e-9,
            "best": _sample_summary(*ranked[-1]),
            "worst": _sample_summary(*ranked[0]),
        })
    return out


def _sample_summary(trajectory: Trajectory, item: dict[str, Any]) -> dict[str, Any]:
    final = next((t.get("text", "") for t in reversed(item["turns"]) if t.get("role") == "assistant"), "")
    return {
        "id": trajectory.pk,
        "sample": trajectory.sample_index,
        "reward": trajectory.reward,
        "components": [{"name": c.get("name"), "weighted": c.get("weighted")} for c in trajectory.components],
        "final": final[:280],
    }

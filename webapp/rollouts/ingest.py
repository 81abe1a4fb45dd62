"""Run event ingestion: validate a batch, store it in one transaction, broadcast after commit.

Idempotent on (run, seq): a batch posted again (a retry after a lost reply) stores nothing twice.
All-or-nothing: any invalid event rejects the whole batch with field paths, and nothing is written.
The wire format is documented in docs/api.md ("Run event ingestion").
"""

from __future__ import annotations

import functools
import hmac
import json
import struct
from dataclasses import dataclass, field
from typing import Any

import orjson
import psycopg
from django.db import IntegrityError, connection, models, transaction
from django.utils import timezone

from trainers.learn.algorithms import group_stats
from trainers.sdk import wire, wire_check
from trainers.types import model_turns
from webapp.core.broadcast import broadcast_on_commit
from webapp.experiments.models import Checkpoint, Run, RunStatus
from webapp.experiments.services.transitions import run_transition
from webapp.rollouts.metric_tiles import SUMMARY_COLUMNS, chunk_summary, fold_run
from webapp.rollouts.models import (
    METRIC_CHUNK_POINTS,
    TILE_STEPS,
    MetricChunk,
    RunEvent,
    Trajectory,
    Turn,
    task_headline,
    task_hover,
)
from webapp.rollouts.search import index_new_trajectories

REWARD_METRIC = "reward/mean"
_INTEGRITY_ERRORS = (IntegrityError, psycopg.IntegrityError)
# Turn columns in COPY order, from the wire format: a new turn field needs no change here.
TURN_COLUMNS = ["trajectory", "index", *wire.TURN.columns]
_TURN_FIELDS = list(wire.TURN.columns.values())


class BatchInvalid(Exception):
    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("invalid event batch")
        self.errors = errors


class RunTokenStale(Exception):
    """The run is gone, or its token is no longer the one the batch was authenticated with."""


class BatchConflict(Exception):
    """The batch repeats a trajectory already stored under another sequence number."""


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


# --- validation: the wire format's own checker (trainers/sdk/wire.py) ------------------------------------


def validate_batch(payload: Any) -> list[dict[str, Any]]:
    """Return the batch's events, or raise BatchInvalid with every problem found."""
    errors = wire_check.check_batch(payload)
    if errors:
        raise BatchInvalid(errors)
    return payload["events"]


# --- storing --------------------------------------------------------------------------------------------


def ingest_batch(*, run: Run, payload: Any, token_hash: str | None = None) -> IngestResult:
    """Validate and store one batch for `run`. Raises BatchInvalid (nothing written). With `token_hash`
    (the API's, which may have verified the token from memory), raises RunTokenStale unless the locked
    run still has that token."""
    events = validate_batch(payload)
    try:
        return _ingest(run, events, token_hash)
    except _INTEGRITY_ERRORS as exc:
        # The one constraint a valid batch can break: (run, step, group, sample, split) is unique. COPY
        # raises psycopg's own error, the ORM Django's.
        raise BatchConflict(
            "A trajectory of this batch has the (step, split, group, sample) of one already stored for this run "
            "under another sequence number; nothing was stored."
        ) from exc


# What ingestion reads from the run it locks: the token's hash, the sequence, the cancel request, the
# heartbeat and progress times (whether it is stalled: Run.is_stalled), and what Run.progress_after folds
# new metrics into.
_LOCKED_FIELDS = (
    "id",
    "project_id",
    "status",
    "cancel_requested",
    "last_seq",
    "heartbeat_at",
    "started_at",
    "progress_at",
    "ingest_token_hash",
    "current_step",
    "best_reward",
    "best_reward_step",
    "peak_rss_mb",
    "peak_gpu_mb",
)


@functools.cache
def _lock_sql() -> str:
    meta, quote = Run._meta, connection.ops.quote_name
    columns = ", ".join(quote(meta.get_field(name).column) for name in _LOCKED_FIELDS)
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""  # SQLite locks the file
    return f"SELECT {columns} FROM {quote(meta.db_table)} WHERE {quote(meta.pk.column)} = %s{lock}"


def _lock_run(run_id: int) -> Run | None:
    """The run's row, locked until the transaction ends. A raw query (with the ORM's type conversions):
    the same SELECT … FOR UPDATE built by the queryset API cost ~1 ms more CPU, a tenth of a
    1,000-point batch (docs/api.md, "After the commit")."""
    return next(iter(Run.objects.raw(_lock_sql(), [run_id])), None)


def _ingest(run: Run, events: list[dict[str, Any]], token_hash: str | None) -> IngestResult:
    with transaction.atomic():
        # One batch per run at a time: the row lock makes "which seqs are new" race-free, keeps
        # cancel_requested as read here current until the commit (a cancel waits for the lock), and makes
        # the progress computed from the row below the truth.
        locked = _lock_run(run.pk)
        if locked is None or (
            token_hash is not None and not hmac.compare_digest(locked.ingest_token_hash, token_hash)
        ):
            raise RunTokenStale()
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
        now = timezone.now()
        if any(e["type"] in wire.PROGRESS_EVENTS for e in fresh):
            progress["progress_at"] = now
        peaks = _peak_memory(locked, fresh)
        Run.objects.filter(pk=locked.pk).update(last_seq=last_seq, heartbeat_at=now, **progress, **peaks)
        was_stalled = locked.is_stalled(now)
        before, locked.heartbeat_at = locked.heartbeat_at, now
        locked.progress_at = progress.get("progress_at", locked.progress_at)
        news = _heartbeat_news(before, now, locked, was_stalled)
        if peaks:
            for name, value in peaks.items():
                setattr(locked, name, value)
            news.append({"type": "peak_memory", "peak_memory": locked.peak_memory()})
        broadcast_on_commit(locked, [*summaries, *news])
    return IngestResult(len(fresh), len(events) - len(fresh), last_seq, locked.cancel_requested, summaries)


def _peak_memory(run: Run, events: list[dict[str, Any]]) -> dict[str, int]:
    """The run's peak memory fields that the batch's heartbeats raise (a peak only ever rises)."""
    raised: dict[str, int] = {}
    for name in ("peak_rss_mb", "peak_gpu_mb"):
        values = [e[name] for e in events if e["type"] == "heartbeat" and name in e]
        if values and (getattr(run, name) is None or max(values) > getattr(run, name)):
            raised[name] = max(values)
    return raised


def _heartbeat_news(before: Any, now: Any, run: Run, was_stalled: bool) -> list[dict[str, Any]]:
    """The run page shows the last heartbeat to the second and whether the run is stalled: tell it when
    that second changes or the run stops (or starts) being stalled (a server-side message without a seq,
    never stored; a reconnecting page reads both from the snapshot). A stalled run's trainer still
    heartbeats (its sink sends one every 10 s), so the flag reaches an open page within seconds of the
    run passing RUN_STALL_AFTER_S, and goes away with the batch that brings progress."""
    stall = run.stall(now)
    same_second = before is not None and before.replace(microsecond=0) == now.replace(microsecond=0)
    if same_second and was_stalled == (stall is not None):
        return []
    return [{"type": "heartbeat", "heartbeat_at": now.isoformat(), "stall": stall}]


def _insert_rows(model: type[models.Model], field_names: list[str], rows: list[tuple]) -> None:
    """Insert plain rows (values in `field_names` order; JSON fields as JSON text) without building model
    instances: COPY on Postgres — the hot path of ingestion, several times faster than bulk_create —
    and executemany elsewhere (the embedded SQLite)."""
    if not rows:
        return
    fields = [model._meta.get_field(name) for name in field_names]
    table = connection.ops.quote_name(model._meta.db_table)
    column_list = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            _copy(cursor, table, column_list, rows)
        else:
            placeholders = ", ".join(["%s"] * len(fields))
            cursor.executemany(f"INSERT INTO {table} ({column_list}) VALUES ({placeholders})", rows)


def _copy(
    cursor: Any, table: str, column_list: str, rows: list[tuple], types: list[str] | None = None
) -> None:
    """COPY `rows` into `table`: in the binary format with `types` (Postgres type names, one per
    column; values in binary travel as they are, floats as 8 bytes instead of their repr), else as text
    (JSON columns as JSON text, which only the text format takes as it is). write_row formats in C
    (psycopg[binary]); joining the text ourselves measured slower."""
    binary = " (FORMAT BINARY)" if types else ""
    with cursor.cursor.copy(f"COPY {table} ({column_list}) FROM STDIN{binary}") as copy:
        if types:
            copy.set_types(types)
        for row in rows:
            copy.write_row(row)


def insert_metrics(
    run_id: int,
    logged: list[tuple[int, float | None, int | None, dict[str, float]]],
    *,
    progress_step: int | None = None,
    summaries: bool = True,
) -> None:
    """Store metrics events' values — `(step, wall_time, tokens, {key: value})` per event, in the order
    they arrived — as MetricChunk rows: each metric's points in chunks of up to METRIC_CHUNK_POINTS (the
    one writer of metric points; readers see them through the MetricPoint view), each with its summary.
    The run's tiles are folded (webapp.rollouts.metric_tiles.fold_run) when the batch reaches a later
    block of TILE_STEPS[-1] steps than `progress_step`, the run's highest step before it (ingestion's
    locked row), or always when it is None. The caller holds the run's lock (as ingestion does).
    `summaries=False` writes the chunks alone, as before there were tiles: only for bench/metric_curves.py's
    before-and-after of this path (curves read from tiles miss such chunks)."""
    if not logged:
        return
    chunks: list[tuple] = []  # (key, steps, values, wall times, tokens) per chunk
    keys = list(logged[0][3])
    if all(list(values) == keys for *_, values in logged):
        # Every event logged the same metrics (a trainer's steps do): the steps, times and token counts
        # are one list shared by every metric, and the values are transposed in C.
        steps, wall_times, tokens, value_maps = zip(*logged, strict=True)
        columns = list(zip(*(values.values() for values in value_maps), strict=True))
        for start in range(0, len(steps), METRIC_CHUNK_POINTS):
            part = slice(start, start + METRIC_CHUNK_POINTS)
            common = (steps[part], wall_times[part], tokens[part])
            chunks.extend(
                (key, common[0], column[part], *common[1:]) for key, column in zip(keys, columns, strict=True)
            )
    else:
        by_key: dict[str, list[tuple]] = {}
        for step, wall_time, tokens_seen, values in logged:
            for key, value in values.items():
                by_key.setdefault(key, []).append((step, value, wall_time, tokens_seen))
        for key, points in by_key.items():
            for start in range(0, len(points), METRIC_CHUNK_POINTS):
                chunks.append((key, *zip(*points[start : start + METRIC_CHUNK_POINTS], strict=True)))
    columns_stored = ["run", "key", "size", "min_step", "max_step", "steps", "values", "wall_times", "tokens"]
    postgres = connection.vendor == "postgresql"
    # On Postgres each list in its binary array format, which binary COPY hands to the column's own input
    # function as it is ("bytea" only tells psycopg to pass the bytes through; psycopg's own list dumper
    # cost 4× the client CPU); lists shared by every metric of the batch are encoded once. Elsewhere JSON.
    encoded: dict[int, bytes | str | None] = {}

    def encode(items: tuple, element: tuple[int, str]) -> bytes | str | None:
        if id(items) not in encoded:
            encoded[id(items)] = _pg_array(items, element) if postgres else _json(items)
        return encoded[id(items)]

    rows = [
        (
            run_id,
            key,
            len(steps),
            min(steps),
            max(steps),
            encode(steps, _INT8),
            encode(values, _FLOAT8),
            encode(walls, _FLOAT8),
            encode(tokens_seen, _INT8),
        )
        for key, steps, values, walls, tokens_seen in chunks
    ]
    if summaries:
        summed = [chunk_summary(steps, values) for _, steps, values, *_ in chunks]
        columns_stored.extend(SUMMARY_COLUMNS[3:])
        rows = [(*row, *s.row()[3:]) for row, s in zip(rows, summed, strict=True)]
    if not postgres:
        _insert_rows(MetricChunk, columns_stored, rows)
    else:
        meta = MetricChunk._meta
        fields = [meta.get_field(name) for name in columns_stored]
        column_list = ", ".join(connection.ops.quote_name(f.column) for f in fields)
        types = [f.db_type(connection).split("(")[0] for f in fields]
        types[5:9] = ["bytea"] * 4
        with connection.cursor() as cursor:
            _copy(cursor, connection.ops.quote_name(meta.db_table), column_list, rows, types)
    top = TILE_STEPS[-1]
    if summaries and (progress_step is None or max(row[4] for row in rows) // top > progress_step // top):
        fold_run(run_id)


# Postgres's binary array format: a header (dimensions, has-nulls flag, element type oid, length, lower
# bound), then each element as its byte length and big-endian value (length -1: NULL).
_ARRAY_HEADER = struct.Struct("!iiIii")
_INT8, _FLOAT8 = (20, "q"), (701, "d")
_NULL_ELEMENT = struct.pack("!i", -1)


def _pg_array(items: tuple, element: tuple[int, str]) -> bytes:
    oid, code = element
    if None not in items:
        values = [8] * (2 * len(items))  # each element's length, then its value
        values[1::2] = items
        return _ARRAY_HEADER.pack(1, 0, oid, len(items), 1) + _elements(len(items), code).pack(*values)
    one = _elements(1, code)
    body = b"".join(_NULL_ELEMENT if item is None else one.pack(8, item) for item in items)
    return _ARRAY_HEADER.pack(1, 1, oid, len(items), 1) + body


@functools.lru_cache(maxsize=256)
def _elements(count: int, code: str) -> struct.Struct:
    return struct.Struct("!" + ("i" + code) * count)


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
            tuple(
                _json(getattr(obj, f.attname)) if f.attname in json_fields else getattr(obj, f.attname)
                for f in fields
            )
            for obj in objs
        ]
        _copy(cursor, table, column_list, rows)
    for obj in objs:
        obj._state.adding = False
        obj._state.db = connection.alias


_ENCODE = json.JSONEncoder(separators=(",", ":")).encode  # json.dumps with options builds one per call


def _json(value: Any) -> str | None:
    """JSON text for a JSON column. orjson first: a 1,000-point batch's 40 event summaries took 8 % of
    the server's CPU through Python's encoder (profiled under daphne), ~6× less through orjson; what
    orjson refuses (an integer past 64 bits) goes to Python's encoder."""
    if value is None:
        return None
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # orjson.JSONEncodeError is one
        return _ENCODE(value)


def _store(run: Run, events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Write the events; returns their summaries and the run's progress fields to update."""
    logged_metrics: list[tuple] = []
    event_rows: list[tuple] = []
    run_id = run.pk
    now = timezone.now()
    summaries: list[dict[str, Any]] = []
    progress: list[tuple[int, float | None]] = []
    for event in events:
        kind = event["type"]
        summary: dict[str, Any] = {"seq": event["seq"], "type": kind, "time": event.get("time")}
        if kind == "metrics":
            values = {k: float(v) for k, v in event["values"].items() if v is not None}
            step, wall_time, tokens = event["step"], event.get("time"), event.get("tokens")
            wall_time = None if wall_time is None else float(wall_time)  # the wire allows an integer
            logged_metrics.append((step, wall_time, tokens, values))
            summary.update(step=event["step"], tokens=event.get("tokens"), values=values)
            progress.append((event["step"], values.get(REWARD_METRIC)))
        elif kind == "trajectories":
            summary.update(step=event["step"], groups=_store_trajectories(run, event))
        elif kind == "token_stats":
            summary.update(step=event["step"], turns=_store_token_stats(run, event))
        elif kind == "experience":
            from webapp.recipes.services import experience_store

            summary.update(experience_store(run, event))
        elif kind == "task_pool":
            from webapp.recipes.services import task_pool_store

            summary.update(task_pool_store(run, event))
        elif kind == "checkpoint":
            checkpoint, _ = Checkpoint.objects.update_or_create(
                run=run,
                step=event["step"],
                defaults={
                    "path": event["path"],
                    "kind": event.get("kind", "full"),
                    "metrics": event.get("metrics") or {},
                },
            )
            summary.update(checkpoint.summary())
        elif kind == "status":
            fields: dict[str, Any] = {}
            if event["status"] == RunStatus.FAILED:
                fields = {
                    "error_message": event.get("message", ""),
                    "error_traceback": event.get("traceback") or "",
                }
            # The trainer's status reaches pages as this event (it has a seq), not as a second broadcast.
            # A status report is progress: the stored event's page_state is not stalled (wire.PROGRESS_EVENTS).
            run_transition(run.pk, event["status"], announce=False, progress_at=now, **fields)
            summary.update(Run.objects.get(pk=run.pk).status_event(event.get("message", "")))
        elif kind == "log":
            summary.update(level=event.get("level", "info"), message=event["message"])
        elif kind == "phase":
            # Not a metric: the page shows the newest phase (the snapshot carries it to a page opened mid-phase).
            summary.update((name, event[name]) for name in wire.EVENTS["phase"].names if name in event)
        event_rows.append((run_id, event["seq"], kind, _json(summary), now))
        summaries.append(summary)
    insert_metrics(run_id, logged_metrics, progress_step=run.current_step)
    _insert_rows(RunEvent, ["run", "seq", "type", "summary", "created_at"], event_rows)
    if not progress:
        return summaries, {}
    rewarded = [(reward, step) for step, reward in progress if reward is not None]
    last_step = max(step for step, _ in progress)
    # The latest step's reward is the run's "last reward" (several metrics events may share a step,
    # not all of them carrying the reward).
    last_reward = next((r for s, r in reversed(progress) if s == last_step and r is not None), None)
    # The batch's best, the earliest step reaching it.
    best = max(rewarded, key=lambda pair: (pair[0], -pair[1])) if rewarded else None
    return summaries, run.progress_after(
        step=last_step,
        last_reward=last_reward,
        best_reward=best[0] if best else None,
        best_step=best[1] if best else None,
    )


_PACKED_WIDTH = {"halves": 2, "octets": 1}


def _store_token_stats(run: Run, event: dict[str, Any]) -> int:
    """Add statistics to turns already stored (a `token_stats` event): each item's quantities join the
    turn's `token_stats`, replacing one of the same name. A turn that is not stored, or a quantity without
    one entry per token id of the turn, refuses the whole batch. Returns how many turns changed."""
    step, items = event["step"], event["items"]
    keys = {(item.get("split", "train"), item["group"], item["sample"]) for item in items}
    trajectory_ids = {
        (split, group, sample): pk
        for pk, split, group, sample in Trajectory.objects.filter(
            run=run,
            step=step,
            split__in={k[0] for k in keys},
            group_index__in={k[1] for k in keys},
            sample_index__in={k[2] for k in keys},
        ).values_list("id", "split", "group_index", "sample_index")
    }
    turns = {
        (turn.trajectory_id, turn.index): turn
        for turn in Turn.objects.filter(
            trajectory_id__in=trajectory_ids.values(), index__in={item["turn"] for item in items}
        ).only("id", "trajectory_id", "index", "token_ids", "token_stats")
    }
    changed: dict[int, Turn] = {}
    for position, item in enumerate(items):
        path = f"token_stats.items.{position}"
        trajectory_id = trajectory_ids.get((item.get("split", "train"), item["group"], item["sample"]))
        turn = turns.get((trajectory_id, item["turn"])) if trajectory_id is not None else None
        if turn is None:
            raise BatchInvalid(
                {
                    path: [
                        f"Step {step} has no stored turn {item['turn']} of group {item['group']} sample {item['sample']}."
                    ]
                }
            )
        length = len(turn.token_ids or [])
        for name, packed in item["stats"].items():
            count = wire.packed_length(packed, _PACKED_WIDTH[wire.TOKEN_STATS[name].type])
            if count != length:
                raise BatchInvalid(
                    {
                        f"{path}.stats.{name}": [
                            f"Must have one entry per token id of the turn ({length}), not {count}."
                        ]
                    }
                )
        turn.token_stats = {**(turn.token_stats or {}), **item["stats"]}
        changed[turn.pk] = turn
    Turn.objects.bulk_update(list(changed.values()), ["token_stats"])
    return len(changed)


def _store_trajectories(run: Run, event: dict[str, Any]) -> list[dict[str, Any]]:
    step = event["step"]
    items = event["items"]
    trajectories = [
        Trajectory(
            run=run,
            step=step,
            num_turns=model_turns(item["turns"]),  # the model's responses, as max_turns counts
            num_tool_calls=sum(
                1 for t in item["turns"] if t.get("role") == "assistant" and t.get("tool_name")
            ),
            **wire.TRAJECTORY.stored_values(item),
        )
        for item in items
    ]
    _insert_objects(trajectories)
    turns = [
        (trajectory.pk, index, *_turn_row(turn))
        for trajectory, item in zip(trajectories, items, strict=True)
        for index, turn in enumerate(item["turns"])
    ]
    _insert_rows(Turn, TURN_COLUMNS, turns)
    index_new_trajectories(trajectories, items)  # the explorer's full-text documents and criterion scores
    return group_summaries(trajectories, items)


def _turn_row(turn: dict[str, Any]) -> tuple:
    """A turn's column values (JSON fields as JSON text, as COPY and executemany take them)."""
    row = []
    for f in _TURN_FIELDS:
        value = turn.get(f.name, f.default)
        row.append(_json(value) if f.type in ("object", "integers", "record") else value)
    return tuple(row)


def group_summaries(trajectories: list[Trajectory], items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Compact per-group view for the live feed: the group's statistics, best and worst sample."""
    groups: dict[tuple[str, int], list[tuple[Trajectory, dict]]] = {}
    for trajectory, item in zip(trajectories, items, strict=True):
        groups.setdefault((trajectory.split, trajectory.group_index), []).append((trajectory, item))
    out = []
    for (split, group), members in sorted(groups.items()):
        ranked = sorted(members, key=lambda m: m[0].reward)
        flags = [flag for t, _ in members if (flag := t.hacking_flag()) is not None]
        out.append(
            {
                "split": split,
                "group": group,
                "task_id": members[0][0].task_id,
                # The task as the feed names it (webapp.rollouts.models.task_headline) and its answer.
                "task": task_headline(members[0][0].prompt, members[0][0].task_id),
                "task_hover": task_hover(members[0][0].prompt, members[0][0].task_id),
                "answer": members[0][0].answer,
                **group_stats([t.reward for t, _ in members], split).to_dict(),
                "best": _sample_summary(*ranked[-1]),
                "worst": _sample_summary(*ranked[0]),
                "hacking": {"count": len(flags), "message": flags[0].message} if flags else None,
                # Samples branched off others (rollout_strategy branching): the feed links to the tree.
                "branches": sum(1 for t, _ in members if t.branch),
            }
        )
    return out


def _sample_summary(trajectory: Trajectory, item: dict[str, Any]) -> dict[str, Any]:
    final = next((t.get("text", "") for t in reversed(item["turns"]) if t.get("role") == "assistant"), "")
    return {
        "id": trajectory.pk,
        "sample": trajectory.sample_index,
        "reward": trajectory.reward,
        "components": [{"name": c.get("name"), "weighted": c.get("weighted")} for c in trajectory.components],
        "final": final[:280],
        "hacking": flag.message if (flag := trajectory.hacking_flag()) is not None else None,
    }

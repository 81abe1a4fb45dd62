"""The stored downsampled tiers of metric curves: each chunk's summary, and tiles folded from them.

A chunk's summary (its point count, step range, lowest and highest point — ties: the lowest step — and
its values at its first and last step) is written with the chunk, in the ingesting transaction. Tiles
(webapp.rollouts.models.MetricTile) fold the summaries of the chunks whose lowest step falls in one block
of TILE_STEPS[level] steps. Folding is associative, so new chunks are merged into their tiles as they are
(`fold_run`: every chunk past MetricFold.through, called by insert_metrics under the run's lock once the
run reaches a new top-level block) and deleted chunks' tiles are folded again from the folded chunks left
(`refold_tiles`, called by MetricChunkQuerySet.delete). `Summary.then` is the one rule of how two
summaries combine. Reads (selectors.metrics) take tiles, plus the chunks not folded yet by their summaries.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import neg
from typing import NamedTuple

from django.db import connection
from django.db.models import Q, QuerySet

from webapp.rollouts.models import TILE_STEPS, MetricChunk, MetricFold, MetricTile

# The summary columns, the same names on MetricChunk and MetricTile, in Summary's field order.
SUMMARY_COLUMNS = (
    "size",
    "min_step",
    "max_step",
    "value_min",
    "value_min_step",
    "value_max",
    "value_max_step",
    "value_first",
    "value_last",
)
_TOP = len(TILE_STEPS) - 1


class Summary(NamedTuple):
    """Points of one curve summed up: how many, their step range, the lowest and the highest point (value
    and step) and the values at the first and last step (in arrival order among equal steps)."""

    size: int
    min_step: int
    max_step: int
    low: float
    low_step: int
    high: float
    high_step: int
    first: float
    last: float

    def then(self, later: Summary) -> Summary:
        """These points and `later`'s (stored after them) as one summary. Ties keep the rule of a point
        read: the lowest and highest value at their lowest step; the first step's value as it arrived
        first, the last step's as it arrived last."""
        low = (later.low, later.low_step) < (self.low, self.low_step)
        high = (-later.high, later.high_step) < (-self.high, self.high_step)
        return Summary(
            self.size + later.size,
            min(self.min_step, later.min_step),
            max(self.max_step, later.max_step),
            later.low if low else self.low,
            later.low_step if low else self.low_step,
            later.high if high else self.high,
            later.high_step if high else self.high_step,
            later.first if later.min_step < self.min_step else self.first,
            later.last if later.max_step >= self.max_step else self.last,
        )

    def row(self) -> tuple:
        """The values of SUMMARY_COLUMNS, in that order."""
        return tuple(self)

    def inside(self, start: int, end: int) -> bool:
        return start <= self.min_step and self.max_step <= end


def chunk_summary(steps: Sequence[int], values: Sequence[float]) -> Summary:
    """The summary of one chunk's points (parallel lists, in arrival order; at least one point)."""
    low, low_step = min(zip(values, steps, strict=True))
    high, high_step = min(zip(map(neg, values), steps, strict=True))
    first_step, last_step = min(steps), max(steps)
    first = values[list(steps).index(first_step)]
    last = values[len(steps) - 1 - list(reversed(steps)).index(last_step)]
    return Summary(len(steps), first_step, last_step, low, low_step, -high, high_step, first, last)


def point_summary(step: int, value: float) -> Summary:
    return Summary(1, step, step, value, step, value, step, value, value)


def row_summary(row: Sequence) -> Summary:
    """A Summary from SUMMARY_COLUMNS' values, in that order."""
    return Summary(*row)


def tile_blocks(min_step: int) -> list[tuple[int, int]]:
    """(level, block) of each tile a chunk whose lowest step is `min_step` belongs to."""
    return [(level, min_step // width) for level, width in enumerate(TILE_STEPS)]


def fold_into_tiles(run_id: int, chunks: Iterable[tuple[str, Summary]]) -> None:
    """Merge newly stored chunks (key and summary, in the order they were stored) into their tiles. The
    caller holds the run's row lock (ingestion does), so no other writer merges into them meanwhile."""
    new: dict[tuple[str, int, int], Summary] = {}
    for key, summary in chunks:
        for level, block in tile_blocks(summary.min_step):
            at = (key, level, block)
            new[at] = new[at].then(summary) if at in new else summary
    if not new:
        return
    stored = _stored_tiles(run_id, set(new))
    _upsert_tiles(run_id, {at: stored[at].then(s) if at in stored else s for at, s in new.items()})


def _stored_tiles(run_id: int, wanted: set[tuple[str, int, int]]) -> dict[tuple[str, int, int], Summary]:
    """The tiles at `wanted` (key, level, block) that exist. On Postgres by one query whose (key, level,
    block) list travels as three arrays: the same as ORM filters cost ~10 ms of client time a batch (a
    query of hundreds of placeholders, split and quoted by psycopg)."""
    columns = ", ".join(connection.ops.quote_name(c) for c in SUMMARY_COLUMNS)
    if connection.vendor == "postgresql":
        keys, levels, blocks = (list(column) for column in zip(*wanted, strict=True))
        sql = (
            f"SELECT key, level, block, {columns} FROM {MetricTile._meta.db_table} WHERE run_id = %s "
            "AND (key, level, block) IN (SELECT * FROM unnest(%s::varchar[], %s::smallint[], %s::integer[]))"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [run_id, keys, levels, blocks])
            rows = cursor.fetchall()
    else:
        near = MetricTile.objects.filter(
            run_id=run_id,
            key__in={key for key, _, _ in wanted},
            block__lte=max(block for _, _, block in wanted),
            block__gte=min(block for _, _, block in wanted),
        )
        rows = list(near.values_list("key", "level", "block", *SUMMARY_COLUMNS))
    found = {(key, level, block): row_summary(rest) for key, level, block, *rest in rows}
    return {at: s for at, s in found.items() if at in wanted}


# The Postgres types of MetricTile's columns in _TILE_FIELDS' order, for the arrays an upsert sends.
_TILE_FIELDS = ("run", "key", "level", "block", *SUMMARY_COLUMNS)
_TILE_TYPES = (
    "bigint",
    "varchar",
    "smallint",
    "integer",
    "integer",
    "integer",
    "integer",
    "double precision",
    "integer",
    "double precision",
    "integer",
    "double precision",
    "double precision",
)


def _upsert_tiles(run_id: int, tiles: dict[tuple[str, int, int], Summary]) -> None:
    """Write the tiles as they now are, in one INSERT … ON CONFLICT UPDATE: on Postgres its rows as one
    array per column (unnest), elsewhere a row at a time (executemany)."""
    meta, quote = MetricTile._meta, connection.ops.quote_name
    columns = ["run_id", *_TILE_FIELDS[1:]]  # the columns are the fields' names
    conflict = ", ".join(quote(c) for c in columns[:4])
    updates = ", ".join(f"{quote(c)} = EXCLUDED.{quote(c)}" for c in columns[4:])
    into = f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(c) for c in columns)})"
    rows = [(run_id, key, level, block, *s.row()) for (key, level, block), s in tiles.items()]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            arrays = ", ".join(f"%s::{kind}[]" for kind in _TILE_TYPES)
            cursor.execute(
                f"{into} SELECT * FROM unnest({arrays}) ON CONFLICT ({conflict}) DO UPDATE SET {updates}",
                [list(column) for column in zip(*rows, strict=True)],
            )
        else:
            values = ", ".join(["%s"] * len(columns))
            cursor.executemany(
                f"{into} VALUES ({values}) ON CONFLICT ({conflict}) DO UPDATE SET {updates}", rows
            )


def folded_through(run_id: int) -> int:
    """The highest chunk id of the run that is in its tiles (0: none)."""
    return MetricFold.objects.filter(run_id=run_id).values_list("through", flat=True).first() or 0


def unfolded_chunks(run_id: int, through: int | None = None) -> QuerySet[MetricChunk]:
    """The run's chunks not in its tiles yet: ids after `through` (default: `folded_through`), and no later
    than the run's last chunk. Both bounds, because with only the lower one Postgres walks the primary key from there to the
    end of the table and filters by run — its estimate of the run's share of the rows makes that look
    cheaper than the (run_id, id) index — so an old run's curves read every chunk stored since it ended
    (a tenth of a team's year: 80k rows, 104 ms of the long run's curves; 2.8 ms bounded). The last id
    comes from that index, ordered by (run_id, id) as it is: the same trap awaits `ORDER BY id DESC`."""
    last = (
        MetricChunk.objects.filter(run_id=run_id)
        .order_by("-run_id", "-id")
        .values_list("id", flat=True)
        .first()
    )
    if last is None:
        return MetricChunk.objects.none()
    after = folded_through(run_id) if through is None else through
    return MetricChunk.objects.filter(run_id=run_id, id__gt=after, id__lte=last)


def fold_run(run_id: int) -> None:
    """Merge the run's chunks stored since its last fold into their tiles. The caller holds the run's row
    lock (ingestion does), so no chunk of the run is being stored meanwhile."""
    chunks = unfolded_chunks(run_id).order_by("id")
    rows = list(chunks.values_list("id", "key"))
    if not rows:
        return
    summaries = stored_summaries(chunks.filter(id__lte=rows[-1][0]))
    fold_into_tiles(run_id, [(key, s) for (_, key), s in zip(rows, summaries, strict=True)])
    MetricFold.objects.update_or_create(run_id=run_id, defaults={"through": rows[-1][0]})


def refold_tiles(touched: Iterable[tuple[int, str, int]]) -> None:
    """Fold again, from the folded chunks stored now, every tile a chunk (run id, key, lowest step) was
    part of: after chunks were deleted."""
    tops: dict[tuple[int, str], set[int]] = {}
    for run_id, key, min_step in touched:
        tops.setdefault((run_id, key), set()).add(min_step // TILE_STEPS[_TOP])
    for (run_id, key), blocks in tops.items():
        in_blocks = _step_ranges(sorted(blocks))
        by_level: Q = Q()
        for level, width in enumerate(TILE_STEPS):
            for lo, hi in in_blocks:
                by_level |= Q(level=level, block__gte=lo // width, block__lte=hi // width)
        MetricTile.objects.filter(by_level, run_id=run_id, key=key).delete()
        chunks = MetricChunk.objects.filter(
            _any_range("min_step", in_blocks), run_id=run_id, key=key, id__lte=folded_through(run_id)
        ).order_by("id")
        fold_into_tiles(run_id, ((key, s) for s in stored_summaries(chunks)))


def _step_ranges(top_blocks: list[int]) -> list[tuple[int, int]]:
    """The step ranges of a sorted list of top-level blocks, neighbours joined."""
    width = TILE_STEPS[_TOP]
    ranges: list[tuple[int, int]] = []
    for block in top_blocks:
        lo, hi = block * width, (block + 1) * width - 1
        if ranges and ranges[-1][1] + 1 == lo:
            ranges[-1] = (ranges[-1][0], hi)
        else:
            ranges.append((lo, hi))
    return ranges


def _any_range(field: str, ranges: list[tuple[int, int]]) -> Q:
    where = Q()
    for lo, hi in ranges:
        where |= Q(**{f"{field}__gte": lo, f"{field}__lte": hi})
    return where


def stored_summaries(chunks) -> list[Summary]:
    """The summaries of a chunk queryset's rows, in its order; a chunk stored without one (before the
    migration that added them, or by the bench's `summaries=False`) is summed up from its lists."""
    rows = list(chunks.values_list("id", *SUMMARY_COLUMNS))
    missing = [row[0] for row in rows if row[4] is None]
    lists = (
        dict(
            (pk, chunk_summary(steps, values))
            for pk, steps, values in MetricChunk.objects.filter(pk__in=missing).values_list(
                "id", "steps", "values"
            )
        )
        if missing
        else {}
    )
    return [lists[row[0]] if row[4] is None else row_summary(row[1:]) for row in rows]


def backfill(batch: int = 2000) -> None:
    """Write the summary of every chunk stored without one, then fold every run's tiles from its chunks
    (what migration 0023 runs on a database of the release before tiles)."""
    after = 0  # keyset pages: a page is never read past the rows already summed up
    with connection.cursor() as cursor:
        while True:
            todo = list(
                MetricChunk.objects.filter(id__gt=after, value_min__isnull=True)
                .order_by("id")
                .values_list("id", "steps", "values")[:batch]
            )
            if not todo:
                break
            after = todo[-1][0]
            table, quote = connection.ops.quote_name(MetricChunk._meta.db_table), connection.ops.quote_name
            sets = ", ".join(f"{quote(c)} = %s" for c in SUMMARY_COLUMNS[3:])
            cursor.executemany(
                f"UPDATE {table} SET {sets} WHERE id = %s",
                [(*chunk_summary(steps, values).row()[3:], pk) for pk, steps, values in todo],
            )
    for run_id in MetricChunk.objects.values_list("run_id", flat=True).distinct().order_by("run_id"):
        fold_run(run_id)

"""A run's metric curves: the one downsampling every page, feed and API reads them through.

A curve longer than `max_points` is cut into `max_points // 2` equal ranges of its x-axis, and each range
contributes its lowest and its highest point (at their real x positions). That keeps spikes and dips —
what people look for in a reward or KL curve — where an average would smooth them away, and it returns at
most `max_points` rows however long the run.

On Postgres the database downsamples (one hash-aggregate over the unnested arrays). Elsewhere — the
embedded SQLite — the view reads a chunk's n-th value by walking its JSON text, which made a 100k-point
curve take 1–2 s; there a long curve's chunks are read as they are stored (one query, the lists decoded
once) and downsampled here in one pass, by the same rule (`_downsample_chunks`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from django.db import connection
from django.db.models import F, FloatField, Q, QuerySet, Value, Window
from django.db.models.aggregates import Count, Max, Min, Sum
from django.db.models.functions import Cast, Floor, Least, RowNumber

from webapp.experiments.models import Run
from webapp.rollouts.metric_tiles import (
    SUMMARY_COLUMNS,
    Summary,
    folded_through,
    point_summary,
    row_summary,
    unfolded_chunks,
)
from webapp.rollouts.models import TILE_STEPS, MetricChunk, MetricPoint, MetricTile

X_AXES = {"step": "step", "time": "wall_time", "tokens": "tokens"}
DEFAULT_MAX_POINTS = 2000
MIN_MAX_POINTS = 10
MAX_MAX_POINTS = 20_000


@dataclass(frozen=True)
class Series:
    x: list[float]
    y: list[float]
    total: int  # points stored for this key
    downsampled: bool

    def as_json(self) -> dict[str, Any]:
        return {"x": self.x, "y": self.y, "total": self.total, "downsampled": self.downsampled}


def metric_keys(run: Run) -> list[str]:
    """Every metric name the run has reported, sorted: the keys of its top-level tiles and of its chunks
    not folded yet (every folded chunk is in a tile), not a scan of every chunk."""
    tiled = MetricTile.objects.filter(run=run, level=len(TILE_STEPS) - 1).values_list("key", flat=True)
    fresh = unfolded_chunks(run.pk).values_list("key", flat=True)
    return sorted(set(tiled.distinct().order_by()) | set(fresh.distinct().order_by()))


def expand_keys(requested: list[str], available: list[str]) -> list[str]:
    """Resolve a request like ["reward/mean", "criterion/*"] against the run's keys, keeping order.

    A trailing `*` is a prefix match; an exact name is kept even when the run has not reported it yet
    (the page draws an empty chart that fills in live).
    """
    out: list[str] = []
    for name in requested:
        if name.endswith("*"):
            out.extend(key for key in available if key.startswith(name[:-1]) and key not in out)
        elif name not in out:
            out.append(name)
    return out


def metric_series(
    run: Run,
    keys: list[str],
    *,
    max_points: int = DEFAULT_MAX_POINTS,
    x: str = "step",
    start: int | None = None,
    end: int | None = None,
    tiles: bool = True,
) -> dict[str, Series]:
    """Per metric key, its curve against `x` ("step", "time" or "tokens"), at most `max_points` points,
    of the points whose step is in [start, end] (both inclusive, either open when None).

    Points without a value for the chosen x (no wall time or token count reported) are left out. Against
    steps a long curve is read from its stored tiers (`_tiered_series`); `tiles=False` reads every point
    (the path before tiles, kept for bench/metric_curves.py's before-and-after).
    """
    if x not in X_AXES:
        raise ValueError(f"x must be one of {', '.join(X_AXES)}")
    if start is not None and end is not None and start > end:
        raise ValueError("start must not be after end")
    max_points = max(MIN_MAX_POINTS, min(MAX_MAX_POINTS, int(max_points)))
    x_field = X_AXES[x]
    if tiles and x_field == "step":
        return _tiered_series(run.pk, keys, max_points, _Range.of(start, end))
    if start is not None or end is not None:
        steps = _Range.of(start, end)
        return {key: _downsample_chunks(run.pk, key, x_field, max_points, steps) for key in keys}
    out: dict[str, Series] = {}
    # Each curve's size and step range from its chunks, without unnesting a point: one query for all.
    chunks = (
        MetricChunk.objects.filter(run=run, key__in=keys)
        .values("key")
        .annotate(total=Sum("size"), lo=Min("min_step"), hi=Max("max_step"))
        .order_by()
    )
    extents = {c["key"]: (c["total"], c["lo"], c["hi"]) for c in chunks}
    for key in keys:
        rows = MetricPoint.objects.filter(run=run, key=key, **{f"{x_field}__isnull": False})
        total, lo, hi = extents.get(key, (0, None, None))
        if total > max_points and connection.vendor != "postgresql":
            out[key] = _downsample_chunks(run.pk, key, x_field, max_points)
            continue
        if total > max_points and x_field != "step":
            # A point may lack a wall time or token count: count those that have one, and their range.
            stats = rows.aggregate(total=Count("id"), lo=Min(x_field), hi=Max(x_field))
            total, lo, hi = stats["total"], stats["lo"], stats["hi"]
        if total <= max_points:
            # Most curves are short: read them whole.
            points = list(rows.order_by("step", "id").values_list(x_field, "value"))
            points.sort(key=lambda p: p[0])  # stable: points at the same x keep their step order
            out[key] = Series([p[0] for p in points], [p[1] for p in points], len(points), False)
            continue
        pairs = _downsample(_Curve(run.pk, key, x_field, lo, hi), max_points)
        out[key] = Series([p[0] for p in pairs], [p[1] for p in pairs], total, True)
    return out


def _downsample_chunks(
    run_id: int, key: str, x_field: str, max_points: int, steps: _Range | None = None
) -> Series:
    """The curve (its points in `steps`, when given) read from its chunks as stored, whole when no more
    than `max_points` points have an x, else by `_envelope`'s rule with the first and last point in step
    order (the embedded SQLite's path: its view walks JSON text to unnest a chunk)."""
    column = {"step": "steps", "wall_time": "wall_times", "tokens": "tokens"}[x_field]
    fields = ("id", "steps", "values") if column == "steps" else ("id", "steps", "values", column)
    chunks = MetricChunk.objects.filter(run_id=run_id, key=key)
    if steps is not None:
        chunks = chunks.filter(min_step__lte=steps.end, max_step__gte=steps.start)
    xs: list[float] = []
    ys: list[float] = []
    order: list[tuple[int, int, int]] = []  # (step, chunk id, position): the view's (step, id) order
    for chunk_id, chunk_steps, values, *rest in chunks.values_list(*fields):
        x_values = rest[0] if rest else chunk_steps
        for position, (step, x, y) in enumerate(zip(chunk_steps, x_values, values, strict=True)):
            if x is not None and (steps is None or steps.start <= step <= steps.end):
                xs.append(x)
                ys.append(y)
                order.append((step, chunk_id, position))
    total = len(xs)
    ranked = sorted(range(total), key=order.__getitem__)
    if total <= max_points:
        points = sorted(((xs[i], ys[i]) for i in ranked), key=lambda p: p[0])  # stable: (step, id) order
        return Series([p[0] for p in points], [p[1] for p in points], total, False)
    first, last = ranked[0], ranked[-1]
    candidates = (np.array(xs), np.array(ys, dtype=np.float64))
    kept_x, kept_y = _envelope(
        candidates, candidates, (xs[first], ys[first]), (xs[last], ys[last]), (min(xs), max(xs)), max_points
    )
    return Series(kept_x, kept_y, total, True)


def _envelope(
    lows: tuple[np.ndarray, np.ndarray],
    highs: tuple[np.ndarray, np.ndarray],
    first: tuple[float, float],
    last: tuple[float, float],
    extent: tuple[float, float],
    max_points: int,
) -> tuple[list, list]:
    """The one downsampling rule over (x, y) candidates (`lows` and `highs`: arrays of x and of y): the
    curve's `first` and `last` point plus, in each of (max_points - 2) // 2 equal ranges of `extent`, the
    lowest of `lows` and the highest of `highs` falling in it (ties: the lowest x); ordered by x (among
    equal x: first, then by range, its lowest before its highest, then last), each (x, y) once at its
    first place. Points are their own low and high; a tile or chunk offers its lowest and its highest
    point. Returns the kept x and y as lists."""
    buckets = (max_points - 2) // 2
    lo, hi = extent
    scale, top = buckets / (float(hi - lo) or 1.0), buckets - 1
    low_x, low_y = lows
    high_x, high_y = highs
    low_b = np.minimum(((low_x - lo) * scale).astype(np.int64), top)  # x - lo >= 0: truncation is floor
    high_b = np.minimum(((high_x - lo) * scale).astype(np.int64), top)
    # Each range's lowest (then lowest x) and highest (then lowest x): the first of its run once sorted.
    low_at = _first_of_each(low_b, np.lexsort((low_x, low_y, low_b)))
    high_at = _first_of_each(high_b, np.lexsort((high_x, -high_y, high_b)))
    kind = np.result_type(low_x, high_x)
    xs = np.concatenate(([first[0]], low_x[low_at], high_x[high_at], [last[0]])).astype(kind)
    ys = np.concatenate(([first[1]], low_y[low_at], high_y[high_at], [last[1]])).astype(np.float64)
    places = np.concatenate(([-1], 2 * low_b[low_at], 2 * high_b[high_at] + 1, [2 * buckets]))
    # Each (x, y) once, at its first place; then by x, and by place among equal x.
    by_point = np.lexsort((places, ys, xs))
    repeated = (xs[by_point][1:] == xs[by_point][:-1]) & (ys[by_point][1:] == ys[by_point][:-1])
    kept = by_point[np.concatenate(([True], ~repeated))]
    kept = kept[np.lexsort((places[kept], xs[kept]))]
    return xs[kept].tolist(), ys[kept].tolist()


def _first_of_each(groups: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The first index in `order` of each run of equal `groups` values (`order` sorts by group first)."""
    if not len(order):
        return order
    sorted_groups = groups[order]
    return order[np.concatenate(([True], sorted_groups[1:] != sorted_groups[:-1]))]


@dataclass(frozen=True)
class _Curve:
    """One run's one metric against one x column, with that column's extent."""

    run_id: int
    key: str
    x_field: str
    lo: float
    hi: float

    def rows(self) -> QuerySet[MetricPoint]:
        return MetricPoint.objects.filter(
            run_id=self.run_id, key=self.key, **{f"{self.x_field}__isnull": False}
        )

    def scale(self, buckets: int) -> float:
        """Multiplier that maps x - lo onto [0, buckets]."""
        return buckets / (float(self.hi - self.lo) or 1.0)

    def raw_sql(self, select: str, buckets: int, bucket_of: str) -> tuple[str, list[Any]]:
        """`SELECT {select} … GROUP BY bucket` over this curve; `bucket_of` is the vendor's expression
        for bucket(x) with placeholders for lo, scale and the last bucket."""
        x = connection.ops.quote_name(self.x_field)
        sql = (
            f"SELECT {select.format(x=x)} FROM {MetricPoint._meta.db_table} "
            f"WHERE run_id = %s AND key = %s AND {x} IS NOT NULL GROUP BY {bucket_of.format(x=x)}"
        )
        return sql, [self.run_id, self.key, float(self.lo), self.scale(buckets), buckets - 1]


def _downsample(curve: _Curve, max_points: int) -> list[tuple[float, float]]:
    """The curve's first and last reported point plus the lowest and highest point of each of
    (max_points - 2) // 2 equal x-ranges, ordered by x: at most max_points points."""
    rows = curve.rows().values_list(curve.x_field, "value")
    first, last = rows.order_by("step", "id"), rows.order_by("-step", "-id")
    if curve.x_field == "step":
        # Against steps the curve's first point is at its lowest step (curve.lo), so in a chunk whose
        # lowest step that is, and the last likewise: only those chunks are unnested. (Against wall time
        # or tokens the first point with one may sit in any chunk.)
        first, last = first.filter(chunk_min_step=int(curve.lo)), last.filter(chunk_max_step=int(curve.hi))
    ends = [first.first(), last.first()]
    buckets = (max_points - 2) // 2
    vendor = connection.vendor
    if vendor == "postgresql":
        middle = _min_max_postgres(curve, buckets)
    elif vendor == "sqlite":
        middle = _min_max_sqlite(curve, buckets)
    else:
        middle = _min_max_window(curve, buckets)
    # The ends may also be a bucket's extreme; keep each point once.
    unique = list(dict.fromkeys(p for p in [ends[0], *middle, ends[1]] if p is not None))
    if curve.x_field != "wall_time":  # step and tokens are integers; the Postgres arrays hold floats
        unique = [(int(x), y) for x, y in unique]
    unique.sort(key=lambda p: p[0])
    return unique


def _min_max_postgres(curve: _Curve, buckets: int) -> list[tuple[float, float]]:
    """One hash-aggregate pass: min(ARRAY[value, x]) is the bucket's lowest value together with its x
    (ties: the earliest x); max(ARRAY[value, -x]) likewise for the highest."""
    sql, params = curve.raw_sql(
        "MIN(ARRAY[value, {x}::float8]), MAX(ARRAY[value, -({x}::float8)])",
        buckets,
        "LEAST(FLOOR(({x} - %s) * %s), %s)",
    )
    out: list[tuple[float, float]] = []
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for low, high in cursor.fetchall():
            out.append((low[1], low[0]))
            out.append((-high[1], high[0]))
    return out


def _min_max_sqlite(curve: _Curve, buckets: int) -> list[tuple[float, float]]:
    """SQLite fills a bare column from the row that holds the query's only MIN() or MAX(): two grouped
    passes, one per extreme. (x - lo) is never negative, so CAST truncation is floor."""
    out: list[tuple[float, float]] = []
    with connection.cursor() as cursor:
        for extreme in ("MIN", "MAX"):
            sql, params = curve.raw_sql(
                f"{{x}}, {extreme}(value)", buckets, "MIN(CAST(({x} - %s) * %s AS INTEGER), %s)"
            )
            cursor.execute(sql, params)
            out.extend(cursor.fetchall())
    return out


def _min_max_window(curve: _Curve, buckets: int) -> list[tuple[float, float]]:
    """Portable version (SQL window functions) for other databases; about 4x slower than the above."""
    x_field = curve.x_field
    raw_bucket = Floor((Cast(F(x_field), FloatField()) - float(curve.lo)) * curve.scale(buckets))
    ranked = (
        curve.rows()
        .annotate(bucket=Least(raw_bucket, Value(float(buckets - 1))))
        .annotate(
            low_rank=Window(
                RowNumber(), partition_by=[F("bucket")], order_by=[F("value").asc(), F(x_field).asc()]
            ),
            high_rank=Window(
                RowNumber(), partition_by=[F("bucket")], order_by=[F("value").desc(), F(x_field).asc()]
            ),
        )
        .filter(Q(low_rank=1) | Q(high_rank=1))
        .values_list(x_field, "value")
    )
    return list(ranked)


# --- the stored tiers (webapp.rollouts.metric_tiles): a long curve against steps in O(buckets) rows -----

_NO_END = 2**31 - 1  # past any step (a step is a 32-bit column)


@dataclass(frozen=True)
class _Range:
    """Steps from `start` to `end`, both inclusive."""

    start: int
    end: int

    @classmethod
    def of(cls, start: int | None, end: int | None) -> _Range:
        return cls(0 if start is None else max(0, start), _NO_END if end is None else end)

    def overlaps(self, s: Summary) -> bool:
        return s.max_step >= self.start and s.min_step <= self.end


def _tiered_series(run_id: int, keys: list[str], max_points: int, steps: _Range) -> dict[str, Series]:
    """Each key's curve against steps in `steps`, read from the coarsest stored tier whose blocks are no
    wider than a bucket of the downsampling: tiles of TILE_STEPS[level] steps (with the chunks not folded
    into tiles yet, by their summaries), and every point once a bucket is narrower than the finest tiles
    (a zoom) or the range holds no more than `max_points` points.

    Edges are exact: a tile not wholly inside the range is replaced by its chunks, and a chunk not wholly
    inside it by its points in the range. Downsampled, each bucket keeps the lowest and highest point of
    the tiles (or points) whose extreme falls in it (`_envelope`): every tile's extremes stay, at their
    real steps, so a spike is never lost; a bucket's second-highest point may be, where a whole tile's
    width (at most a bucket's) holds a higher one. The curve's point count, step range and end values are
    the top-level tiles', chunks' and points' summaries combined (`Summary.then`).

    A request costs the same few queries however many keys it names — the level's tiles inside the range
    come in one query per level for all keys (`_extremes_inside`) — plus a few for a key whose range edge
    cuts a tile (a zoom). Two queries a key, 25 keys × 2,000 points had taken 0.5–1.4 s."""
    through = folded_through(run_id)
    tops: dict[str, list[tuple[int, Summary]]] = {key: [] for key in keys}
    rows = MetricTile.objects.filter(run_id=run_id, key__in=keys, level=len(TILE_STEPS) - 1)
    for key, block, *summary in rows.values_list("key", "block", *SUMMARY_COLUMNS).order_by("key", "block"):
        s = row_summary(summary)
        if steps.overlaps(s):
            tops[key].append((block, s))
    fresh: dict[str, list[tuple[int, Summary | None]]] = {key: [] for key in keys}
    chunks = unfolded_chunks(run_id, through).filter(
        key__in=keys, min_step__lte=steps.end, max_step__gte=steps.start
    )
    for key, chunk_id, *summary in chunks.values_list("key", "id", *SUMMARY_COLUMNS).order_by("id"):
        fresh[key].append((chunk_id, None if summary[3] is None else row_summary(summary)))
    levels: dict[str, int] = {}
    for key in keys:
        extents = [s for _, s in tops[key]] + [s for _, s in fresh[key] if s is not None]
        if not extents:
            continue  # none, or chunks without summaries: read as stored, below
        lo = max(steps.start, min(s.min_step for s in extents))
        hi = min(steps.end, max(s.max_step for s in extents))
        width = (hi - lo) / ((max_points - 2) // 2)
        level = max((i for i, w in enumerate(TILE_STEPS) if w <= width), default=None)
        if level is not None:
            levels[key] = level
    inside = _extremes_inside(run_id, levels, steps, tops)
    out: dict[str, Series] = {}
    for key in keys:
        if key in levels:
            covered, edges = _edge_units(run_id, key, levels[key], steps, tops[key], through, fresh[key])
            whole = [s for _, s in tops[key] if s.inside(steps.start, steps.end)] + covered + edges
            curve = functools.reduce(Summary.then, whole) if whole else None
            if curve is not None and curve.size > max_points:
                out[key] = _downsample_units(inside[key], edges, curve, max_points)
                continue
        out[key] = _downsample_chunks(run_id, key, "step", max_points, steps)
    return out


class _Extremes(NamedTuple):
    """Tiles' lowest and highest points as numpy arrays (a 100k-step curve has ~1,600 tiles a key)."""

    low_step: np.ndarray
    low: np.ndarray
    high_step: np.ndarray
    high: np.ndarray

    @classmethod
    def of(cls, rows: Sequence[tuple[int, float, int, float]]) -> _Extremes:
        """From (low step, low, high step, high) rows."""
        columns = list(zip(*rows, strict=True)) if rows else [(), (), (), ()]
        kinds = (np.int64, np.float64, np.int64, np.float64)
        return cls(*(np.array(c, dtype=kind) for c, kind in zip(columns, kinds, strict=True)))


# A level's tiles inside a step range, one row per key: each extreme's step and value column as the
# concatenated big-endian binary of its values (int4send, float8send), which numpy reads as it comes.
# psycopg decoding the same as 38,400 rows × 4 values (a 100k-step run's 25 keys at 2,000 points) took
# 45–65 ms on this machine, these 25 rows about half. Every string_agg of a row sees the key's tiles in
# the same order (one aggregate node feeds each row to all of them), so the four columns stay parallel.
_EXTREMES_SQL = """
SELECT key, string_agg(int4send(value_min_step), ''), string_agg(float8send(value_min), ''),
    string_agg(int4send(value_max_step), ''), string_agg(float8send(value_max), '')
FROM rollouts_metrictile
WHERE run_id = %s AND level = %s AND key = ANY(%s) AND block BETWEEN %s AND %s
    AND min_step >= %s AND max_step <= %s
GROUP BY key
"""


def _extremes_inside(
    run_id: int,
    levels: dict[str, int],
    steps: _Range,
    tops: dict[str, list[tuple[int, Summary]]],
    *,
    packed: bool | None = None,
) -> dict[str, _Extremes]:
    """Per key, the lowest and highest points of its level's tiles wholly inside `steps`: at the top level
    from the `tops` already read, below it by one query per level for all keys. A tile inside the range
    starts at or after its start and ends by its end, so its block is between start // width and
    end // width. `packed` (default: on Postgres) reads them through `_EXTREMES_SQL`, else the ORM."""
    if packed is None:
        packed = connection.vendor == "postgresql"
    top = len(TILE_STEPS) - 1
    out: dict[str, _Extremes] = {}
    below: dict[int, list[str]] = {}
    for key, level in levels.items():
        inside = [s for _, s in tops[key] if s.inside(steps.start, steps.end)] if level == top else []
        out[key] = _Extremes.of([(s.low_step, s.low, s.high_step, s.high) for s in inside])
        if level != top:
            below.setdefault(level, []).append(key)
    for level, keys in below.items():
        width = TILE_STEPS[level]
        blocks = (steps.start // width, steps.end // width)
        if packed:
            with connection.cursor() as cursor:
                cursor.execute(_EXTREMES_SQL, [run_id, level, keys, *blocks, steps.start, steps.end])
                for key, *columns in cursor.fetchall():
                    out[key] = _Extremes(
                        *(
                            np.frombuffer(raw, kind).astype(np.int64 if kind == ">i4" else np.float64)
                            for raw, kind in zip(columns, (">i4", ">f8", ">i4", ">f8"), strict=True)
                        )
                    )
        else:
            rows: dict[str, list[tuple[int, float, int, float]]] = {}
            tiles = MetricTile.objects.filter(
                run_id=run_id,
                level=level,
                key__in=keys,
                block__range=blocks,
                min_step__gte=steps.start,
                max_step__lte=steps.end,
            )
            extremes = ("value_min_step", "value_min", "value_max_step", "value_max")
            for key, *extreme in tiles.values_list("key", *extremes):
                rows.setdefault(key, []).append(tuple(extreme))
            out.update((key, _Extremes.of(extreme)) for key, extreme in rows.items())
    return out


def _edge_units(
    run_id: int,
    key: str,
    level: int,
    steps: _Range,
    tops: list[tuple[int, Summary]],
    through: int,
    fresh: list[tuple[int, Summary | None]],
) -> tuple[list[Summary], list[Summary]]:
    """What the curve in `steps` holds besides its top-level tiles inside the range, as summaries: the
    level's tiles inside it below a top tile across an edge (`covered`: their extremes are among
    `_extremes_inside`'s), and `edges` — for a level's tile across an edge, its (folded) chunks inside the
    range and its other chunks' points in it; the chunks not folded yet (past `through`), likewise.
    A tile across an edge lies below a top tile across it (a top tile holds every chunk its tiles hold),
    so only those are looked into: none when the range takes the whole curve."""
    start, end = steps.start, steps.end
    width = TILE_STEPS[level]
    crossing = [(block, s) for block, s in tops if not s.inside(start, end)]
    covered: list[Summary] = []
    if level != len(TILE_STEPS) - 1 and crossing:
        ratio = TILE_STEPS[-1] // width
        below = Q()
        for block, _ in crossing:
            below |= Q(block__gte=block * ratio, block__lte=(block + 1) * ratio - 1)
        tiles = MetricTile.objects.filter(below, run_id=run_id, key=key, level=level)
        crossing = []
        for block, *summary in tiles.values_list("block", *SUMMARY_COLUMNS).order_by("block"):
            s = row_summary(summary)
            if s.inside(start, end):
                covered.append(s)
            else:
                crossing.append((block, s))
    across = Q()
    for block, s in crossing:
        if steps.overlaps(s):
            across |= Q(min_step__gte=block * width, min_step__lte=(block + 1) * width - 1, id__lte=through)
    if across:
        folded = MetricChunk.objects.filter(
            across, run_id=run_id, key=key, min_step__lte=end, max_step__gte=start
        )
        fresh = [
            (chunk_id, None if rest[3] is None else row_summary(rest))
            for chunk_id, *rest in folded.values_list("id", *SUMMARY_COLUMNS).order_by("id")
        ] + fresh
    edges: list[Summary] = []
    cut = []
    for chunk_id, summary in fresh:
        if summary is not None and summary.inside(start, end):
            edges.append(summary)
        else:
            cut.append(chunk_id)
    if cut:
        lists = MetricChunk.objects.filter(id__in=cut).order_by("id").values_list("steps", "values")
        edges.extend(
            point_summary(step, value)
            for chunk_steps, values in lists
            for step, value in zip(chunk_steps, values, strict=True)
            if start <= step <= end
        )
    return covered, edges


def _downsample_units(inside: _Extremes, edges: list[Summary], curve: Summary, max_points: int) -> Series:
    """`_envelope` over the tiles inside the range (their extremes) and the chunks and points at its
    edges: each offers its lowest and highest point; the curve's ends and extent are `curve`'s."""

    def column(inside_column: np.ndarray, field: str) -> np.ndarray:
        return np.concatenate(
            (inside_column, np.array([getattr(s, field) for s in edges], inside_column.dtype))
        )

    xs, ys = _envelope(
        (column(inside.low_step, "low_step"), column(inside.low, "low")),
        (column(inside.high_step, "high_step"), column(inside.high, "high")),
        (curve.min_step, curve.first),
        (curve.max_step, curve.last),
        (curve.min_step, curve.max_step),
        max_points,
    )
    return Series(xs, ys, curve.size, True)

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

from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from django.db import connection
from django.db.models import F, FloatField, Q, QuerySet, Value, Window
from django.db.models.aggregates import Count, Max, Min, Sum
from django.db.models.functions import Cast, Floor, Least, RowNumber

from webapp.experiments.models import Run
from webapp.rollouts.metric_tiles import SUMMARY_COLUMNS, Summary, folded_through, point_summary, row_summary
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
    fresh = MetricChunk.objects.filter(run=run, id__gt=folded_through(run.pk)).values_list("key", flat=True)
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
    pairs = list(zip(xs, ys, strict=True))
    first, last = ranked[0], ranked[-1]
    kept = _envelope(
        pairs, pairs, (xs[first], ys[first]), (xs[last], ys[last]), (min(xs), max(xs)), max_points
    )
    return Series([p[0] for p in kept], [p[1] for p in kept], total, True)


def _envelope(
    lows: list[tuple[float, float]],
    highs: list[tuple[float, float]],
    first: tuple[float, float],
    last: tuple[float, float],
    extent: tuple[float, float],
    max_points: int,
) -> list[tuple[float, float]]:
    """The one downsampling rule over (x, y) candidates: the curve's `first` and `last` point plus, in
    each of (max_points - 2) // 2 equal ranges of `extent`, the lowest of `lows` and the highest of
    `highs` falling in it (ties: the lowest x); ordered by x, each point once. Points are their own low
    and high; a tile or chunk offers its lowest and its highest point."""
    buckets = (max_points - 2) // 2
    lo, hi = extent
    scale, top = buckets / (float(hi - lo) or 1.0), buckets - 1
    low: dict[int, tuple[float, float]] = {}
    high: dict[int, tuple[float, float]] = {}
    for x, y in lows:
        b = min(int((x - lo) * scale), top)
        kept = low.get(b)
        if kept is None or (y, x) < (kept[1], kept[0]):
            low[b] = (x, y)
    for x, y in highs:
        b = min(int((x - lo) * scale), top)
        kept = high.get(b)
        if kept is None or (-y, x) < (-kept[1], kept[0]):
            high[b] = (x, y)
    middle = [p for b in sorted(low.keys() | high.keys()) for p in (low.get(b), high.get(b)) if p is not None]
    unique = list(dict.fromkeys([first, *middle, last]))
    unique.sort(key=lambda p: p[0])
    return unique


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
# Positions in a Summary (and in a row of SUMMARY_COLUMNS).
_MIN, _MAX, _LOW, _LOW_STEP, _HIGH, _HIGH_STEP, _FIRST, _LAST = range(1, 9)


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
    width (at most a bucket's) holds a higher one."""
    through = folded_through(run_id)
    tops: dict[str, list[tuple[int, Summary]]] = {key: [] for key in keys}
    rows = MetricTile.objects.filter(run_id=run_id, key__in=keys, level=len(TILE_STEPS) - 1)
    for key, block, *summary in rows.values_list("key", "block", *SUMMARY_COLUMNS).order_by("key", "block"):
        s = row_summary(summary)
        if steps.overlaps(s):
            tops[key].append((block, s))
    fresh: dict[str, list[tuple[int, Summary | None]]] = {key: [] for key in keys}
    chunks = MetricChunk.objects.filter(
        run_id=run_id, key__in=keys, id__gt=through, min_step__lte=steps.end, max_step__gte=steps.start
    )
    for key, chunk_id, *summary in chunks.values_list("key", "id", *SUMMARY_COLUMNS).order_by("id"):
        fresh[key].append((chunk_id, None if summary[3] is None else row_summary(summary)))
    out: dict[str, Series] = {}
    for key in keys:
        extents = [s for _, s in tops[key]] + [s for _, s in fresh[key] if s is not None]
        if not extents:
            out[key] = _downsample_chunks(run_id, key, "step", max_points, steps)  # none, or no summaries
            continue
        lo = max(steps.start, min(s.min_step for s in extents))
        hi = min(steps.end, max(s.max_step for s in extents))
        width = (hi - lo) / ((max_points - 2) // 2)
        level = max((i for i, w in enumerate(TILE_STEPS) if w <= width), default=None)
        if level is not None:
            downsampled = _downsample_cover(
                run_id, key, level, steps, tops[key], through, fresh[key], max_points
            )
            if downsampled is not None:
                out[key] = downsampled
                continue
        out[key] = _downsample_chunks(run_id, key, "step", max_points, steps)
    return out


def _downsample_cover(
    run_id: int,
    key: str,
    level: int,
    steps: _Range,
    tops: list[tuple[int, Summary]],
    through: int,
    fresh: list[tuple[int, Summary | None]],
    max_points: int,
    *,
    in_database: bool | None = None,
) -> Series | None:
    """The curve in `steps` downsampled from the level's tiles (`_cover`); None when it holds no more than
    `max_points` points (the caller reads them whole). On Postgres the level's tiles inside the range
    stay in the database, which applies `_envelope`'s rule to them and the other units (`_ENVELOPE_SQL`):
    a 100k-step curve's ~1,600 tiles are never turned into Python objects."""
    if in_database is None:
        in_database = connection.vendor == "postgresql"
    units, inside = _cover(run_id, key, level, steps, tops, through, fresh, leave_inside=in_database)
    if inside is None:
        total = sum(u[0] for u in units)  # a Summary's size
        return _downsample_units(units, total, max_points) if total > max_points else None
    buckets = (max_points - 2) // 2
    columns = [[kind(u[i]) for u in units] for i, kind in enumerate(_UNIT_TYPES)]
    with connection.cursor() as cursor:
        cursor.execute(
            _ENVELOPE_SQL,
            [run_id, key, level, *inside, *columns, buckets, buckets - 1, buckets - 1, buckets],
        )
        total, xs, ys = cursor.fetchone()
    if not total or total <= max_points:
        return None
    return Series(xs, ys, total, True)


_UNIT_TYPES = (int, int, int, float, int, float, int, float, float)  # a Summary's fields
# `_envelope` over a level's tiles inside a step range (run, key, level, blocks from … to, steps from … to)
# and the units given as arrays (Summary's fields): total, then the kept steps and values in step order.
# The grid, the ties and the order are Python's: (x - lo) * (buckets / (hi - lo)) in float8, the lowest
# value at its lowest step (min of [value, step]), the highest at its lowest step (max of [value, -step]),
# the first and last point by the units' order, each point once at its first place.
_ENVELOPE_SQL = """
WITH units AS (
    SELECT size, min_step, max_step, value_min, value_min_step, value_max, value_max_step, value_first,
        value_last, 0 AS src, block::bigint AS ord
    FROM rollouts_metrictile
    WHERE run_id = %s AND key = %s AND level = %s AND block BETWEEN %s AND %s
        AND min_step >= %s AND max_step <= %s
    UNION ALL
    SELECT u.size, u.min_step, u.max_step, u.value_min, u.value_min_step, u.value_max, u.value_max_step,
        u.value_first, u.value_last, 1, u.ord
    FROM unnest(%s::integer[], %s::integer[], %s::integer[], %s::float8[], %s::integer[], %s::float8[],
        %s::integer[], %s::float8[], %s::float8[]) WITH ORDINALITY AS u(size, min_step, max_step,
        value_min, value_min_step, value_max, value_max_step, value_first, value_last, ord)
),
grid AS (
    SELECT sum(size) AS total, min(min_step) AS lo, %s::float8 / (CASE WHEN max(max_step) > min(min_step)
        THEN max(max_step) - min(min_step) ELSE 1 END)::float8 AS scale
    FROM units
),
candidates AS (
    SELECT m[2] AS x, m[1] AS y, b, 1 AS k FROM (
        SELECT LEAST(FLOOR((u.value_min_step - g.lo)::float8 * g.scale), %s) AS b,
            MIN(ARRAY[u.value_min, u.value_min_step::float8]) AS m
        FROM units u, grid g GROUP BY 1
    ) lows
    UNION ALL
    SELECT -m[2], m[1], b, 2 FROM (
        SELECT LEAST(FLOOR((u.value_max_step - g.lo)::float8 * g.scale), %s) AS b,
            MAX(ARRAY[u.value_max, -u.value_max_step::float8]) AS m
        FROM units u, grid g GROUP BY 1
    ) highs
    UNION ALL
    (SELECT min_step, value_first, -1, 0 FROM units ORDER BY min_step, src, ord LIMIT 1)
    UNION ALL
    (SELECT max_step, value_last, %s, 3 FROM units ORDER BY max_step DESC, src DESC, ord DESC LIMIT 1)
),
kept AS (SELECT DISTINCT ON (x, y) x, y, b, k FROM candidates ORDER BY x, y, b, k)
SELECT (SELECT total FROM grid), array_agg(x::bigint ORDER BY x, b, k), array_agg(y ORDER BY x, b, k)
FROM kept
"""


def _cover(
    run_id: int,
    key: str,
    level: int,
    steps: _Range,
    tops: list[tuple[int, Summary]],
    through: int,
    fresh: list[tuple[int, Summary | None]],
    *,
    leave_inside: bool = False,
) -> tuple[list[tuple], tuple[int, int, int, int] | None]:
    """Summaries that hold each point of the curve in `steps` exactly once: the level's tiles inside the
    range; for a tile across an edge, its (folded) chunks inside it and its other chunks' points in the
    range; and the chunks not folded yet (past `through`), likewise. With `leave_inside` (below the top
    level), the tiles inside the range are not read: returned with the units is what selects them —
    blocks from, to, steps from, to."""
    width = TILE_STEPS[level]
    tiles = tops
    inside = None
    if level != len(TILE_STEPS) - 1 and tops:
        ratio = TILE_STEPS[-1] // width
        rows = MetricTile.objects.filter(
            run_id=run_id,
            key=key,
            level=level,
            block__gte=tops[0][0] * ratio,
            block__lte=(tops[-1][0] + 1) * ratio - 1,
        )
        if leave_inside:
            inside = (tops[0][0] * ratio, (tops[-1][0] + 1) * ratio - 1, steps.start, steps.end)
            rows = rows.filter(Q(min_step__lt=steps.start) | Q(max_step__gt=steps.end))
        # Plain rows, not Summary objects: a 100k-step curve has ~1,600 of them a key, and a tuple is
        # indexed as a Summary is (SUMMARY_COLUMNS' order) for a fraction of a NamedTuple's cost.
        tiles = [(row[0], row[1:]) for row in rows.values_list("block", *SUMMARY_COLUMNS).order_by("block")]
    units: list[tuple] = []
    edges = Q()
    start, end = steps.start, steps.end
    for block, s in tiles:
        if start <= s[_MIN] and s[_MAX] <= end:
            units.append(s)
        elif s[_MAX] >= start and s[_MIN] <= end:
            edges |= Q(min_step__gte=block * width, min_step__lte=(block + 1) * width - 1, id__lte=through)
    if edges:
        folded = MetricChunk.objects.filter(
            edges, run_id=run_id, key=key, min_step__lte=steps.end, max_step__gte=steps.start
        )
        fresh = [
            (chunk_id, None if rest[3] is None else row_summary(rest))
            for chunk_id, *rest in folded.values_list("id", *SUMMARY_COLUMNS)
        ] + fresh
    across = []
    for chunk_id, summary in fresh:
        if summary is not None and summary.inside(steps.start, steps.end):
            units.append(summary)
        else:
            across.append(chunk_id)
    if across:
        lists = MetricChunk.objects.filter(id__in=across).order_by("id").values_list("steps", "values")
        units.extend(
            point_summary(step, value)
            for chunk_steps, values in lists
            for step, value in zip(chunk_steps, values, strict=True)
            if steps.start <= step <= steps.end
        )
    return units, inside


def _downsample_units(units: list[tuple], total: int, max_points: int) -> Series:
    """`_envelope` over tiles, chunks and points (Summary fields, or rows in their order): each offers its
    lowest and highest point; the curve's ends are the first unit's first value and the last unit's last
    (ties: in the order they are given)."""
    first = min(units, key=itemgetter(_MIN))
    last = max(reversed(units), key=itemgetter(_MAX))
    kept = _envelope(
        [(u[_LOW_STEP], u[_LOW]) for u in units],
        [(u[_HIGH_STEP], u[_HIGH]) for u in units],
        (first[_MIN], first[_FIRST]),
        (last[_MAX], last[_LAST]),
        (min(u[_MIN] for u in units), max(u[_MAX] for u in units)),
        max_points,
    )
    return Series([p[0] for p in kept], [p[1] for p in kept], total, True)

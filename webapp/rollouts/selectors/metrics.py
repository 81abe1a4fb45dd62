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
from typing import Any

from django.db import connection
from django.db.models import F, FloatField, Q, QuerySet, Value, Window
from django.db.models.aggregates import Count, Max, Min, Sum
from django.db.models.functions import Cast, Floor, Least, RowNumber

from webapp.experiments.models import Run
from webapp.rollouts.models import MetricChunk, MetricPoint

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
    """Every metric name the run has reported, sorted."""
    return sorted(MetricChunk.objects.filter(run=run).values_list("key", flat=True).distinct().order_by())


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
    run: Run, keys: list[str], *, max_points: int = DEFAULT_MAX_POINTS, x: str = "step"
) -> dict[str, Series]:
    """Per metric key, its curve against `x` ("step", "time" or "tokens"), at most `max_points` points.

    Points without a value for the chosen x (no wall time or token count reported) are left out.
    """
    if x not in X_AXES:
        raise ValueError(f"x must be one of {', '.join(X_AXES)}")
    max_points = max(MIN_MAX_POINTS, min(MAX_MAX_POINTS, int(max_points)))
    x_field = X_AXES[x]
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
            downsampled = _downsample_chunks(run.pk, key, x_field, max_points)
            if downsampled is not None:
                out[key] = downsampled
                continue
            total = max_points  # fewer points with this x than the budget: read them whole below
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


def _downsample_chunks(run_id: int, key: str, x_field: str, max_points: int) -> Series | None:
    """`_downsample`'s rule over the curve's chunks as stored: the first and last point (in step order) with
    an x, and each of (max_points - 2) // 2 equal x-ranges' lowest and highest point (ties: the lowest x).
    None when no more than `max_points` points have an x (the caller reads those whole)."""
    column = {"step": "steps", "wall_time": "wall_times", "tokens": "tokens"}[x_field]
    fields = ("id", "steps", "values") if column == "steps" else ("id", "steps", "values", column)
    chunks = MetricChunk.objects.filter(run_id=run_id, key=key).values_list(*fields)
    xs: list[float] = []
    ys: list[float] = []
    order: list[tuple[int, int, int]] = []  # (step, chunk id, position): the view's (step, id) order
    for chunk_id, steps, values, *rest in chunks:
        x_values = rest[0] if rest else steps
        for position, (step, x, y) in enumerate(zip(steps, x_values, values, strict=True)):
            if x is not None:
                xs.append(x)
                ys.append(y)
                order.append((step, chunk_id, position))
    total = len(xs)
    if total <= max_points:
        return None
    buckets = (max_points - 2) // 2
    lo, hi = min(xs), max(xs)
    scale, top = buckets / (float(hi - lo) or 1.0), buckets - 1
    low: dict[int, int] = {}
    high: dict[int, int] = {}
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        b = min(int((x - lo) * scale), top)
        j = low.get(b)
        if j is None or y < ys[j] or (y == ys[j] and x < xs[j]):
            low[b] = i
        j = high.get(b)
        if j is None or y > ys[j] or (y == ys[j] and x < xs[j]):
            high[b] = i
    first = min(range(total), key=order.__getitem__)
    last = max(range(total), key=order.__getitem__)
    middle = [i for b in sorted(low) for i in (low[b], high[b])]
    unique = list(dict.fromkeys((xs[i], ys[i]) for i in [first, *middle, last]))
    unique.sort(key=lambda p: p[0])
    return Series([p[0] for p in unique], [p[1] for p in unique], total, True)


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

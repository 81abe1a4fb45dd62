"""The stored downsampled tiers of metric curves (webapp/rollouts/metric_tiles.py): a long curve is read
from tiles, not points, and reads the same as the points wherever the budget covers them; spikes stay;
late chunks, equal steps, deletes and an upgraded database keep the tiles true to their chunks."""

from __future__ import annotations

import math
import random

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Max
from django.test.utils import CaptureQueriesContext

from tests.conftest import make_run
from webapp.rollouts.ingest import ingest_batch, insert_metrics
from webapp.rollouts.metric_tiles import (
    SUMMARY_COLUMNS,
    fold_run,
    folded_through,
    refold_tiles,
    unfolded_chunks,
)
from webapp.rollouts.models import MetricChunk, MetricPoint, MetricTile
from webapp.rollouts.selectors.metrics import metric_series

STEPS = 30_000
SPIKE, DIP = 17_321, 4_207


def wave(step: int) -> float:
    if step == SPIKE:
        return 9.0
    if step == DIP:
        return -7.0
    return math.sin(step / 3000) + 0.1 * math.sin(step)


def store(run, key: str, steps, value_of=wave, batch: int = 40) -> None:
    """As ingestion stores a trainer's batches: `batch` steps per insert (one chunk per key per batch),
    with the run's progress before each, so tiles are folded once per top-level block and the newest
    chunks are read from their summaries."""
    steps = list(steps)
    for start in range(0, len(steps), batch):
        part = steps[start : start + batch]
        insert_metrics(
            run.pk, [(s, None, None, {key: value_of(s)}) for s in part], progress_step=run.current_step
        )
        run.current_step = max(run.current_step, *part)


def stored_points(run, key: str, start: int = 0, end: int = 2**31 - 1) -> tuple[list[int], list[float]]:
    """Every point in the step range, in the order a whole read returns them (step, then arrival)."""
    rows = MetricPoint.objects.filter(run=run, key=key, step__gte=start, step__lte=end).order_by("step", "id")
    points = list(rows.values_list("step", "value"))
    return [p[0] for p in points], [p[1] for p in points]


def tiles_of(run) -> dict[tuple, tuple]:
    rows = MetricTile.objects.filter(run=run).values_list("key", "level", "block", *SUMMARY_COLUMNS)
    return {tuple(row[:3]): tuple(row[3:]) for row in rows}


def assert_tiles_are_their_chunks_folded(run) -> None:
    """The tiles as stored equal the tiles folded from scratch from the chunks stored now."""
    stored = tiles_of(run)
    refold_tiles(MetricChunk.objects.filter(run=run).values_list("run_id", "key", "min_step"))
    assert stored == tiles_of(run)


def test_a_long_curve_is_read_from_tiles_and_keeps_its_spike_and_dip(run):
    store(run, "kl", range(STEPS))
    assert 0 < folded_through(run.pk) < MetricChunk.objects.latest("id").pk, (
        "the newest chunks wait for a fold"
    )
    with CaptureQueriesContext(connection) as queries:
        series = metric_series(run, ["kl"], max_points=200)["kl"]
    # Only tiles and the summaries of the chunks not folded yet were read: no point.
    assert not [q["sql"] for q in queries if '"steps"' in q["sql"] or "metricpoint" in q["sql"]]
    assert series.downsampled and series.total == STEPS and len(series.x) <= 200
    assert series.x == sorted(series.x)
    assert max(series.y) == 9.0 and series.x[series.y.index(9.0)] == SPIKE
    assert min(series.y) == -7.0 and series.x[series.y.index(-7.0)] == DIP
    assert (series.x[0], series.y[0]) == (0, wave(0)) and (series.x[-1], series.y[-1]) == (
        STEPS - 1,
        wave(STEPS - 1),
    )
    assert all(y == wave(x) for x, y in zip(series.x, series.y, strict=True)), "real points, not averages"
    # The envelope: each tenth's highest and lowest point are there, give or take one bucket and one tile.
    slack = STEPS / 99 + 64
    for tenth in range(10):
        lo, hi = tenth * STEPS // 10, (tenth + 1) * STEPS // 10
        near = [y for x, y in zip(series.x, series.y, strict=True) if lo - slack <= x < hi + slack]
        assert max(near) >= max(wave(s) for s in range(lo, hi))
        assert min(near) <= min(wave(s) for s in range(lo, hi))
    # The path before tiles (every point read) finds the same extremes and ends.
    old = metric_series(run, ["kl"], max_points=200, tiles=False)["kl"]
    assert (max(old.y), min(old.y), old.total) == (max(series.y), min(series.y), series.total)
    assert (old.x[0], old.x[-1]) == (series.x[0], series.x[-1])


def test_a_zoom_shows_every_point_with_exact_edges(run):
    store(run, "kl", range(STEPS))
    series = metric_series(run, ["kl"], max_points=2000, start=1_234, end=2_233)["kl"]
    assert not series.downsampled and series.total == 1000
    assert (series.x, series.y) == stored_points(run, "kl", 1_234, 2_233)
    # A downsampled range starts and ends at the range's own points, not at chunk or tile boundaries.
    wide = metric_series(run, ["kl"], max_points=100, start=1_003, end=25_007)["kl"]
    assert wide.downsampled and wide.total == 25_007 - 1_003 + 1
    assert (wide.x[0], wide.y[0]) == (1_003, wave(1_003)) and (wide.x[-1], wide.y[-1]) == (
        25_007,
        wave(25_007),
    )
    assert all(1_003 <= x <= 25_007 for x in wide.x) and 9.0 in wide.y and -7.0 in wide.y
    outside = metric_series(run, ["kl"], start=STEPS + 10)["kl"]
    assert outside.x == [] and outside.total == 0
    with pytest.raises(ValueError):
        metric_series(run, ["kl"], start=10, end=9)


@pytest.mark.parametrize("max_points", [20_000, 1_000])
def test_the_tiered_read_equals_the_full_read_where_the_budget_covers_every_point(run, max_points):
    # Late chunks and equal steps: a second pass over some steps, a batch reaching back, repeated steps.
    store(run, "kl", range(0, 6_000, 2))
    store(run, "kl", range(1, 6_000, 2), value_of=lambda s: -wave(s), batch=25)
    insert_metrics(run.pk, [(s, None, None, {"kl": 0.5}) for s in (100, 100, 2_500, 5_999, 0)])
    for start, end in [(None, None), (0, 999), (2_400, 3_100), (5_999, 5_999), (100, 100), (3_000, 3_999)]:
        steps, values = stored_points(run, "kl", start or 0, 2**31 - 1 if end is None else end)
        if len(steps) > max_points:
            continue
        tiered = metric_series(run, ["kl"], max_points=max_points, start=start, end=end)["kl"]
        full = metric_series(run, ["kl"], max_points=max_points, start=start, end=end, tiles=False)["kl"]
        assert (tiered.x, tiered.y, tiered.total, tiered.downsampled) == (steps, values, len(steps), False)
        assert (full.x, full.y) == (tiered.x, tiered.y)
    assert_tiles_are_their_chunks_folded(run)


def test_late_chunks_and_equal_steps_reach_the_tiles(run):
    store(run, "kl", range(STEPS))
    # Long after: a spike at a step already stored, equal to another point's step, and a new dip.
    insert_metrics(run.pk, [(9_000, None, None, {"kl": 50.0}), (22_222, None, None, {"kl": -50.0})])
    series = metric_series(run, ["kl"], max_points=200)["kl"]
    assert series.total == STEPS + 2
    assert max(series.y) == 50.0 and series.x[series.y.index(50.0)] == 9_000
    assert min(series.y) == -50.0 and series.x[series.y.index(-50.0)] == 22_222
    assert_tiles_are_their_chunks_folded(run)


def test_an_old_runs_unfolded_chunks_are_read_between_its_own_ids_not_to_the_tables_end(
    run, project, environment, rubric, users
):
    store(run, "kl", range(5_000))
    later = make_run(project, environment, rubric, users)
    store(later, "kl", range(5_000))  # written after: chunk ids above every one of `run`'s
    through, last = folded_through(run.pk), MetricChunk.objects.filter(run=run).latest("id").pk
    unfolded = unfolded_chunks(run.pk)
    assert list(unfolded.values_list("id", flat=True).order_by("id")) == list(
        MetricChunk.objects.filter(run=run, id__gt=through).values_list("id", flat=True).order_by("id")
    )
    # The upper bound is what keeps Postgres from walking the primary key through `later`'s chunks.
    assert f"<= {last}" in str(unfolded.query)
    assert not unfolded_chunks(make_run(project, environment, rubric, users).pk).exists()


def test_deleting_chunks_folds_their_tiles_again_and_deleting_the_run_drops_them(run):
    store(run, "kl", range(STEPS))
    store(run, "entropy", range(3_000))
    assert metric_series(run, ["kl"], max_points=200)["kl"].total == STEPS
    # The chunks holding the spike go: the spike leaves the curve, the tiles follow the chunks left.
    MetricChunk.objects.filter(run=run, key="kl", min_step__gte=17_000, max_step__lte=18_000).delete()
    series = metric_series(run, ["kl"], max_points=200)["kl"]
    assert 9.0 not in series.y and -7.0 in series.y
    assert series.total == MetricPoint.objects.filter(run=run, key="kl").count()
    assert_tiles_are_their_chunks_folded(run)
    # A key's every chunk: no tile of it is left.
    run.metric_chunks.filter(key="entropy").delete()
    assert not MetricTile.objects.filter(run=run, key="entropy").exists()
    assert metric_series(run, ["entropy"])["entropy"].total == 0
    run_id = run.pk
    run.delete()
    assert not MetricTile.objects.filter(run_id=run_id).exists()
    assert not MetricChunk.objects.filter(run_id=run_id).exists()


def test_ingestion_folds_the_tiles_once_per_top_block_and_reads_agree_before_and_after(run):
    """Through ingest_batch, the write path of every trainer: the run's tiles are folded when its steps
    reach a new block of 2,048; the curve reads alike from tiles and fresh chunks and after a fold."""
    seq = 0
    for start in range(0, 5_000, 40):
        events = []
        for step in range(start, start + 40):
            seq += 1
            events.append({"seq": seq, "type": "metrics", "step": step, "values": {"kl": wave(step)}})
        ingest_batch(run=run, payload={"events": events})
    through = folded_through(run.pk)
    assert MetricChunk.objects.filter(run=run, id__lte=through).aggregate(m=Max("max_step"))["m"] == 4_119
    before = metric_series(run, ["kl"], max_points=100)["kl"]
    zoom = metric_series(run, ["kl"], max_points=100, start=4_000, end=4_500)["kl"]
    fold_run(run.pk)
    assert folded_through(run.pk) == MetricChunk.objects.latest("id").pk
    after = metric_series(run, ["kl"], max_points=100)["kl"]
    # Chunks of 40 steps became tiles of 64: buckets may keep other points, never other extremes or ends.
    for series in (before, after):
        assert series.total == 5_000 and min(series.y) == -7.0 and series.x[series.y.index(-7.0)] == DIP
        assert (series.x[0], series.x[-1], series.y[-1]) == (0, 4_999, wave(4_999))
        assert all(y == wave(x) for x, y in zip(series.x, series.y, strict=True))
    assert metric_series(run, ["kl"], max_points=100, start=4_000, end=4_500)["kl"] == zoom
    assert zoom.x[0] == 4_000 and zoom.x[-1] == 4_500 and zoom.total == 501


def test_the_metrics_api_and_the_live_endpoint_take_a_step_range(client_for, run):
    store(run, "kl", range(5_000))
    client = client_for("dave")
    body = client.get(f"/api/runs/{run.pk}/metrics/?keys=kl&start=1000&end=1099").json()
    assert (
        body["series"]["kl"]["steps"] == list(range(1000, 1100)) and not body["series"]["kl"]["downsampled"]
    )
    refused = client.get(f"/api/runs/{run.pk}/metrics/?keys=kl&start=10&end=9")
    assert refused.status_code == 400 and refused.json()["fields"]["end"] == ["must not be before start"]
    live = client.get(f"/p/{run.project.slug}/runs/{run.pk}/metrics.json?keys=kl&start=4990")
    assert live.status_code == 200, live.content[:200]
    assert live.json()["series"]["kl"]["x"] == list(range(4990, 5000))
    bad = client.get(f"/p/{run.project.slug}/runs/{run.pk}/metrics.json?keys=kl&start=-1")
    assert bad.status_code == 400 and "start" in bad.json()["error"]


@pytest.mark.django_db(transaction=True)
def test_an_upgraded_database_gets_its_chunks_summed_up_and_its_tiles(run):
    """Chunks as the release before tiles stored them (no summary columns, no tiles) are summed up and
    tiled by migration 0023; the curve then reads as it did."""
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    before = [("rollouts", "0022_trajectory_branch")]
    try:
        executor.migrate(before)
        old = MigrationExecutor(connection).loader.project_state(before).apps
        OldChunk = old.get_model("rollouts", "MetricChunk")
        for start in range(0, 10_000, 64):
            steps = list(range(start, min(start + 64, 10_000)))
            OldChunk.objects.create(
                run_id=run.pk,
                key="kl",
                size=len(steps),
                min_step=steps[0],
                max_step=steps[-1],
                steps=steps,
                values=[wave(s) for s in steps],
                wall_times=[None] * len(steps),
                tokens=[None] * len(steps),
            )
        # A late chunk with equal steps, reaching back.
        OldChunk.objects.create(
            run_id=run.pk,
            key="kl",
            size=3,
            min_step=70,
            max_step=9_000,
            steps=[9_000, 70, 70],
            values=[-20.0, 0.25, 0.75],
            wall_times=[None] * 3,
            tokens=[None] * 3,
        )
    finally:
        MigrationExecutor(connection).migrate(latest)
    assert not MetricChunk.objects.filter(run=run, value_min__isnull=True).exists()
    late = MetricChunk.objects.get(run=run, min_step=70)
    assert (late.value_min, late.value_min_step, late.value_max, late.value_max_step) == (
        -20.0,
        9_000,
        0.75,
        70,
    )
    assert (late.value_first, late.value_last) == (0.25, -20.0)
    assert MetricTile.objects.filter(run=run, key="kl").count() == math.ceil(10_000 / 64) + math.ceil(
        10_000 / 2048
    )
    assert_tiles_are_their_chunks_folded(run)
    series = metric_series(run, ["kl"], max_points=100)["kl"]
    assert series.total == 10_003 and min(series.y) == -20.0 and 9.0 not in series.y
    assert series.x[series.y.index(-20.0)] == 9_000
    whole = metric_series(run, ["kl"], max_points=20_000)["kl"]
    assert (whole.x, whole.y) == stored_points(run, "kl")


@pytest.mark.skipif(connection.vendor != "postgresql", reason="only Postgres reads tiles packed")
def test_the_packed_read_of_tiles_is_the_orm_read(run, monkeypatch):
    """On Postgres a level's tiles inside the range come as packed binary columns (_EXTREMES_SQL); the
    curves are the ORM read's, to the point, with edges, late chunks and chunks not folded yet."""
    from webapp.rollouts.selectors import metrics

    store(run, "kl", range(STEPS))
    store(run, "entropy", range(0, STEPS, 3), value_of=lambda s: -wave(s))
    insert_metrics(
        run.pk, [(9_000, None, None, {"kl": 50.0}), (100, None, None, {"kl": -3.0})], progress_step=STEPS
    )
    cases = [
        (None, None, 200),
        (None, None, 2000),
        (1_003, 25_007, 100),
        (0, 20_000, 300),
        (5_000, None, 150),
    ]
    keys = ["kl", "entropy"]
    packed = {
        case: metric_series(run, keys, max_points=case[2], start=case[0], end=case[1]) for case in cases
    }
    original = metrics._extremes_inside
    monkeypatch.setattr(metrics, "_extremes_inside", lambda *a, **k: original(*a, **k, packed=False))
    for (start, end, max_points), series in packed.items():
        assert all(one.downsampled for one in series.values())
        assert metric_series(run, keys, max_points=max_points, start=start, end=end) == series


def envelope_as_written(lows, highs, first, last, extent, max_points):
    """The downsampling rule in plain Python, a candidate at a time (what selectors.metrics._envelope
    computes with numpy): the ends plus each range's lowest and highest (ties: the lowest x), each
    (x, y) once at its first place, ordered by x."""
    buckets = (max_points - 2) // 2
    lo, hi = extent
    scale, top = buckets / (float(hi - lo) or 1.0), buckets - 1
    low: dict[int, tuple] = {}
    high: dict[int, tuple] = {}
    for x, y in lows:
        b = min(int((x - lo) * scale), top)
        if b not in low or (y, x) < (low[b][1], low[b][0]):
            low[b] = (x, y)
    for x, y in highs:
        b = min(int((x - lo) * scale), top)
        if b not in high or (-y, x) < (-high[b][1], high[b][0]):
            high[b] = (x, y)
    middle = [p for b in sorted(low.keys() | high.keys()) for p in (low.get(b), high.get(b)) if p is not None]
    unique = list(dict.fromkeys([first, *middle, last]))
    unique.sort(key=lambda p: p[0])
    return unique


@pytest.mark.parametrize("seed", range(6))
def test_the_envelope_is_its_rule_as_written(seed):
    """Few distinct steps and values: ties of value, of step and of whole points everywhere."""
    import numpy as np

    from webapp.rollouts.selectors.metrics import _envelope

    rng = random.Random(seed)
    size = rng.choice([1, 7, 300, 3_000])
    lows = [(rng.randint(0, 400), float(rng.randint(-3, 3))) for _ in range(size)]
    highs = [(x, y + rng.choice([0.0, 1.0])) for x, y in lows]
    first, last = min(lows), max(highs)
    extent = (min(x for x, _ in lows), max(x for x, _ in lows))
    max_points = rng.choice([10, 13, 100, 2_000])

    def columns(points):
        return np.array([x for x, _ in points]), np.array([y for _, y in points])

    xs, ys = _envelope(columns(lows), columns(highs), first, last, extent, max_points)
    assert list(zip(xs, ys, strict=True)) == envelope_as_written(lows, highs, first, last, extent, max_points)
    assert all(type(x) is int for x in xs)

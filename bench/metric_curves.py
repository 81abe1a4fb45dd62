"""Curves of a long run, before and after, in one run of the bench: a run of 100,000 steps × 25 keys
ingested through `ingest_batch` (40 steps a batch: 1,000 points, MLflow's log-batch maximum, as
bench/ingest.py sends), then its curves read through the whole Django view — `GET /api/runs/<id>/metrics/`
(every key, max_points 2,000 and the soak's 500), the live page's `metrics.json`, and a zoom of 1,000
steps — three ways, interleaved under the same load: now; as at `--before REV` (the curve reads of that
revision: its `webapp/rollouts/selectors/metrics.py` loaded from git, its JSON rendering; default
fcf69f4, the per-key SQL envelope of the stored tiers, before one query per level for every key and numpy);
and every point read (`metric_series(tiles=False)`: before the stored tiers,
webapp/rollouts/metric_tiles.py). Issue 39.1's goal: p95 ≤ 300 ms on Postgres.

Ingest, before and after the tiers: the first INGEST_COMPARE_STEPS steps go into two runs in alternating
rounds (so both sides see the same machine load), one written as before tiles (`insert_metrics(
summaries=False)`: no summary columns, no tiles), the other as now; points/s of each.

`python bench/metric_curves.py [--smoke] [--steps N] [--keys K] [--before REV]`; on the embedded default
(SQLite in a fresh var directory) or on Postgres (DATABASE_URL=postgres://…). Prints the machine's load
beside the figures. Environment: ROLLOUT_STUDIO_VAR (default var/bench-curves, wiped without DATABASE_URL).
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import size, smoke_parser  # noqa: E402

VAR = Path(os.environ.setdefault("ROLLOUT_STUDIO_VAR", str(ROOT / "var" / "bench-curves")))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

GOAL_MS = 300
BATCH_STEPS = 40  # × 25 keys: 1,000 points a batch
INGEST_COMPARE_STEPS = size(20_000, smoke=400)
ROUND_STEPS = size(2_000, smoke=200)
READS_AFTER, READS_BEFORE = size(20, smoke=2), size(3, smoke=1)
PASSWORD = "curves-bench-password"


def value_of(step: int, key: int) -> float:
    """A slow wave per key with a spike every 9,973 steps (what the min/max envelope must keep)."""
    if step % 9_973 == 4_321:
        return 10.0 + key
    return math.sin(step / 5000 + key) + 0.1 * math.sin(step)


def batches(first_step: int, last_step: int, keys: int, seq0: int):
    """Payloads of BATCH_STEPS metrics events each, as the SDK's sink posts them."""
    names = [f"metric/{k:02d}" for k in range(keys)]
    seq = seq0
    for start in range(first_step, last_step, BATCH_STEPS):
        events = []
        for step in range(start, min(start + BATCH_STEPS, last_step)):
            seq += 1
            values = {name: value_of(step, k) for k, name in enumerate(names)}
            events.append(
                {"seq": seq, "type": "metrics", "step": step, "time": 1.7e9 + step, "values": values}
            )
        yield {"events": events}


def ingest(run, first_step: int, last_step: int, keys: int, *, summaries: bool) -> float:
    """Seconds to ingest the steps into `run` (summaries=False: the write path before tiles)."""
    from webapp.rollouts import ingest as ingest_module

    original = ingest_module.insert_metrics
    ingest_module.insert_metrics = functools.partial(original, summaries=summaries)
    try:
        payloads = list(batches(first_step, last_step, keys, seq0=first_step))
        started = time.perf_counter()
        for payload in payloads:
            ingest_module.ingest_batch(run=run, payload=payload)
        return time.perf_counter() - started
    finally:
        ingest_module.insert_metrics = original


def reads_at(rev: str) -> types.ModuleType | None:
    """The curve reads (webapp/rollouts/selectors/metrics.py) as they were at git revision `rev`, as a
    module of this process; None where git or the revision is not there (a shallow CI checkout)."""
    path = "webapp/rollouts/selectors/metrics.py"
    shown = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode != 0:
        print(f"no {rev}:{path} here ({shown.stderr.strip()[:120]}): no reads as at {rev}")
        return None
    module = types.ModuleType(f"metrics_at_{rev}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(shown.stdout, f"{rev}:{path}", "exec"), module.__dict__)
    return module


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def load() -> str:
    return "load " + " / ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=25)
    parser.add_argument("--before", default="fcf69f4", help="the revision whose curve reads to compare")
    args = smoke_parser(parser, steps=2_500, keys=4).parse_args()
    if not os.environ.get("DATABASE_URL"):
        shutil.rmtree(VAR, ignore_errors=True)
    import django

    django.setup()
    from django.conf import settings

    if settings.EMBEDDED:  # ingestion broadcasts after each commit: the embedded default's redis-server
        from webapp.embedded import ensure_embedded_redis, stop_embedded_redis

        ensure_embedded_redis(settings.VAR_DIR)
    try:
        run_bench(args.steps, args.keys, args.before)
    finally:
        if settings.EMBEDDED:
            stop_embedded_redis(settings.VAR_DIR)


def run_bench(steps: int, keys: int, before_rev: str) -> None:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.http import JsonResponse
    from django.test import Client
    from django.urls import reverse

    from webapp.core.views import json_bytes_response
    from webapp.experiments.models import Run
    from webapp.projects.services import project_create
    from webapp.rollouts.selectors import metrics

    call_command("migrate", verbosity=0)
    stamp = f"{time.time():.0f}"
    owner = get_user_model().objects.create_user(f"curves-{stamp}", password=PASSWORD)
    project = project_create(name=f"bench curves {stamp}", owner=owner)
    after = Run.objects.create(project=project, name="with tiles", preset="grpo", created_by=owner)
    before = Run.objects.create(project=project, name="without tiles", preset="grpo", created_by=owner)
    print(f"{connection.vendor}: a run of {steps:,} steps × {keys} keys ({steps * keys:,} points); {load()}")

    # Ingest: the first steps into both runs in alternating rounds, then the rest of the run with tiles.
    compared = min(INGEST_COMPARE_STEPS, steps)
    spent = {True: 0.0, False: 0.0}
    for start in range(0, compared, ROUND_STEPS):
        end = min(start + ROUND_STEPS, compared)
        for summaries, run in ((False, before), (True, after)):
            spent[summaries] += ingest(run, start, end, keys, summaries=summaries)
    rest = ingest(after, compared, steps, keys, summaries=True) if steps > compared else 0.0
    points = compared * keys
    rate = {side: points / seconds for side, seconds in spent.items()}
    print(f"ingest through ingest_batch, {compared:,} steps a side in rounds of {ROUND_STEPS:,} ({load()}):")
    print(f"  before (no summaries, no tiles): {rate[False]:9,.0f} points/s")
    print(
        f"  after (summaries + tiles):       {rate[True]:9,.0f} points/s ({rate[True] / rate[False] - 1:+.0%})"
    )
    if rest:
        print(
            f"  the remaining {steps - compared:,} steps with tiles: {(steps - compared) * keys / rest:,.0f} points/s"
        )
    before.delete()

    client = Client()
    assert client.login(username=owner.username, password=PASSWORD)
    api = f"/api/runs/{after.pk}/metrics/"
    live = reverse("live:metrics_json", args=[project.slug, after.pk])
    middle = steps // 2
    reads: dict[str, tuple[str, dict[str, Any]]] = {
        "API, every key, max_points 2000": (api, {"max_points": 2000}),
        "API, every key, max_points 500": (api, {"max_points": 500}),
        "live metrics.json, every key": (live, {}),
        "API, one key, zoom of 1,000 steps": (
            api,
            {"keys": "metric/00", "start": middle, "end": middle + 999, "max_points": 2000},
        ),
    }
    if connection.vendor == "postgresql":  # as autovacuum would (this machine's server runs without it)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE rollouts_metricchunk, rollouts_metrictile")
    from rest_framework.response import Response

    from webapp.live import views as live_views
    from webapp.rollouts import apis

    now, old = metrics.metric_series, reads_at(before_rev)
    # Each way: the curve reads and the JSON rendering the view used then.
    ways: dict[str, dict[str, Any]] = {
        "now": {"metric_series": now},
        **(
            {"rev": {"metric_series": old.metric_series, "api": Response, "live": JsonResponse}}
            if old
            else {}
        ),
        "points": {"metric_series": functools.partial(now, tiles=False)},
    }
    print(f"curve reads through the Django view, p50 / p95 ms ({load()}):")
    print(f"  {'':34s} {'now':>18s}   {'as at ' + before_rev:>18s}   {'every point read':>18s}")
    for name, (url, query) in reads.items():
        timings: dict[str, list[float]] = {way: [] for way in ways}
        zoom = "start" in query  # the path before tiles had no step range: now and rev only
        for i in range(READS_AFTER):
            for way in ways if i < READS_BEFORE else ("now",):
                if zoom and way == "points":
                    continue
                metrics.metric_series = ways[way]["metric_series"]
                apis.json_bytes_response = ways[way].get("api", json_bytes_response)
                live_views.json_bytes_response = ways[way].get("live", json_bytes_response)
                try:
                    started = time.perf_counter()
                    response = client.get(url, query)
                    timings[way].append((time.perf_counter() - started) * 1000)
                finally:
                    metrics.metric_series = now
                    apis.json_bytes_response = live_views.json_bytes_response = json_bytes_response
                assert response.status_code == 200, response.content[:300]
        cells = [
            f"{statistics.median(timings[way]):8.1f} / {percentile(timings[way], 0.95):7.1f}"
            if timings.get(way)
            else f"{'—':>18s}"
            for way in ("now", "rev", "points")
        ]
        verdict = "ok" if percentile(timings["now"], 0.95) <= GOAL_MS else "MISSED"
        print(f"  {name:34s} {'   '.join(cells)}   goal p95 ≤ {GOAL_MS} ms {verdict}", flush=True)
    print(f"  ({READS_AFTER} reads now, {READS_BEFORE} each other way; {load()})")
    # The spikes stay: every key's downsampled curve holds its spikes at their steps.
    series = metrics.metric_series(after, ["metric/03"], max_points=500)["metric/03"]
    spikes = [s for s in range(steps) if s % 9_973 == 4_321]
    assert all(s in series.x and series.y[series.x.index(s)] == 13.0 for s in spikes), "a spike was lost"
    after.delete()
    project.delete()
    owner.delete()


if __name__ == "__main__":
    main()

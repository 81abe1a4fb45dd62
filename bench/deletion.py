"""Deleting a long run on Postgres: our batched purge against Django's own `Run.delete()` of an identical run,
in the same database and run of the bench — the time, the longest transaction (what a row lock is held
for), the process's memory growth, and a page read's latency while each deletes.

    python bench/deletion.py [--trajectories 5000] [--steps 20000] [--keys 25] [--keep]

Two external runs get the same data through the ingestion path real runs use (`ingest_batch`): trajectories
of six turns, and `steps` × `keys` metric points. Then one is deleted by Django's collector (one
transaction: every dependant loaded into memory, then deleted) and the other by `webapp.core.purge.purge`,
one batch a transaction (each transaction timed), while a thread reads the project's runs page through the
whole Django view. Environment: DATABASE_URL (default postgres://postgres@127.0.0.1:5432/
rollout_bench_deletion: created, dropped at the end unless --keep).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import _postgres  # noqa: E402
from bench._measure import smoke_parser  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--trajectories", type=int, default=5000, help="per run (six turns each)")
parser.add_argument("--steps", type=int, default=20000, help="metric steps per run")
parser.add_argument("--keys", type=int, default=25, help="metric keys per step")
parser.add_argument("--keep", action="store_true", help="keep the database")
ARGS = smoke_parser(parser, trajectories=64, steps=200, keys=5).parse_args()

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/rollout_bench_deletion")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/14")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
_postgres.require_postgres(os.environ["DATABASE_URL"], "bench/deletion.py")
_postgres.create_database(os.environ["DATABASE_URL"], fresh=True)

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import reverse  # noqa: E402

from bench.ingest import trajectory  # noqa: E402
from webapp.core.purge import purge  # noqa: E402
from webapp.experiments.models import Run, RunStatus  # noqa: E402
from webapp.projects.services import project_create  # noqa: E402
from webapp.rollouts.external import external_run_create  # noqa: E402
from webapp.rollouts.ingest import ingest_batch  # noqa: E402
from webapp.rollouts.models import MetricChunk, Trajectory, Turn  # noqa: E402

STEPS_PER_BATCH, PER_STEP = 500, 64
PASSWORD = "deletion-bench-password"


def fill(run: Run) -> None:
    seq = 1
    keys = [f"metric/{k:02d}" for k in range(ARGS.keys)]
    for start in range(0, ARGS.steps, STEPS_PER_BATCH):
        count = min(STEPS_PER_BATCH, ARGS.steps - start)
        events = [
            {"seq": seq + i, "type": "metrics", "step": start + i, "values": {k: 0.5 for k in keys}}
            for i in range(count)
        ]
        ingest_batch(run=run, payload={"events": events})
        seq += count
    for step in range(-(-ARGS.trajectories // PER_STEP)):
        items = [
            trajectory(*divmod(n, 8), step) for n in range(min(PER_STEP, ARGS.trajectories - step * PER_STEP))
        ]
        ingest_batch(
            run=run, payload={"events": [{"seq": seq, "type": "trajectories", "step": step, "items": items}]}
        )
        seq += 1
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)


def rows(run_id: int) -> int:
    return (
        Trajectory.objects.filter(run_id=run_id).count()
        + Turn.objects.filter(trajectory__run_id=run_id).count()
        + MetricChunk.objects.filter(run_id=run_id).count()
    )


class Reader(threading.Thread):
    """Reads the project's runs page over and over (its own database connection), keeping each latency."""

    def __init__(self, url: str, username: str) -> None:
        super().__init__(daemon=True)
        self.client = Client()
        self.client.login(username=username, password=PASSWORD)
        self.url = url
        self.latencies: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                started = time.perf_counter()
                assert self.client.get(self.url).status_code == 200
                self.latencies.append((time.perf_counter() - started) * 1000)
        finally:
            connection.close()

    def finish(self) -> list[float]:
        self.stop.set()
        self.join()
        return self.latencies


class PeakMemory(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process()
        self.base = self.peak = self.process.memory_info().rss
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.01)

    def growth_mb(self) -> float:
        self.stop.set()
        self.join()
        return (self.peak - self.base) / 2**20


def measure(label: str, delete, url: str, username: str) -> dict:
    reader, memory = Reader(url, username), PeakMemory()
    reader.start()
    memory.start()
    time.sleep(0.3)  # a few reads before
    started = time.perf_counter()
    longest = delete()
    total = time.perf_counter() - started
    latencies = reader.finish()
    return {
        "label": label,
        "total_s": total,
        "longest_ms": longest * 1000,
        "memory_mb": memory.growth_mb(),
        "read_p95_ms": sorted(latencies)[int(0.95 * (len(latencies) - 1))] if latencies else float("nan"),
        "read_max_ms": max(latencies, default=float("nan")),
    }


def main() -> None:
    try:
        call_command("migrate", verbosity=0)
        owner = get_user_model().objects.create_user("deletion-owner", password=PASSWORD)
        project = project_create(name="Deletion", owner=owner, slug="deletion")
        runs = [external_run_create(project=project, user=owner, name=f"long run {i}")[0] for i in range(2)]
        started = time.perf_counter()
        for run in runs:
            fill(run)
        each = rows(runs[0].pk)
        print(
            f"two runs of {ARGS.trajectories:,} trajectories, {ARGS.steps:,} steps × {ARGS.keys} keys: "
            f"{each:,} rows each (trajectories, turns, metric chunks), written in {time.perf_counter() - started:.0f} s"
        )
        url = reverse("experiments:run_list", args=[project.slug])

        def django_delete() -> float:
            started = time.perf_counter()
            with transaction.atomic():
                Run.all_objects.get(pk=runs[0].pk).delete()
            return time.perf_counter() - started  # one transaction: all of it

        def our_purge() -> float:
            batches: list[tuple[float, str, int]] = []
            purge(
                Run,
                runs[1].pk,
                on_batch=lambda model, count, s: batches.append((s, model._meta.label, count)),
            )
            slowest = ", ".join(
                f"{label} ({count} rows) {s * 1000:.0f} ms" for s, label, count in sorted(batches)[-3:]
            )
            median = statistics.median(s for s, _, _ in batches)
            print(f"  ours: {len(batches)} transactions, median {median * 1000:.0f} ms; slowest: {slowest}")
            return max(batches)[0]

        results = [
            measure("Django's Run.delete()", django_delete, url, owner.username),
            measure("ours (webapp.core.purge)", our_purge, url, owner.username),
        ]
        assert rows(runs[0].pk) == rows(runs[1].pk) == 0
        print(
            f"{'':26} {'total':>9} {'longest transaction':>20} {'memory growth':>14} {'page p95 / max while deleting':>31}"
        )
        for r in results:
            print(
                f"  {r['label']:24} {r['total_s']:8.2f}s {r['longest_ms']:17.0f} ms {r['memory_mb']:11.0f} MB "
                f"{r['read_p95_ms']:14.0f} ms / {r['read_max_ms']:.0f} ms"
            )
        django, ours = results
        print(
            f"ratio ours/Django: total {ours['total_s'] / django['total_s']:.2f}×, longest transaction "
            f"{ours['longest_ms'] / django['longest_ms']:.3f}×, memory growth "
            f"{ours['memory_mb'] / max(django['memory_mb'], 1):.2f}×"
        )
    finally:
        if not ARGS.keep:
            _postgres.drop_database(os.environ["DATABASE_URL"])


if __name__ == "__main__":
    main()

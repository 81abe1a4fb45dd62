"""A team's year of data on Postgres, written through the same write paths as real runs, and the pages a team
opens every day timed on it.

    python bench/year.py [--size smoke|quick|tenth|full] [--writers N] [--keep] [--reuse] [--dump]

The year (full size): ~2,000 runs (external runs, as the SDK and every trainer report: the ingestion path
`webapp.rollouts.ingest.ingest_batch` that `POST /api/runs/<id>/events` calls), 100M metric points (20 long
runs of 100,000 steps × 25 keys, the rest 1,000 steps × 25 keys), 10M trajectories of six turns (token ids
and loss masks on a tenth of them), 100k comments through `comment_create` and 100k judgements through
`judgement_submit` on preference queues built by `queue_create`. `tenth` is a tenth of it (~8 GB, ~25 min at two
writers on two cores), `quick` a hundredth (minutes), `smoke` a ten-thousandth (seconds; CI's bench lane). Before writing it prints the disk it will need (the
bytes per metric point and per turn measured here, docs/scale.md), after, the bytes it wrote: the
database's own size, per metric point and per turn.

Then, through Django's test client as a signed-in member (the whole view: access, query, template), p50 /
p95 of: project home, runs list, the long run's page, its curves (`metrics.json`, every key), compare of 8
runs, the explorer (a filter, full-text search), a group, a trajectory, the annotation page — against the
goals (p95 ≤ 300 ms, the explorer ≤ 100 ms). `--dump` also times `pg_dump -Fc` and a `pg_restore` of it.

Environment: DATABASE_URL (default postgres://postgres@127.0.0.1:5432/rollout_bench_year[_<size>]: created,
migrated, dropped at the end unless --keep; --reuse measures a kept one without writing), REDIS_URL
(default redis://127.0.0.1:6379/14: ingestion broadcasts as in production).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import _postgres  # noqa: E402
from bench._measure import SMOKE  # noqa: E402


@dataclass(frozen=True)
class Year:
    runs: int
    long_runs: int
    long_steps: int
    short_steps: int
    metric_keys: int
    trajectories: int
    token_share: float  # of trajectories with token ids and loss masks
    comments: int
    judgements: int

    @property
    def metric_points(self) -> int:
        short = self.runs - self.long_runs
        return self.metric_keys * (self.long_runs * self.long_steps + short * self.short_steps)

    @property
    def turns(self) -> int:
        return self.trajectories * TURNS


SIZES = {
    "full": Year(2000, 20, 100_000, 1_000, 25, 10_000_000, 0.1, 100_000, 100_000),
    "tenth": Year(200, 2, 100_000, 1_000, 25, 1_000_000, 0.1, 10_000, 10_000),
    "quick": Year(20, 1, 100_000, 1_000, 25, 100_000, 0.1, 1_000, 1_000),
    "smoke": Year(4, 1, 2_000, 100, 5, 1_024, 0.1, 20, 20),
}
# Stored bytes (tables and indexes) per metric point and per turn, measured by this bench at quick size on
# 2026-12-02 (docs/scale.md); the estimate printed before writing.
BYTES_PER_POINT, BYTES_PER_TURN = 34, 315
GOAL_MS, EXPLORER_GOAL_MS = 300.0, 100.0
STEPS_PER_BATCH, GROUP_SIZE = 500, 8
PASSWORD = "year-bench-password"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="smoke" if SMOKE else "quick")
    parser.add_argument("--smoke", action="store_true", help="--size smoke")
    parser.add_argument("--keep", action="store_true", help="keep the database for a --reuse")
    parser.add_argument("--reuse", action="store_true", help="measure a kept database, write nothing")
    parser.add_argument("--dump", action="store_true", help="also time pg_dump -Fc and pg_restore")
    parser.add_argument(
        "--writers",
        type=int,
        default=1,
        help="writer processes, each a share of the runs (the cores: faster)",
    )
    parser.add_argument("--repeats", type=int, default=None, help="timed requests per page (20; smoke 3)")
    return parser.parse_args()


ARGS = parse()
YEAR = SIZES[ARGS.size]
os.environ.setdefault("DATABASE_URL", f"postgres://postgres@127.0.0.1:5432/rollout_bench_year_{ARGS.size}")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/14")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")


def database_name() -> str:
    return _postgres.database_name(os.environ["DATABASE_URL"])


_postgres.require_postgres(os.environ["DATABASE_URL"], "bench/year.py")
_postgres.create_database(os.environ["DATABASE_URL"], fresh=not ARGS.reuse)

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import reverse  # noqa: E402

from bench.ingest import TURNS_PER_TRAJECTORY as TURNS  # noqa: E402
from bench.ingest import trajectory  # noqa: E402
from webapp.experiments.models import Run  # noqa: E402
from webapp.projects.models import Membership, Project, Role  # noqa: E402
from webapp.projects.services import project_create  # noqa: E402
from webapp.review.models import PreferenceQueue  # noqa: E402
from webapp.review.services.collaboration import comment_create  # noqa: E402
from webapp.review.services.queues import judgement_submit, next_pair, queue_create  # noqa: E402
from webapp.rollouts.external import external_run_create  # noqa: E402
from webapp.rollouts.ingest import ingest_batch  # noqa: E402
from webapp.rollouts.models import Trajectory  # noqa: E402

PROJECT = "year"


def database_bytes() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_database_size(current_database())")
        return int(cursor.fetchone()[0])


def relation_bytes(*tables: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "WHERE c.relkind IN ('r', 'p') AND c.relname = ANY(%s)",
            [list(tables)],
        )
        return int(cursor.fetchone()[0])


def gb(size: float) -> str:
    return f"{size / 1e9:.2f} GB"


class Seq:
    """Each run's event sequence numbers, as a reporter keeps them."""

    def __init__(self) -> None:
        self.next: dict[int, int] = {}

    def take(self, run: Run, n: int = 1) -> int:
        first = self.next.get(run.pk, 1)
        self.next[run.pk] = first + n
        return first


def write_metrics(run: Run, steps: int, seq: Seq, keys: list[str]) -> None:
    for start in range(0, steps, STEPS_PER_BATCH):
        count = min(STEPS_PER_BATCH, steps - start)
        first = seq.take(run, count)
        now = time.time()
        events = [
            {
                "seq": first + i,
                "type": "metrics",
                "step": start + i,
                "time": now,
                "values": {key: round((start + i) * 1e-4 + k * 0.01, 6) for k, key in enumerate(keys)},
            }
            for i in range(count)
        ]
        ingest_batch(run=run, payload={"events": events})


def write_trajectories(run: Run, count: int, seq: Seq, rng: random.Random, token_share: float) -> None:
    groups_per_step = 8
    per_step = groups_per_step * GROUP_SIZE
    for step in range(max(1, -(-count // per_step))):
        items = []
        for n in range(min(per_step, count - step * per_step)):
            group, sample = divmod(n, GROUP_SIZE)
            item = trajectory(group, sample, step)
            item["reward"] = float(rng.random() < 0.5)
            if rng.random() >= token_share:
                for turn in item["turns"]:
                    turn.pop("token_ids", None)
                    turn.pop("loss_mask", None)
            items.append(item)
        ingest_batch(
            run=run,
            payload={
                "events": [{"seq": seq.take(run), "type": "trajectories", "step": step, "items": items}]
            },
        )


def write_year(rng: random.Random) -> tuple[Project, list[Run]]:
    users = get_user_model().objects
    owner = users.create_user("year-owner", password=PASSWORD)
    annotators = [users.create_user(f"year-annotator-{i}", password=PASSWORD) for i in range(5)]
    project = project_create(name="Year", owner=owner, slug=PROJECT)
    for annotator in annotators:
        Membership.objects.get_or_create(project=project, user=annotator, defaults={"role": Role.ANNOTATOR})
    runs = [
        external_run_create(project=project, user=owner, name=f"run {index:04d}")[0]
        for index in range(YEAR.runs)
    ]
    writers = max(1, min(ARGS.writers, YEAR.runs))
    if writers == 1:
        write_runs(runs, 0, 1, rng.random(), owner, annotators)
    else:
        # Each writer process takes every n-th run (a run's events come from one writer, in order, as from
        # one trainer); the connections are closed first so that no child shares the parent's socket.
        connections.close_all()
        context = multiprocessing.get_context("fork")
        children = [
            context.Process(target=write_runs, args=(runs, w, writers, rng.random(), owner, annotators))
            for w in range(writers)
        ]
        for child in children:
            child.start()
        for child in children:
            child.join()
        failed = [child.exitcode for child in children if child.exitcode]
        if failed:
            raise SystemExit(f"{len(failed)} of {writers} writer processes failed (exit codes {failed})")
    return project, runs


def write_runs(runs: list[Run], first: int, every: int, seed: float, owner, annotators: list) -> None:
    """Write the metrics and trajectories of runs[first::every] (one writer's share of the year), then its
    share of the comments and judgements on them (judging is ~80 ms a pair: at full size one process took
    hours for the 100k)."""
    rng = random.Random(seed)
    keys = [f"metric/{k:02d}" for k in range(YEAR.metric_keys)]
    seq = Seq()
    per_run = YEAR.trajectories // YEAR.runs
    started, last_print = time.perf_counter(), 0.0
    mine = range(first, len(runs), every)
    for done, index in enumerate(mine, 1):
        long = index < YEAR.long_runs
        write_metrics(runs[index], YEAR.long_steps if long else YEAR.short_steps, seq, keys)
        write_trajectories(runs[index], per_run, seq, rng, YEAR.token_share)
        if time.perf_counter() - last_print > 10 or done == len(mine):
            last_print = time.perf_counter()
            who = f"writer {first + 1}/{every}: " if every > 1 else ""
            print(f"  {who}{done:,}/{len(mine):,} runs written, {last_print - started:.0f} s", flush=True)
    write_review([runs[i] for i in mine], owner, annotators, rng, first, every)
    connections.close_all()


def write_review(
    annotated: list[Run], owner, annotators: list, rng: random.Random, first: int, every: int
) -> None:
    """A writer's part of the review: the comments numbered first, first + every, … on trajectories of
    `annotated` (its runs), and queues of those runs judged until its part of the judgements is in."""
    project = annotated[0].project
    ids = list(Trajectory.objects.filter(run__in=annotated).values_list("pk", flat=True))
    comments = range(first, YEAR.comments, every)
    for n in comments:
        trajectory_row = Trajectory.objects.get(pk=rng.choice(ids))
        author = rng.choice([owner, *annotators])
        comment_create(trajectory=trajectory_row, author=author, body=f"note {n}: the carry digit again")
    judged, wanted = 0, len(range(first, YEAR.judgements, every))
    for run in annotated:
        if judged >= wanted:
            break
        queue = queue_create(
            project=project,
            user=owner,
            name=f"queue {run.pk}",
            runs=[run],
            annotators=annotators,
            max_pairs=min(1000, wanted - judged),
            distinct_rewards=False,
        )
        for annotator in annotators * 1000:
            assignment = next_pair(queue=queue, annotator=annotator)
            if assignment is None or judged >= wanted:
                break
            judgement_submit(pair=assignment.pair, annotator=annotator, choice=rng.choice("ab"))
            judged += 1
    who = f"writer {first + 1}/{every}: " if every > 1 else ""
    print(
        f"  {who}{len(comments):,} comments, {judged:,} judgements",
        flush=True,
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def measure(project: Project) -> bool:
    runs = list(Run.objects.filter(project=project).order_by("pk"))
    long_run = runs[0]
    client = Client()
    assert client.login(username="year-owner", password=PASSWORD)
    some = Trajectory.objects.filter(run=long_run).order_by("pk").first()
    queue = PreferenceQueue.objects.filter(project=project).first()
    slug = project.slug
    pages = {
        "project home": (reverse("projects:home", args=[slug]), {}, GOAL_MS),
        "runs list": (reverse("experiments:run_list", args=[slug]), {}, GOAL_MS),
        "long run's page": (reverse("experiments:run_detail", args=[slug, long_run.pk]), {}, GOAL_MS),
        "long run's curves (every key)": (
            reverse("live:metrics_json", args=[slug, long_run.pk]),
            {},
            GOAL_MS,
        ),
        "compare of 8 runs": (
            reverse("live:compare", args=[slug]),
            {"runs": ",".join(str(r.pk) for r in runs[:8])},
            GOAL_MS,
        ),
        "explorer, one run + reward filter": (
            reverse("review:explorer", args=[slug]),
            {"run": str(runs[-1].pk), "reward_min": "1"},
            EXPLORER_GOAL_MS,
        ),
        "explorer, full-text search": (
            reverse("review:explorer", args=[slug]),
            {"q": "carry"},
            EXPLORER_GOAL_MS,
        ),
        "a group": (
            reverse("rollouts:group_detail", args=[slug, long_run.pk, some.step, some.group_index]),
            {},
            GOAL_MS,
        ),
        "a trajectory": (reverse("rollouts:trajectory_detail", args=[slug, some.pk]), {}, GOAL_MS),
    }
    if queue is not None:
        pages["the annotation queue"] = (reverse("review:queue_detail", args=[slug, queue.pk]), {}, GOAL_MS)
    repeats = ARGS.repeats or (3 if ARGS.size == "smoke" else 20)
    all_met = True
    for name, (url, params, goal) in pages.items():
        timings = []
        for i in range(repeats + 2):
            started = time.perf_counter()
            response = client.get(url, params)
            elapsed = (time.perf_counter() - started) * 1000
            assert response.status_code == 200, (name, url, response.status_code, response.content[:300])
            if i >= 2:  # the first two warm the caches
                timings.append(elapsed)
        p95 = percentile(timings, 0.95)
        met = p95 <= goal
        all_met &= met
        print(
            f"{name:34s} p50 {statistics.median(timings):7.1f} ms   p95 {p95:7.1f} ms   "
            f"goal ≤ {goal:.0f} ms: {'meets' if met else 'MISSES'}"
        )
    return all_met


def dump_and_restore() -> None:
    if not shutil.which("pg_dump"):
        print("pg_dump not found: skipped the dump and restore")
        return
    parsed = urlparse(os.environ["DATABASE_URL"])
    base = [
        "-h",
        parsed.hostname or "127.0.0.1",
        "-p",
        str(parsed.port or 5432),
        "-U",
        parsed.username or "postgres",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "year.dump"
        started = time.perf_counter()
        subprocess.run(["pg_dump", *base, "-Fc", "-f", str(dump), database_name()], check=True)
        dumped = time.perf_counter() - started
        target = f"{database_name()}_restore"
        subprocess.run(["dropdb", *base, "--if-exists", target], check=True)
        subprocess.run(["createdb", *base, target], check=True)
        started = time.perf_counter()
        subprocess.run(["pg_restore", *base, "-j", "2", "-d", target, str(dump)], check=True)
        restored = time.perf_counter() - started
        subprocess.run(["dropdb", *base, "--if-exists", target], check=True)
        print(f"pg_dump -Fc {dumped:.1f} s ({gb(dump.stat().st_size)}), pg_restore -j 2 {restored:.1f} s")


def main() -> None:
    call_command("migrate", verbosity=0)
    print(
        f"a year at size {ARGS.size}: {YEAR.runs:,} runs, {YEAR.metric_points:,} metric points, "
        f"{YEAR.trajectories:,} trajectories ({YEAR.turns:,} turns), {YEAR.comments:,} comments, "
        f"{YEAR.judgements:,} judgements"
    )
    project = Project.objects.filter(slug=PROJECT).first()
    if not ARGS.reuse or project is None:
        need = YEAR.metric_points * BYTES_PER_POINT + YEAR.turns * BYTES_PER_TURN
        free = shutil.disk_usage("/").free
        print(f"needs ~{gb(need)} of database disk ({gb(free)} free where this runs)", flush=True)
        before = database_bytes()
        started = time.perf_counter()
        project, _ = write_year(random.Random(20261202))
        took = time.perf_counter() - started
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
        wrote = database_bytes() - before
        points = relation_bytes("rollouts_metricchunk")
        turns = relation_bytes("rollouts_turn")
        print(
            f"wrote {gb(wrote)} in {took / 60:.1f} min: {points / max(1, YEAR.metric_points):.1f} bytes per "
            f"metric point (MetricChunk with its indexes), {turns / max(1, YEAR.turns):.0f} bytes per turn "
            f"(Turn with its indexes and TOAST)"
        )
    met = measure(project)
    if ARGS.dump:
        dump_and_restore()
    if ARGS.keep or ARGS.reuse:
        print(f"kept database {database_name()} (--reuse measures it again)")
    else:
        _postgres.drop_database(os.environ["DATABASE_URL"])
        print(f"dropped database {database_name()}")
    print(f"every page {'meets' if met else 'does NOT meet'} its goal at size {ARGS.size}")


if __name__ == "__main__":
    main()

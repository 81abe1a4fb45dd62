"""A 100,000-point curve read back downsampled (`webapp.rollouts.selectors.metrics.metric_series`), on the embedded
default (SQLite in a fresh var directory) or on Postgres (DATABASE_URL=postgres://…). Issue 25's goal:
≤ 0.3 s on SQLite as on Postgres. Prints the median of five reads per x-axis beside the goal.

Environment: ROLLOUT_STUDIO_VAR (default var/bench-curves, wiped), DATABASE_URL (default: that SQLite).
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import size  # noqa: E402

VAR = Path(os.environ.setdefault("ROLLOUT_STUDIO_VAR", str(ROOT / "var" / "bench-curves")))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

POINTS, GOAL_S = size(100_000, smoke=2_000), 0.3


def main() -> None:
    if not os.environ.get("DATABASE_URL"):
        shutil.rmtree(VAR, ignore_errors=True)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from webapp.experiments.models import Run
    from webapp.projects.models import Project
    from webapp.rollouts.ingest import insert_metrics
    from webapp.rollouts.selectors.metrics import metric_series

    call_command("migrate", verbosity=0)
    project, _ = Project.objects.get_or_create(slug="bench-curves", defaults={"name": "bench curves"})
    run = Run.objects.create(project=project, name=f"curve {time.time():.0f}", preset="grpo")
    insert_metrics(
        run.pk,
        [
            (s, 1.7e9 + 2.5 * s, 1000 * s, {"reward/mean": math.sin(s / 5000) + 0.1 * math.sin(s)})
            for s in range(POINTS)
        ],
    )
    print(f"{connection.vendor}: a {POINTS:,}-point curve, downsampled to 2,000 points (median of 5)")
    for x in ("step", "time", "tokens"):
        times = []
        for _ in range(5):
            started = time.perf_counter()
            metric_series(run, ["reward/mean"], max_points=2000, x=x)
            times.append(time.perf_counter() - started)
        median = statistics.median(times)
        print(f"  against {x:6}: {median:.3f} s (goal ≤ {GOAL_S} s) {'ok' if median <= GOAL_S else 'MISSED'}")
    run.delete()


if __name__ == "__main__":
    main()

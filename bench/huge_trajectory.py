"""A huge trajectory on Postgres: 10,000 turns carrying 300,000 tool events (tens of MB), read through the
real server as a browser would. Reports p95 (and p50) wall times of:

- open: the trajectory page (its first screen: header and the first turns), a cold reader each time;
- open deep: the page opened at a turn far down (`?from=N`: a search hit, a link to a turn);
- scroll: the next window of turns at a random place (what scrolling fetches);
- search: the turns that contain a word, one rare and one in every tool turn.

Real pieces: the dashboard under daphne (bench/ingest.py's server) on Postgres + Redis, a signed-in
session, HTTP over a keep-alive connection. The trajectory is written straight into the tables (the wire
format caps a trajectory at 2,000 turns per item; the reader is what this measures) and deleted after.

Environment: DATABASE_URL (postgres://postgres@127.0.0.1:5432/rollout_bench), REDIS_URL,
HUGE_TURNS (10000), HUGE_EVENTS_PER_TOOL_TURN (60), HUGE_REPEATS (30).
"""

from __future__ import annotations

import http.client
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import _postgres, ingest  # noqa: E402  (ingest sets the bench's environment defaults)
from bench._measure import size  # noqa: E402

TURNS = size(int(os.environ.get("HUGE_TURNS", "10000")), smoke=200)
EVENTS_PER_TOOL_TURN = size(int(os.environ.get("HUGE_EVENTS_PER_TOOL_TURN", "60")), smoke=5)
REPEATS = size(int(os.environ.get("HUGE_REPEATS", "30")), smoke=3)
GOAL_OPEN_S = 1.0
RARE_WORD = "zanzibar"


def make_trajectory():
    """A user, a project, an external run and the huge trajectory; returns (user, run, trajectory)."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from webapp.projects.services import project_create
    from webapp.rollouts.external import external_run_create
    from webapp.rollouts.models import Trajectory, Turn

    call_command("migrate", verbosity=0)
    stamp = f"{int(time.time())}-{os.getpid()}"
    user = get_user_model().objects.create_user(f"huge-bench-{stamp}", password=None)
    project = project_create(name=f"Huge bench {stamp}", owner=user)
    run, _token = external_run_create(project=project, user=user, name="huge")
    rng = random.Random(0)
    words = ["list", "files", "read", "grep", "patch", "test", "build", "error", "retry", "done"]
    trajectory = Trajectory.objects.create(
        run=run,
        step=1,
        group_index=0,
        sample_index=0,
        task_id="huge-agent-task",
        reward=1.0,
        num_turns=TURNS,
        num_tool_calls=TURNS // 2,
        prompt="Fix the failing build.",
    )
    started, batch, total_bytes = time.perf_counter(), [], 0
    for index in range(TURNS):
        if index % 2 == 0:
            text = " ".join(rng.choice(words) for _ in range(200))
            if index % 2500 == 0:
                text += f" {RARE_WORD}"
            turn = Turn(
                trajectory=trajectory,
                index=index,
                role="assistant",
                text=text,
                tool_name="shell",
                tool_args={"command": f"step {index}"},
            )
        else:
            events = [
                {"t": index * 100 + e, "kind": rng.choice(words), "path": f"src/mod{e}.py", "ok": e % 7 != 0}
                for e in range(EVENTS_PER_TOOL_TURN)
            ]
            result = "\n".join(f"{ev['t']} {ev['kind']} {ev['path']} ok={ev['ok']}" for ev in events)
            turn = Turn(
                trajectory=trajectory,
                index=index,
                role="tool",
                text=result,
                tool_name="shell",
                tool_result=result,
                tool_args={"events": events},
            )
        total_bytes += len(turn.text) + len(turn.tool_result) + len(str(turn.tool_args))
        batch.append(turn)
        if len(batch) == 1000:
            Turn.objects.bulk_create(batch)
            batch = []
    Turn.objects.bulk_create(batch)
    events = (TURNS // 2) * EVENTS_PER_TOOL_TURN
    print(
        f"  wrote {TURNS:,} turns with {events:,} tool events ({total_bytes / 1e6:.0f} MB of text and "
        f"arguments) in {time.perf_counter() - started:.0f} s",
        flush=True,
    )
    return user, run, trajectory


def session_cookie(user) -> str:
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def timed_get(conn: http.client.HTTPConnection, path: str, cookie: str) -> tuple[float, int, int]:
    started = time.perf_counter()
    conn.request("GET", path, headers={"Cookie": cookie})
    response = conn.getresponse()
    body = response.read()
    elapsed = time.perf_counter() - started
    if response.status != 200:
        raise RuntimeError(f"GET {path}: {response.status} {body[:300]!r}")
    return elapsed, len(body), response.status


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    _postgres.ensure_database(os.environ["DATABASE_URL"])
    user, run, trajectory = make_trajectory()
    port = ingest.free_port()
    proc = ingest.start_ours(port)
    results: dict[str, tuple[list[float], int]] = {}
    try:
        ingest.settle([proc])
        cookie = session_cookie(user)
        slug = run.project.slug
        base = f"/p/{slug}/trajectories/{trajectory.pk}/"
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        rng = random.Random(1)
        cases = {
            "open": lambda: base,
            "open deep": lambda: f"{base}?from={rng.randrange(TURNS // 2, TURNS - 30)}",
            "scroll": lambda: f"{base}turns/?start={rng.randrange(0, TURNS - 60)}",
            "search (rare word)": lambda: f"{base}search/?q={RARE_WORD}",
            "search (common word)": lambda: f"{base}search/?q=grep",
        }
        for name, make_path in cases.items():
            timed_get(conn, make_path(), cookie)  # warm: imports, plans, the connection
            times, size = [], 0
            for _ in range(REPEATS):
                elapsed, size, _ = timed_get(conn, make_path(), cookie)
                times.append(elapsed)
            results[name] = (times, size)
            print(
                f"  {name:21} p50 {statistics.median(times) * 1000:7.1f} ms  p95 {p95(times) * 1000:7.1f} ms  "
                f"({size / 1000:.0f} kB answers, {REPEATS} requests)",
                flush=True,
            )
        conn.close()
    finally:
        ingest.stop(proc)
        ingest.remove_ours({run.pk})
    open_p95 = p95(results["open"][0])
    print(
        "RESULT huge trajectory ({:,} turns, {:,} tool events) on Postgres: open p95 {:.0f} ms (goal ≤ {:.0f} ms, "
        "{}), open deep p95 {:.0f} ms, scroll p95 {:.0f} ms, search p95 {:.0f} ms rare / {:.0f} ms common "
        "[{} cores, load average {:.1f}]".format(
            TURNS,
            (TURNS // 2) * EVENTS_PER_TOOL_TURN,
            open_p95 * 1000,
            GOAL_OPEN_S * 1000,
            "met" if open_p95 <= GOAL_OPEN_S else "MISSED",
            p95(results["open deep"][0]) * 1000,
            p95(results["scroll"][0]) * 1000,
            p95(results["search (rare word)"][0]) * 1000,
            p95(results["search (common word)"][0]) * 1000,
            os.cpu_count(),
            os.getloadavg()[0],
        )
    )


if __name__ == "__main__":
    main()

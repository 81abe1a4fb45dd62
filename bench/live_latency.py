"""How long from a trainer reporting an event to that event reaching every browser watching the run.

Real pieces only: a server (subprocess: daphne, one process, as the demo runs it; or with
LIVE_BENCH_SERVER=uvicorn, LIVE_BENCH_WORKERS processes, as compose runs it) serving webapp.asgi on
Postgres + Redis, 50 websocket
subscribers signed in with session cookies (the `websockets` client), and events posted one batch at a
time through the HTTP ingestion API, exactly as a trainer's reporter does.

What is measured, per event and subscriber, on one monotonic clock (this process holds both the
poster and the subscribers):
- end-to-end: from the moment the trainer starts sending its POST to the moment the subscriber has the
  event frame. It includes the ingestion itself (validation, the database transaction, the commit), the
  channel layer hop through Redis, the consumer and the websocket.
- after reply: arrival minus the moment the POST's 200 reply arrived at the trainer. Often negative:
  the broadcast leaves at commit, before the HTTP response is written. This is the push latency the
  goal (p99 under 100 ms) is about; the last line reports it and, next to it, the end-to-end figure.
- ingestion request: the POST's own round trip, for reference.
- baseline, in the same run: after each POST the trainer's connection also times a `GET /healthz`
  through the same daphne — the floor any request pays on this machine at this moment. The last line
  gives the end-to-end p99 as a ratio of it, which stays comparable when other work loads the machine.

Environment: DATABASE_URL (default postgres://postgres@127.0.0.1:5432/rollout_bench?pool=true, as
deployed; created and migrated if missing), REDIS_URL (default redis://127.0.0.1:6379/14), LIVE_BENCH_SUBSCRIBERS (50),
LIVE_BENCH_EVENTS (300), LIVE_BENCH_INTERVAL_S (0.05 between batches), LIVE_BENCH_PROFILE (a path: record
daphne with py-spy — `pip install py-spy`, the bench extra — as collapsed stacks there, for profiling).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import _postgres  # noqa: E402
from bench._measure import size  # noqa: E402

# As deployed (docker-compose.yml): psycopg's pool, or every request under ASGI connects anew.
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/rollout_bench?pool=true")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/14")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

SERVER = os.environ.get("LIVE_BENCH_SERVER", "daphne")
WORKERS = int(os.environ.get("LIVE_BENCH_WORKERS", "2"))
SUBSCRIBERS = size(int(os.environ.get("LIVE_BENCH_SUBSCRIBERS", "50")), smoke=5)
EVENTS = size(int(os.environ.get("LIVE_BENCH_EVENTS", "300")), smoke=20)
INTERVAL_S = float(os.environ.get("LIVE_BENCH_INTERVAL_S", "0.05"))
WARMUP = 10  # the first events pay for cold caches and connection pools; not counted
GOAL_MS = 100.0
END_TO_END_GOAL_MS = 50.0  # POST sent -> every subscriber has the frame
POLLING_PEER_MS = 1000.0  # the fastest polling peer (Inspect) refreshes every second


def setup_django_and_run() -> tuple[str, int, str, str]:
    """Migrate, then create a user, a project and a run. Returns (session cookie, run id, token, slug)."""
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from webapp.experiments.services import environment_create, rubric_create, run_create
    from webapp.projects.services import project_create

    call_command("migrate", verbosity=0)
    stamp = f"{int(time.time())}-{os.getpid()}"
    user = get_user_model().objects.create_user(f"bench-{stamp}", password=None)
    project = project_create(name=f"Live bench {stamp}", owner=user)
    environment = environment_create(
        project=project, name="arith", kind="arithmetic_calculator", config={}, user=user
    )
    rubric = rubric_create(
        project=project,
        name="r",
        user=user,
        spec={
            "aggregation": "weighted_sum",
            "criteria": [{"name": "correct", "kind": "numeric_match", "weight": 1.0, "params": {}}],
        },
    )
    run, token = run_create(
        project=project,
        name="bench",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=user,
        dispatch=False,
    )
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    return cookie, run.pk, token, project.slug


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_label() -> str:
    return f"uvicorn ×{WORKERS}" if SERVER == "uvicorn" else "daphne"


def start_server(port: int) -> subprocess.Popen:
    log_path = ROOT / "var" / f"bench-live-{SERVER}.log"
    log_path.parent.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "LOG_LEVEL": "WARNING"}
    if SERVER == "uvicorn":  # as docker-compose.yml serves
        command = [
            *(sys.executable, "-m", "uvicorn", "webapp.asgi:application", "--host", "127.0.0.1"),
            *("--port", str(port), "--workers", str(WORKERS), "--no-access-log"),
        ]
    else:
        command = [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "webapp.asgi:application",
        ]
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=open(log_path, "w"),
        stderr=subprocess.STDOUT,
    )
    import requests

    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{SERVER} exited; see {log_path}")
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).ok:
                return proc
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{SERVER} did not answer in 60 s; see {log_path}")
        time.sleep(0.2)


def start_profiler(pid: int) -> subprocess.Popen | None:
    """py-spy recording daphne (LIVE_BENCH_PROFILE=path), or None."""
    path = os.environ.get("LIVE_BENCH_PROFILE")
    if not path:
        return None
    return subprocess.Popen(
        [
            "py-spy",
            "record",
            "--pid",
            str(pid),
            "--rate",
            "250",
            "--format",
            "raw",
            "--idle",
            "--output",
            path,
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def metrics_event(seq: int) -> dict:
    return {
        "seq": seq,
        "type": "metrics",
        "time": time.time(),
        "step": seq,
        "tokens": 1000 * seq,
        "values": {"reward/mean": 0.5, "reward/std": 0.1, "kl": 0.01, "entropy": 1.2, "step_time": 2.0},
    }


async def subscriber(
    url: str,
    cookie: str,
    origin: str,
    arrivals: dict[int, list[float]],
    ready: asyncio.Event,
    counter: list[int],
    done: asyncio.Event,
) -> None:
    from websockets.asyncio.client import connect

    async with connect(url, origin=origin, additional_headers=[("Cookie", cookie)], max_queue=None) as ws:
        first = json.loads(await ws.recv())
        assert first["type"] == "snapshot", first
        counter[0] += 1
        if counter[0] == SUBSCRIBERS:
            ready.set()
        while not done.is_set():
            try:
                raw = await asyncio.wait_for(ws.recv(), timeout=0.5)
            except TimeoutError:
                continue
            now = time.perf_counter()
            frame = json.loads(raw)
            seq = frame.get("event", {}).get("seq") if frame.get("type") == "event" else None
            if seq is not None:
                arrivals.setdefault(seq, []).append(now)


def poster(
    base: str, run_id: int, token: str, sent: dict[int, float], replied: dict[int, float], floor: list[float]
) -> None:
    """The trainer's side: one batch at a time, over one keep-alive HTTP connection; between batches, the
    baseline request."""
    import requests

    session = requests.Session()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    for seq in range(1, EVENTS + 1):
        body = json.dumps({"events": [metrics_event(seq)]})
        sent[seq] = time.perf_counter()
        response = session.post(f"{base}/api/runs/{run_id}/events", data=body, headers=headers, timeout=10)
        replied[seq] = time.perf_counter()
        if response.status_code != 200:
            raise RuntimeError(f"ingestion answered {response.status_code}: {response.text[:300]}")
        time.sleep(INTERVAL_S / 2)
        started = time.perf_counter()
        session.get(f"{base}/healthz", timeout=10)
        if seq > WARMUP:
            floor.append((time.perf_counter() - started) * 1000)
        time.sleep(max(0.0, INTERVAL_S / 2 - (time.perf_counter() - started)))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


async def measure(
    port: int, cookie: str, run_id: int, token: str
) -> tuple[list[float], list[float], list[float], list[float], int]:
    base = f"http://127.0.0.1:{port}"
    url = f"ws://127.0.0.1:{port}/ws/runs/{run_id}/"
    arrivals: dict[int, list[float]] = {}
    ready, done = asyncio.Event(), asyncio.Event()
    counter = [0]
    tasks = [
        asyncio.create_task(subscriber(url, cookie, base, arrivals, ready, counter, done))
        for _ in range(SUBSCRIBERS)
    ]
    await asyncio.wait_for(ready.wait(), timeout=60)
    sent: dict[int, float] = {}
    replied: dict[int, float] = {}
    floor: list[float] = []
    await asyncio.to_thread(poster, base, run_id, token, sent, replied, floor)
    # Let the last frames land, then stop the subscribers.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(arrivals.get(EVENTS, [])) < SUBSCRIBERS:
        await asyncio.sleep(0.05)
    done.set()
    await asyncio.gather(*tasks)
    end_to_end, after_reply, missing = [], [], 0
    ingestion = [(replied[seq] - sent[seq]) * 1000 for seq in range(WARMUP + 1, EVENTS + 1)]
    for seq in range(WARMUP + 1, EVENTS + 1):
        got = arrivals.get(seq, [])
        missing += SUBSCRIBERS - len(got)
        end_to_end.extend((t - sent[seq]) * 1000 for t in got)
        after_reply.extend((t - replied[seq]) * 1000 for t in got)
    return end_to_end, after_reply, ingestion, floor, missing


def main() -> None:
    _postgres.ensure_database(os.environ["DATABASE_URL"])
    cookie, run_id, token, _slug = setup_django_and_run()
    port = free_port()
    server = start_server(port)
    profiler = start_profiler(server.pid)
    try:
        end_to_end, after_reply, ingestion, floor, missing = asyncio.run(measure(port, cookie, run_id, token))
    finally:
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)  # py-spy writes its file when interrupted
            profiler.wait(timeout=60)
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
    counted = EVENTS - WARMUP
    print(
        f"live latency: {SUBSCRIBERS} websocket subscribers, {counted} events (after {WARMUP} warm-up), "
        f"one batch every {INTERVAL_S * 1000:.0f} ms; {server_label()} on {urlparse(os.environ['DATABASE_URL']).scheme} "
        f"+ {urlparse(os.environ['REDIS_URL']).scheme}; {os.cpu_count()} CPU cores shared by everything"
    )
    print(f"deliveries: {len(end_to_end)} of {counted * SUBSCRIBERS} ({missing} missing)")
    for name, values in [
        (f"baseline: GET /healthz through the same {SERVER}", floor),
        ("ingestion request (POST sent -> 200 received)", ingestion),
        ("end-to-end (POST sent -> frame received)", end_to_end),
        ("after reply (200 received -> frame received)", after_reply),
    ]:
        print(
            f"{name}: p50 {percentile(values, 50):.1f} ms, p95 {percentile(values, 95):.1f} ms, "
            f"p99 {percentile(values, 99):.1f} ms, max {max(values):.1f} ms, mean {statistics.fmean(values):.1f} ms"
        )
    p99_reply = percentile(after_reply, 99)
    p99_end_to_end = percentile(end_to_end, 99)
    verdict = "meets" if p99_reply <= GOAL_MS and not missing else "MISSES"
    p99_floor = percentile(floor, 99)
    print(
        f"p99 {p99_reply:.1f} ms from the ingestion API's 200 to the subscriber: {verdict} the {GOAL_MS:.0f} ms goal "
        f"(polling peers: up to {POLLING_PEER_MS:.0f} ms); end-to-end incl. the ingestion request p99 "
        f"{p99_end_to_end:.1f} ms ({'meets' if p99_end_to_end <= END_TO_END_GOAL_MS else 'misses'} the "
        f"{END_TO_END_GOAL_MS:.0f} ms goal)"
    )
    print(
        f"end-to-end p99 / baseline p99 = {p99_end_to_end / p99_floor:.2f}x "
        f"({p99_end_to_end:.1f} ms vs {p99_floor:.1f} ms for a request that does nothing)"
    )
    if os.environ.get("LIVE_BENCH_PROFILE"):
        print(f"daphne profile (collapsed stacks): {os.environ['LIVE_BENCH_PROFILE']}")


if __name__ == "__main__":
    main()

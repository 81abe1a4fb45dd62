"""The users of bench/soak.py's half hour, each a thread or an asyncio task on 127.0.0.1: external trainers
streaming through the SDK, browsers watching run pages over websockets, readers opening pages and API
lists, annotators judging through the API. Each records what it saw in one `Record`."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from dataclasses import dataclass, field

import requests

METRIC_KEYS = [f"train/metric_{i}" for i in range(20)] + [
    "reward/mean",
    "reward/std",
    "kl",
    "entropy",
    "loss",
]


@dataclass
class Sample:
    at: float  # seconds since the soak began
    kind: str  # "page", "api", "live"
    name: str
    ms: float
    status: int  # HTTP status; 0 for a connection that failed; 200 for a live event


class Record:
    """What every actor saw, on one clock (`time.monotonic()` since `started`). Thread-safe."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.samples: list[Sample] = []
        self.outages: list[tuple[float, float]] = []  # [start, end) of a planned web restart
        self.counters: dict[str, int] = {}
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self.started

    def add(self, kind: str, name: str, ms: float, status: int) -> None:
        with self._lock:
            self.samples.append(Sample(self.now(), kind, name, ms, status))

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counters[name] = self.counters.get(name, 0) + n

    def in_outage(self, at: float, grace_s: float = 5.0, began: float | None = None) -> bool:
        """Whether a request that ended `at` (and began `began`) overlapped a planned restart (+ grace): one
        sent before the restart or during it can fail after it, when its connection is reset or refused."""
        began = at if began is None else began
        return any(began <= end + grace_s and at >= start for start, end in self.outages)


def timed_request(
    session: requests.Session, record: Record, kind: str, name: str, method: str, url: str, **kw
):
    started = time.perf_counter()
    try:
        response = session.request(method, url, timeout=30, **kw)
    except requests.RequestException as exc:
        # Which failure: a refused connection (the server away) and a 30 s timeout (an answer too slow)
        # are different findings.
        record.count(f"request failures ({type(exc).__name__})")
        record.add(kind, name, (time.perf_counter() - started) * 1000, 0)
        return None
    record.add(kind, name, (time.perf_counter() - started) * 1000, response.status_code)
    return response


# --- external trainers -------------------------------------------------------------------------------------


@dataclass
class Trainer:
    """One external trainer: registers a run through the SDK, then logs `rate` metric points a second (25
    keys a step) and a group of trajectories every `trajectory_every` steps until told to stop."""

    url: str
    api_token: str
    project: str
    name: str
    rate: float
    trajectory_every: int = 10
    run_id: int = 0
    points: int = 0
    trajectories: int = 0
    stats: dict = field(default_factory=dict)
    finished_ok: bool = False

    def run(self, stop: threading.Event) -> None:
        from trainers.sdk import Studio

        studio = Studio(self.url, api_token=self.api_token)
        run = studio.start_run(project=self.project, name=self.name, config={"soak": True})
        self.run_id = run.id
        steps_per_s = self.rate / len(METRIC_KEYS)
        started, step = time.monotonic(), 0
        while not stop.is_set():
            step += 1
            run.log_metrics(step, {key: (step % 100) * 0.01 + k for k, key in enumerate(METRIC_KEYS)})
            self.points += len(METRIC_KEYS)
            if step % self.trajectory_every == 0:
                self.trajectories += run.log_trajectories(step, trajectory_group(step))
            delay = started + step / steps_per_s - time.monotonic()
            if delay > 0:
                stop.wait(delay)
        self.finished_ok = run.finish("SUCCEEDED", timeout_s=120)
        self.stats = run.stats


def trajectory_group(step: int, samples: int = 4) -> list[dict]:
    """A group of 3-turn tool-using episodes (an assistant turn for annotators to judge)."""
    items = []
    for sample in range(samples):
        a, b = step % 50, sample + 1
        items.append(
            {
                "task_id": f"soak-{step}",
                "prompt": f"What is {a} + {b}?",
                "reward": float(sample % 2),
                "turns": [
                    {"role": "user", "text": f"What is {a} + {b}? Answer in <answer></answer>."},
                    {"role": "assistant", "text": f"Let me add. <answer>{a + b - sample % 2}</answer>"},
                    {"role": "user", "text": "Thanks."},
                ],
            }
        )
    return items


# --- readers and annotators ----------------------------------------------------------------------------------


def reader(
    base: str,
    cookie: dict,
    paths: list[tuple[str, str, str]],
    record: Record,
    stop: threading.Event,
    pause_s: float,
) -> None:
    """A teammate clicking around: each (kind, name, path) in turn, with a pause between."""
    session = requests.Session()
    session.cookies.update(cookie)
    while not stop.is_set():
        for kind, name, path in paths:
            if stop.is_set():
                return
            timed_request(session, record, kind, name, "GET", base + path)
            stop.wait(pause_s * random.uniform(0.5, 1.5))


def annotator(
    base: str,
    token: str,
    slug: str,
    runs: list[int],
    record: Record,
    stop: threading.Event,
    pause_s: float,
    who: int,
) -> None:
    """An annotator judging through the API: find a trajectory of an external run in the explorer list,
    read its turn judgements, mark its assistant turn wrong, tag it and comment on it."""
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    while not stop.is_set():
        query = f"run={random.choice(runs)}"
        listing = timed_request(
            session,
            record,
            "api",
            "explorer list",
            "GET",
            f"{base}/api/projects/{slug}/trajectories/?{query}",
        )
        external = listing.json().get("results", []) if listing is not None and listing.ok else []
        if not external:
            stop.wait(pause_s)
            continue
        target = random.choice(external)["id"]
        timed_request(
            session,
            record,
            "api",
            "turn judgements",
            "GET",
            f"{base}/api/trajectories/{target}/turn-judgements/",
        )
        answer = timed_request(
            session,
            record,
            "api",
            "judge a turn",
            "POST",
            f"{base}/api/trajectories/{target}/turn-judgements/",
            json={"verdict": "wrong", "turn_index": 1},
        )
        if answer is not None and answer.status_code == 201:
            record.count("turn judgements")
        timed_request(
            session,
            record,
            "api",
            "tag",
            "POST",
            f"{base}/api/trajectories/{target}/tags/",
            json={"name": f"soak-{who}"},
        )
        timed_request(
            session,
            record,
            "api",
            "comment",
            "POST",
            f"{base}/api/trajectories/{target}/comments/",
            json={"body": f"annotator {who}: the sum is off by one"},
        )
        record.count("comments")
        stop.wait(pause_s * random.uniform(0.5, 1.5))


# --- browsers on run pages -----------------------------------------------------------------------------------


@dataclass
class Watch:
    run_id: int
    last_seq: int = 0
    events: int = 0
    gaps: int = 0
    reconnects: int = 0


async def subscriber(
    ws_base: str, origin: str, cookie: str, watch: Watch, record: Record, stop: asyncio.Event
) -> None:
    """A run page's live connection, as static/js/live.js keeps it: resume from the last sequence number on
    a reconnect or a gap; each live event's delay from the trainer's clock (`time`) to its arrival."""
    from websockets.asyncio.client import connect

    while not stop.is_set():
        try:
            url = f"{ws_base}/ws/runs/{watch.run_id}/?last_seq={watch.last_seq}"
            async with connect(
                url, origin=origin, additional_headers=[("Cookie", cookie)], max_queue=None
            ) as ws:
                await follow(ws, watch, record, stop)
        except (TimeoutError, OSError, Exception) as exc:  # noqa: BLE001 — a dropped socket: reconnect
            if stop.is_set():
                return
            record.count(f"websocket drops ({type(exc).__name__})")
        watch.reconnects += 1
        await asyncio.sleep(1.0)


async def follow(ws, watch: Watch, record: Record, stop: asyncio.Event) -> None:
    replaying = 0
    while not stop.is_set():
        try:
            raw = await asyncio.wait_for(ws.recv(), timeout=0.5)
        except TimeoutError:
            continue
        arrived = time.time()
        frame = json.loads(raw)
        if frame.get("type") == "snapshot":
            replaying = frame.get("replay", {}).get("count", 0)
            continue
        if frame.get("type") != "event":
            continue
        event = frame["event"]
        seq = event.get("seq")
        if seq is not None:
            if watch.last_seq and seq > watch.last_seq + 1:
                watch.gaps += 1
                await ws.send(json.dumps({"type": "resume", "last_seq": watch.last_seq}))
            watch.last_seq = max(watch.last_seq, seq)
        watch.events += 1
        if replaying:
            replaying -= 1
        elif event.get("type") == "metrics" and isinstance(event.get("time"), (int, float)):
            record.add("live", "event", (arrived - event["time"]) * 1000, 200)


def watch_pages(
    ws_base: str, origin: str, cookie: str, watches: list[Watch], record: Record, stop: threading.Event
) -> None:
    """Every subscriber in one event loop (this thread), until `stop`."""

    async def main() -> None:
        done = asyncio.Event()
        tasks = [asyncio.create_task(subscriber(ws_base, origin, cookie, w, record, done)) for w in watches]
        while not stop.is_set():
            await asyncio.sleep(0.2)
        done.set()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())

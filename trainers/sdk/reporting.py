"""Event sinks that report a run to the Rollout Studio dashboard.

`HttpSink` posts batches to `POST {url}/api/runs/{run_id}/events` from a background thread. The
training loop only appends to an in-memory queue, so reporting never blocks or slows training:
batching, retries with exponential backoff (honouring Retry-After), splitting a batch the server
found too large, and heartbeats all happen on the sink's own thread. Every event gets a per-run
sequence number when it is emitted, so a retried batch is stored once (the server is idempotent on
(run, seq)). The server's reply carries control back: `control()["cancel"]` turns true when someone
pressed Cancel in the dashboard.

No Django here: any trainer, script or notebook can use this module.
"""

from __future__ import annotations

import json
import logging
import math
import random
import threading
import time
from collections import deque
from typing import Any

import requests

log = logging.getLogger(__name__)


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def sanitize(event: dict[str, Any]) -> dict[str, Any]:
    """JSON cannot carry NaN/inf portably: metrics become null (the server skips them), and other
    non-finite floats anywhere in the event become null too."""

    def clean(obj: Any) -> Any:
        if isinstance(obj, float):
            return _finite_or_none(obj)
        if isinstance(obj, dict):
            return {k: clean(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [clean(v) for v in obj]
        return obj

    return clean(event)


class HttpSink:
    def __init__(
        self,
        url: str,
        run_id: int,
        token: str,
        *,
        start_seq: int = 1,
        max_batch_events: int = 500,
        max_batch_bytes: int = 4 * 1024 * 1024,
        flush_interval_s: float = 0.25,
        heartbeat_interval_s: float = 10.0,
        max_queue_events: int = 200_000,
        timeout_s: float = 15.0,
        max_backoff_s: float = 30.0,
        session: requests.Session | None = None,
        report_memory: bool = True,
    ) -> None:
        self.endpoint = f"{url.rstrip('/')}/api/runs/{run_id}/events"
        self.run_id = run_id
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self._next_seq = start_seq
        self._max_batch_events = max_batch_events
        self._max_batch_bytes = max_batch_bytes
        self._flush_interval_s = flush_interval_s
        self._heartbeat_interval_s = heartbeat_interval_s
        self._max_queue_events = max_queue_events
        self._timeout_s = timeout_s
        self._max_backoff_s = max_backoff_s
        self._session = session or requests.Session()

        self._queue: deque[tuple[dict[str, Any], bytes]] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._in_flight = 0
        self._closed = False
        self._control: dict[str, Any] = {}
        self._last_post = time.monotonic()
        # report_memory: heartbeats carry this process's peak memory (trainers.sdk.resources), and one
        # goes out every heartbeat_interval_s even while the queue is busy.
        self._report_memory = report_memory
        self._last_memory = time.monotonic()
        self.stats = {"sent": 0, "duplicates": 0, "retries": 0, "dropped": 0, "rejected": 0}
        self._thread = threading.Thread(target=self._loop, name=f"rollout-studio-sink-{run_id}", daemon=True)
        self._thread.start()

    # --- the trainer's side: cheap and non-blocking ---------------------------------------------

    def emit(self, event: dict[str, Any]) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("emit() after close()")
        self._enqueue(event)

    def _enqueue(self, event: dict[str, Any]) -> None:
        event = sanitize(event)
        event.setdefault("time", time.time())
        with self._lock:
            if len(self._queue) >= self._max_queue_events:
                # The dashboard is unreachable for long: keep training, lose telemetry, say so.
                self.stats["dropped"] += 1
                if self.stats["dropped"] in (1, 100, 10_000):
                    log.warning("report queue full; %d events dropped so far", self.stats["dropped"])
                return
            event["seq"] = self._next_seq
            self._next_seq += 1
            self._queue.append((event, json.dumps(event, separators=(",", ":")).encode()))
            self._wake.notify()

    def heartbeat(self) -> dict[str, Any]:
        """A heartbeat event, with this process's peak memory when the sink reports it."""
        if not self._report_memory:
            return {"type": "heartbeat"}
        from trainers.sdk.resources import peaks

        return {"type": "heartbeat", **peaks()}

    def control(self) -> dict[str, Any]:
        return dict(self._control)

    def flush(self, timeout_s: float = 60.0) -> bool:
        """Wait until everything emitted so far is stored (or timeout). Returns whether it drained."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            self._wake.notify()
            while self._queue or self._in_flight:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._wake.wait(min(remaining, 0.05))
        return True

    def close(self, timeout_s: float = 60.0) -> bool:
        drained = self.flush(timeout_s)
        with self._lock:
            self._closed = True
            self._wake.notify_all()
        self._thread.join(timeout=5)
        return drained

    # --- the sink's thread ----------------------------------------------------------------------

    def _take_batch(self) -> list[tuple[dict[str, Any], bytes]]:
        batch: list[tuple[dict[str, Any], bytes]] = []
        size = 0
        while self._queue and len(batch) < self._max_batch_events:
            event, encoded = self._queue[0]
            if batch and size + len(encoded) > self._max_batch_bytes:
                break
            batch.append(self._queue.popleft())
            size += len(encoded) + 1
        return batch

    def _loop(self) -> None:
        while True:
            with self._lock:
                if not self._queue and not self._closed:
                    self._wake.wait(self._flush_interval_s)
                if self._closed and not self._queue:
                    return
                now = time.monotonic()
                idle = not self._queue and now - self._last_post >= self._heartbeat_interval_s
                memory_due = self._report_memory and now - self._last_memory >= self._heartbeat_interval_s
            if idle or memory_due:
                # Nothing to say for a while (a long generation step): tell the dashboard we are alive,
                # so a worker that really died is told apart and marked LOST. With the peak memory so far.
                self._last_post = self._last_memory = time.monotonic()
                self._enqueue(self.heartbeat())
            with self._lock:
                batch = self._take_batch()
                self._in_flight = len(batch)
            if batch:
                self._send_with_retries(batch)
            with self._lock:
                self._in_flight = 0
                self._wake.notify_all()

    def _send_with_retries(self, batch: list[tuple[dict[str, Any], bytes]]) -> None:
        attempt = 0
        pending = [batch]
        while pending:
            part = pending.pop(0)
            body = b'{"events":[' + b",".join(encoded for _, encoded in part) + b"]}"
            response: requests.Response | None
            error: requests.RequestException | None
            try:
                response = self._session.post(
                    self.endpoint, data=body, headers=self._headers, timeout=self._timeout_s
                )
            except requests.RequestException as exc:
                response, error = None, exc
            else:
                error = None
            status = response.status_code if response is not None else None
            if response is not None and status == 200:
                reply = response.json()
                self._control = reply.get("control", {}) or {}
                self.stats["sent"] += reply.get("accepted", 0)
                self.stats["duplicates"] += reply.get("duplicates", 0)
                self._last_post = time.monotonic()
                attempt = 0
                continue
            if status == 413 and len(part) > 1:
                half = len(part) // 2
                pending[:0] = [part[:half], part[half:]]
                continue
            if status is not None and 400 <= status < 500 and status not in (408, 429):
                # The server will never accept this batch (invalid data, bad token): drop it loudly
                # rather than retrying forever or crashing the training loop.
                self.stats["rejected"] += len(part)
                log.error(
                    "dashboard rejected %d events (%s): %s",
                    len(part),
                    status,
                    response.text[:2000] if response is not None else "",
                )
                continue
            # Transient: connection error, 5xx, 408, 429. Back off and try the same part again.
            attempt += 1
            self.stats["retries"] += 1
            delay = min(self._max_backoff_s, 0.5 * 2 ** min(attempt, 10)) * (0.5 + random.random() / 2)
            if response is not None and response.headers.get("Retry-After", "").isdigit():
                delay = max(delay, float(response.headers["Retry-After"]))
            log.warning(
                "reporting to %s failed (%s); retrying in %.1fs", self.endpoint, status or error, delay
            )
            pending.insert(0, part)
            with self._lock:
                deadline = time.monotonic() + delay
                while not self._closed and (remaining := deadline - time.monotonic()) > 0:
                    self._wake.wait(remaining)
                if self._closed and attempt > 3:
                    # close() gave up waiting and the server is still away: stop, and say what was lost.
                    self.stats["dropped"] += sum(len(p) for p in pending)
                    log.error("dropping %d unsent events at close", self.stats["dropped"])
                    return

"""Report any trainer to Rollout Studio: a few calls, never blocking the training loop.

    from trainers.sdk import Studio

    studio = Studio("http://studio:8000", api_token="rsu_…")   # or $ROLLOUT_STUDIO_URL, $ROLLOUT_STUDIO_API_TOKEN
    with studio.start_run(project="agents", name="grpo-qwen", config={"lr": 1e-6}) as run:
        for step in range(steps):
            ...
            run.log_metrics(step, {"reward/mean": 0.41, "kl": 0.002})
            run.log_trajectories(step, [{"prompt": p, "completion": c, "reward": r} for p, c, r in batch])
            if run.should_cancel():         # someone pressed Cancel in the dashboard
                break
    # leaving the block reports SUCCEEDED (CANCELLED after a cancel, FAILED with the traceback on an exception)

Every `log_*` call only checks and queues the event; a background thread (`trainers.sdk.reporting.HttpSink`)
batches, retries and heartbeats. `log_*` never raises for bad data: a piece the dashboard would refuse
(a NaN reward, a 300-character metric name) is dropped with a warning and counted in `run.stats`, so a
telemetry bug cannot stop a long training run — and cannot poison a batch of good events either.

Input coercion (what a trainer holds → the wire format) lives in `trainers.sdk.coercion`; the wire format
itself in `trainers.sdk.wire`. No Django, no torch and no third-party trainer library is imported here
(`pip install rollout-studio` is this SDK alone); `trainers.integrations.trl` holds the TRL callback and
imports transformers lazily.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import traceback as traceback_module
import weakref
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Literal

import requests

from trainers.sdk import wire, wire_check
from trainers.sdk.coercion import (
    as_integer,
    as_number,
    clip_text,
    event_chunks,
    jsonable,
    messages_to_turns,
    prompt_task_id,
    trajectory_item,
)
from trainers.sdk.events import PhaseClock
from trainers.sdk.reporting import HttpSink

log = logging.getLogger(__name__)

FINAL_STATUSES = wire.FINAL_STATUSES
MAX_CHECKPOINT_PATH = wire.EVENTS["checkpoint"]["path"].max_length or 500
MAX_LOG_MESSAGE = wire.EVENTS["log"]["message"].max_length or 20_000


_LOG_LEVEL_ALIASES = {"warn": "warning", "critical": "error", "fatal": "error", "exception": "error"}


def _describe(problems: dict[str, list[str]]) -> str:
    return "; ".join(
        f"{path or 'item'}: {' '.join(messages)}" for path, messages in list(problems.items())[:3]
    )


class StudioError(RuntimeError):
    """The dashboard refused or could not be reached for a call that must answer (creating a run)."""


class Run:
    """A run being reported. Thread-safe; every `log_*` returns at once (the sink sends in the background)."""

    def __init__(
        self,
        run_id: int,
        token: str,
        url: str,
        *,
        page_url: str = "",
        start_seq: int = 1,
        sink: Any = None,
        **sink_options: Any,
    ) -> None:
        self.id = run_id
        self.token = token
        self.url = url.rstrip("/")
        self.page_url = page_url
        self.sink = (
            sink
            if sink is not None
            else HttpSink(self.url, run_id, token, start_seq=start_seq, **sink_options)
        )
        self.finished = False
        self.status: str | None = None
        self._lock = threading.Lock()
        self._cancel_seen = False
        self._dropped = 0
        self._warned: set[str] = set()
        # (step, split) → {task key: [group index, next sample index]}, for trajectories without indices.
        self._groups: dict[tuple[int, str], dict[str, list[int]]] = {}
        self._phases = PhaseClock()
        _OPEN_RUNS.add(self)

    def __repr__(self) -> str:
        return f"<Run {self.id} {self.page_url or self.url}>"

    # --- reporting --------------------------------------------------------------------------------

    def log_metrics(self, step: int, values: Mapping[str, Any], *, tokens: int | None = None) -> None:
        """Scalars at a training step. NaN/inf travel as null (skipped by the server)."""
        step_ = self._step(step)
        if step_ is None:
            return
        clean: dict[str, float | None] = {}
        for key, value in values.items():
            name = str(key)
            if not name or len(name) > wire.MAX_METRIC_NAME:
                self._drop(
                    f"metric name {name[:40]!r} is empty or longer than {wire.MAX_METRIC_NAME} characters"
                )
                continue
            if value is not None and not isinstance(value, (int, float)) and not hasattr(value, "item"):
                self._drop(f"metric {name!r} is not a number ({type(value).__name__})")
                continue
            clean[name] = as_number(value)  # NaN, inf → null
        if not clean:
            return
        event: dict[str, Any] = {"type": "metrics", "step": step_, "values": clean}
        token_count = as_integer(tokens) if tokens is not None else None
        if token_count is not None and token_count >= 0:
            event["tokens"] = token_count
        self._emit(event)

    def log_trajectories(self, step: int, trajectories: Iterable[Any], *, split: str | None = None) -> int:
        """Rollouts at a step: wire-format dicts, {"prompt", "completion", "reward"} dicts, chat messages,
        or `trainers.types.Trajectory` objects (see `trajectory_item`).

        Trajectories without "group" / "sample" are grouped by task (same task_id, or same prompt) within
        the step — also across several calls for the same step — and numbered in order. Returns how many
        were queued.
        """
        step_ = self._step(step)
        if step_ is None:
            return 0
        items = []
        for obj in trajectories:
            try:
                item = trajectory_item(obj)
            except ValueError as exc:
                self._drop(f"trajectory dropped: {exc}")
                continue
            if split is not None:
                item["split"] = split if split in wire.SPLITS else "train"
            items.append(item)
        with self._lock:
            self._number_groups(step_, items)
        valid = []
        for item in items:
            # The dashboard's own checker: what it would refuse is dropped here, with its reason, instead
            # of failing the whole batch it travels in.
            problems = wire_check.check_item(item)
            if problems:
                self._drop(f"trajectory dropped: {_describe(problems)}")
            else:
                valid.append(item)
        items = valid
        for chunk in event_chunks(items):
            self._emit({"type": "trajectories", "step": step_, "items": chunk})
        return len(items)

    def log_checkpoint(
        self, step: int, path: str, metrics: Mapping[str, Any] | None = None, *, kind: str = "full"
    ) -> None:
        """A checkpoint the trainer saved (the dashboard lists it and can offer it for resume)."""
        step_ = self._step(step)
        if step_ is None:
            return
        path = str(path)
        if not path or len(path) > MAX_CHECKPOINT_PATH:
            self._drop(f"checkpoint path is empty or longer than {MAX_CHECKPOINT_PATH} characters")
            return
        self._emit(
            {
                "type": "checkpoint",
                "step": step_,
                "path": path,
                "kind": kind if kind in ("full", "adapter") else "full",
                "metrics": jsonable(dict(metrics or {})),
            }
        )

    def log(self, message: str, level: str = "info") -> None:
        """A line for the run's log."""
        level = _LOG_LEVEL_ALIASES.get(str(level).lower(), str(level).lower())
        self._emit(
            {
                "type": "log",
                "level": level if level in wire.LOG_LEVELS else "info",
                "message": clip_text(str(message), MAX_LOG_MESSAGE),
            }
        )

    def phase(
        self, phase: str, step: int | None = None, *, done: int = 0, total: int = 0, message: str = ""
    ) -> None:
        """What the trainer is doing now, for the run page's progress line: one of `trainers.sdk.wire.PHASES`
        ("generating", "updating", …), with progress within it (`done` of `total` units). Call it when a
        phase begins and again as it advances; the time spent in the phase is reported with it."""
        self._emit(
            self._phases.event(
                phase,
                self._step(step) if step is not None else None,
                done=done,
                total=total,
                message=clip_text(str(message), 500),
            )
        )

    def should_cancel(self) -> bool:
        """Whether someone asked the dashboard to cancel this run (known from the latest reply; the
        sink talks to the server at least every few seconds, heartbeats included)."""
        cancel = bool(self.sink.control().get("cancel"))
        if cancel:
            self._cancel_seen = True
        return cancel

    @property
    def stats(self) -> dict[str, int]:
        """The sink's counters (sent, duplicates, retries, dropped, rejected) plus invalid pieces dropped here."""
        return {**getattr(self.sink, "stats", {}), "invalid": self._dropped}

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until everything logged so far is stored (or timeout). Returns whether it drained."""
        result = self.sink.flush(timeout_s)
        return result is not False

    def finish(
        self,
        status: str = "SUCCEEDED",
        message: str = "",
        *,
        traceback: str | None = None,
        timeout_s: float = 30.0,
    ) -> bool:
        """Report the final status and deliver what is queued (waits up to `timeout_s`). Idempotent.
        Returns whether everything reached the dashboard."""
        with self._lock:
            if self.finished:
                return True
            self.finished = True
        status = status.upper()
        if status not in FINAL_STATUSES:
            raise ValueError(f"status must be one of {', '.join(FINAL_STATUSES)}")
        event: dict[str, Any] = {"type": "status", "status": status}
        if message:
            event["message"] = clip_text(str(message), wire.EVENTS["status"]["message"].max_length or 5000)
        if traceback:
            event["traceback"] = clip_text(traceback, wire.MAX_TEXT)
        self.status = status
        self.sink.emit(event)
        delivered = self.sink.close(timeout_s)
        _OPEN_RUNS.discard(self)
        return delivered is not False

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        if exc_type is None:
            self.finish(
                "CANCELLED" if self._cancel_seen else "SUCCEEDED",
                "stopped on the dashboard's request" if self._cancel_seen else "",
            )
        elif issubclass(exc_type, KeyboardInterrupt):
            self.finish("CANCELLED", "interrupted (KeyboardInterrupt)")
        else:
            self.finish(
                "FAILED",
                f"{exc_type.__name__}: {exc}",
                traceback="".join(traceback_module.format_exception(exc_type, exc, tb)),
            )
        return False  # never swallow the exception

    # --- internals --------------------------------------------------------------------------------

    def _emit(self, event: dict[str, Any]) -> None:
        if self.finished:
            self._drop(f"{event['type']} event after finish()")
            return
        if event["type"] != "trajectories":  # trajectories were checked item by item
            problems = wire_check.check_event({"seq": 1, **event})
            if problems:
                self._drop(f"{event['type']} event dropped: {_describe(problems)}")
                return
        self.sink.emit(event)

    def _step(self, step: Any) -> int | None:
        value = as_integer(step)
        if value is None or value < 0:
            self._drop(f"step must be a non-negative integer, not {step!r}")
            return None
        return value

    def _drop(self, reason: str) -> None:
        self._dropped += 1
        key = reason[:60]
        if key not in self._warned and len(self._warned) < 100:
            self._warned.add(key)
            log.warning(
                "rollout studio run %s: %s (dropped; further drops like this are counted silently)",
                self.id,
                reason,
            )

    def _number_groups(self, step: int, items: list[dict[str, Any]]) -> None:
        for item in items:
            if "group" in item and "sample" in item:
                continue
            groups = self._groups.setdefault((step, item["split"]), {})
            slot = groups.get(item["task_id"])
            if slot is None:
                used = {g for g, _ in groups.values()}
                slot = groups[item["task_id"]] = [item.get("group", len(used)), 0]
            item.setdefault("group", slot[0])
            if "sample" not in item:
                item["sample"] = slot[1]
            slot[1] = max(slot[1], item["sample"]) + 1
        # Old steps never come back in practice: keep the bookkeeping small.
        if len(self._groups) > 16:
            for key in sorted(self._groups)[:-8]:
                del self._groups[key]


_OPEN_RUNS: weakref.WeakSet[Run] = weakref.WeakSet()


@atexit.register
def _flush_open_runs() -> None:
    # A script that never called finish(): deliver what it logged (the run stays RUNNING until the
    # dashboard notices the missing heartbeats and marks it LOST).
    for run in list(_OPEN_RUNS):
        try:
            run.flush(timeout_s=10)
        except Exception:  # noqa: BLE001 — interpreter shutdown: report and go on
            log.exception("could not flush run %s at exit", run.id)


class Studio:
    """A connection to a Rollout Studio dashboard with a personal API token (`rsu_…`)."""

    def __init__(
        self,
        url: str | None = None,
        api_token: str | None = None,
        *,
        timeout_s: float = 30.0,
        session: requests.Session | None = None,
    ) -> None:
        url = url or os.environ.get("ROLLOUT_STUDIO_URL", "")
        if not url:
            raise StudioError("no dashboard URL: pass url= or set ROLLOUT_STUDIO_URL")
        self.url = url.rstrip("/")
        self.api_token = api_token or os.environ.get("ROLLOUT_STUDIO_API_TOKEN", "")
        self.timeout_s = timeout_s
        self.session = session  # None: a short-lived connection per call (no idle socket left open)

    def start_run(
        self,
        *,
        project: str,
        name: str,
        config: Mapping[str, Any] | None = None,
        algorithm: str = "external",
        environment: int | None = None,
        rubric: int | None = None,
        max_steps: int = 0,
        **sink_options: Any,
    ) -> Run:
        """Register an external run in `project` and start reporting to it. The one blocking call of
        the SDK (a single request); raises StudioError if the dashboard refuses or cannot be reached."""
        if not self.api_token:
            raise StudioError(
                "no API token: pass api_token= or set ROLLOUT_STUDIO_API_TOKEN (create one under Account → API tokens)"
            )
        body = {
            "name": name,
            "config": jsonable(dict(config or {})),
            "algorithm": algorithm,
            "environment": environment,
            "rubric": rubric,
            "max_steps": max_steps,
        }
        url = f"{self.url}/api/projects/{project}/external-runs/"
        try:
            response = (self.session or requests).post(
                url, json=body, timeout=self.timeout_s, headers={"Authorization": f"Bearer {self.api_token}"}
            )
        except requests.RequestException as exc:
            raise StudioError(f"could not reach the dashboard at {self.url}: {exc}") from exc
        if response.status_code != 201:
            raise StudioError(
                f"the dashboard refused to create the run ({response.status_code}): {response.text[:2000]}"
            )
        data = response.json()
        return Run(
            data["id"], data["ingest_token"], self.url, page_url=data.get("page_url", ""), **sink_options
        )

    def attach(
        self,
        run_id: int | None = None,
        run_token: str | None = None,
        *,
        start_seq: int | None = None,
        mark_running: bool = True,
        **sink_options: Any,
    ) -> Run:
        """Report to an existing run (one the dashboard dispatched) with its ingestion token (`rsr_…`);
        both default to $ROLLOUT_STUDIO_RUN_ID / $ROLLOUT_STUDIO_TOKEN, as `python -m trainers train` reads them.

        Sequence numbers continue after the run's last stored event: unless `start_seq` is given, one
        heartbeat is posted first to learn it. Only one reporter per run at a time."""
        return attach(
            self.url,
            run_id,
            run_token,
            start_seq=start_seq,
            mark_running=mark_running,
            timeout_s=self.timeout_s,
            session=self.session,
            **sink_options,
        )


def attach(
    url: str,
    run_id: int | None = None,
    run_token: str | None = None,
    *,
    start_seq: int | None = None,
    mark_running: bool = True,
    timeout_s: float = 30.0,
    session: requests.Session | None = None,
    **sink_options: Any,
) -> Run:
    """`Studio.attach` without a personal API token: the run token alone is enough to report."""
    url = url.rstrip("/")
    if run_id is None and os.environ.get("ROLLOUT_STUDIO_RUN_ID", "").isdigit():
        run_id = int(os.environ["ROLLOUT_STUDIO_RUN_ID"])
    run_token = run_token or os.environ.get("ROLLOUT_STUDIO_TOKEN", "")
    if run_id is None or not run_token:
        raise StudioError(
            "attach needs the run id and its ingestion token (or $ROLLOUT_STUDIO_RUN_ID / $ROLLOUT_STUDIO_TOKEN)"
        )
    if start_seq is None:
        start_seq = _next_seq(url, run_id, run_token, timeout_s, session)
    run = Run(run_id, run_token, url, start_seq=start_seq, **sink_options)
    if mark_running:
        # QUEUED → STARTING → RUNNING; the server ignores a transition the run has already made.
        run._emit({"type": "status", "status": "STARTING"})
        run._emit({"type": "status", "status": "RUNNING"})
    return run


def _next_seq(url: str, run_id: int, token: str, timeout_s: float, session: requests.Session | None) -> int:
    """Post a heartbeat as seq 1 — stored on a fresh run, a harmless duplicate otherwise — and read
    the run's last stored sequence number from the reply."""
    try:
        response = (session or requests).post(
            f"{url}/api/runs/{run_id}/events",
            data=json.dumps({"events": [{"seq": 1, "type": "heartbeat"}]}),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            timeout=timeout_s,
        )
    except requests.RequestException as exc:
        raise StudioError(f"could not reach the dashboard at {url}: {exc}") from exc
    if response.status_code != 200:
        raise StudioError(
            f"the dashboard refused the run token ({response.status_code}): {response.text[:2000]}"
        )
    return int(response.json()["last_seq"]) + 1


__all__ = [
    "Run",
    "Studio",
    "StudioError",
    "attach",
    "jsonable",
    "messages_to_turns",
    "prompt_task_id",
    "trajectory_item",
]

"""How the trainer reports: an `EventSink` receives plain-dict events and may send control back.

The trainer never talks to the dashboard or a database; it calls `sink.emit(event)`. A sink decides
where events go (a JSONL file here; the HTTP reporter that batches to the dashboard's ingestion API
lives in `trainers.sdk.reporting`). Every event carries `type` and `time` (Unix seconds, set by the
trainer); the *sink* numbers events per run (`seq`, from 1) so that retries are idempotent.

Event shapes (all JSON-serialisable):

    {"type": "status", "status": "RUNNING" | "SUCCEEDED" | "FAILED" | "CANCELLED",
     "message": str, "traceback": str | None, "step": int}
    {"type": "metrics", "step": int, "split": "train" | "eval", "values": {name: float}}
    {"type": "trajectories", "step": int, "items": [trajectory dicts, see trajectory_item()]}
    {"type": "checkpoint", "step": int, "path": str, "metrics": {name: float}, "kind": "full" | "adapter"}
    {"type": "log", "level": "debug" | "info" | "warning" | "error", "message": str}
    {"type": "phase", "phase": str, "step": int, "done": int, "total": int, "message": str, "elapsed_s": float}

(`trainers.sdk.wire` declares every field and its limits.)

`control()` returns what the other side asks for, e.g. `{"cancel": True}`; the trainer checks it
between steps. Sinks must not block training for long: a remote sink queues and sends in a
background thread.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol, runtime_checkable

STATUSES = ("RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")


@runtime_checkable
class EventSink(Protocol):
    def emit(self, event: dict[str, Any]) -> None:
        """Accept one event (do not block on I/O for long)."""

    def flush(self) -> None:
        """Deliver everything accepted so far."""

    def close(self) -> None:
        """Flush and release resources; further emits are errors."""

    def control(self) -> dict[str, Any]:
        """Requests from the other side, e.g. {"cancel": True}; {} when none."""


class _Sequenced:
    """Shared by the sinks here: assigns per-run sequence numbers under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0

    def _number(self, event: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._seq += 1
            return {"seq": self._seq, **event}


class NullSink(_Sequenced):
    """Drops everything (a run with nowhere to report)."""

    def emit(self, event: dict[str, Any]) -> None:
        self._number(event)

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None

    def control(self) -> dict[str, Any]:
        return {}


class MemorySink(_Sequenced):
    """Keeps events in a list (tests, notebooks). `request_cancel()` simulates the dashboard's button."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []
        self._control: dict[str, Any] = {}

    def emit(self, event: dict[str, Any]) -> None:
        self.events.append(self._number(event))

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None

    def control(self) -> dict[str, Any]:
        return dict(self._control)

    def request_cancel(self) -> None:
        self._control["cancel"] = True

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]


class JsonlSink(_Sequenced):
    """Appends one JSON object per line to `path`. Cancel by creating `<path>.cancel` next to it.

    Sequence numbers continue from the file's last event, so a resumed run appending to the same
    file keeps them unique.
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._seq = self._last_seq()
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")

    def _last_seq(self) -> int:
        if not self.path.exists():
            return 0
        last = 0
        with self.path.open(encoding="utf-8") as handle:
            for line in handle:
                try:
                    last = max(last, int(json.loads(line).get("seq", 0)))
                except (ValueError, AttributeError):
                    continue  # a torn last line from a crash: skip it
        return last

    def emit(self, event: dict[str, Any]) -> None:
        if self._file is None:
            raise RuntimeError("emit on a closed JsonlSink")
        numbered = self._number(event)
        with self._lock:
            self._file.write(json.dumps(numbered, default=_json_default) + "\n")

    def flush(self) -> None:
        if self._file is not None:
            with self._lock:
                self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self.flush()
            self._file.close()
            self._file = None

    def control(self) -> dict[str, Any]:
        return {"cancel": True} if self.path.with_name(self.path.name + ".cancel").exists() else {}


class MultiSink:
    """Fans events out to several sinks; control requests are merged."""

    def __init__(self, *sinks: EventSink) -> None:
        self.sinks = list(sinks)

    def emit(self, event: dict[str, Any]) -> None:
        for sink in self.sinks:
            sink.emit(event)

    def flush(self) -> None:
        for sink in self.sinks:
            sink.flush()

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()

    def control(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for sink in self.sinks:
            merged.update(sink.control())
        return merged


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if hasattr(value, "item"):  # numpy / torch scalars
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def make_event(type_: str, **fields: Any) -> dict[str, Any]:
    return {"type": type_, "time": time.time(), **fields}


class PhaseClock:
    """Makes `phase` events (what the trainer is doing now; `trainers.sdk.wire.PHASES`) and keeps each phase's
    clock: a call with the phase and step already under way is a progress update and reports the time
    spent so far (`elapsed_s`); a new phase or step starts the clock again. Used by the built-in trainer
    and by `trainers.sdk.Run.phase`."""

    def __init__(self) -> None:
        self.current: tuple[str, int | None, float] | None = None  # (phase, step, perf_counter at its start)

    def event(
        self, phase: str, step: int | None = None, *, done: int = 0, total: int = 0, message: str = ""
    ) -> dict[str, Any]:
        now = time.perf_counter()
        if self.current is None or self.current[:2] != (phase, step):
            self.current = (phase, step, now)
        fields: dict[str, Any] = {
            "phase": phase,
            "done": done,
            "total": total,
            "message": message,
            "elapsed_s": round(now - self.current[2], 3),
        }
        if step is not None:
            fields["step"] = step
        return make_event("phase", **fields)


# A record logged with `extra={REPORTED: True}` is already in the run's log (Trainer.log emits it itself).
REPORTED = "rollout_studio_reported"
MAX_LOG_MESSAGE = 20_000  # trainers.sdk.wire: a log event's message


# --- what a library prints, as a researcher reads it --------------------------------------------------

# A progress bar (tqdm and its look-alikes): "Loading weights:  37%|███▋      | 100/272 [00:01<00:02, …]".
_PROGRESS_BAR = re.compile(
    r"(?P<label>[^\r\n|]*?):?\s*(?P<percent>\d{1,3})%\|[^|]*\|\s*(?P<done>\d+)/(?P<total>\d+)"
)
# A Python warning as `warnings` prints it: "/long/path/module.py:12: FutureWarning: text\n  source line".
_WARNING = re.compile(
    r"^(?P<path>\S+?\.py):(?P<line>\d+): (?P<kind>\w*Warning): (?P<text>.*?)(?:\n\s.*)?$", re.S
)
# Where installed packages live: shown from the package name on (".../site-packages/transformers/x.py" →
# "transformers/x.py").
_PACKAGE_PATH = re.compile(r"(?:[A-Za-z]:)?[^\s'\"():]*[/\\](?:site|dist)-packages[/\\]")
# Other absolute paths under a home or a work directory: only their last two parts are kept.
_LOCAL_PATH = re.compile(r"(?<![\w.])/(?:root|home|Users|tmp|work|var|opt|srv|mnt)(?:/[^\s'\"():,]+)+")
_NUMBERS = re.compile(r"\d+(?:\.\d+)?")


def progress_bar(text: str) -> str | None:
    """The last state of a progress bar in `text` ("Loading weights 272/272 (100%)"), None if it holds none."""
    bars = list(_PROGRESS_BAR.finditer(text))
    if not bars:
        return None
    bar = bars[-1]
    label = bar["label"].strip(" \r\n:") or "progress"
    return f"{label} {bar['done']}/{bar['total']} ({bar['percent']}%)"


def without_local_paths(text: str) -> str:
    """`text` with installed packages' paths from the package on and other local paths shortened to their
    last two parts: a log line says which library spoke, not where this machine keeps it."""
    text = _PACKAGE_PATH.sub("", text)
    return _LOCAL_PATH.sub(lambda m: "…/" + "/".join(m.group(0).rsplit("/", 2)[-2:]), text)


def library_message(name: str, message: str) -> str:
    """A library's log record as the run's log shows it: a Python warning as "FutureWarning: text
    (transformers/x.py:12)" without its source line, paths shortened, the logger's name in front."""
    text = message.strip()
    warning = _WARNING.match(text)
    if warning:
        text = f"{warning['kind']}: {warning['text'].strip()} ({warning['path']}:{warning['line']})"
    text = without_local_paths(text)
    if name in ("py.warnings", "celery.redirected"):
        return text
    return f"{name}: {text}"


class LogForwarder(logging.Handler):
    """Sends the process's WARNING and ERROR log records to a run's log as `log` events, so a warning a
    library prints in the worker (a tokenizer, an environment, Ray) reaches the run page instead of a
    terminal nobody watches. Install it for the run's duration (`Trainer.run` does).

    What reaches the log is what a researcher reads: a progress bar (a worker's stderr, which Celery logs
    as warnings) goes to `progress` — the trainer folds it into its phase line — and never to the log; a
    Python warning is one line without its source line; local paths are shortened (`library_message`);
    a message that differs from an earlier one only in its numbers is not repeated, and `close` says
    how many were left out.

    The reporter's own records are left out: an unreachable dashboard must not feed its retry warnings
    back into the queue it cannot empty.
    """

    IGNORED_LOGGERS = ("trainers.sdk.reporting",)

    def __init__(
        self,
        emit: Callable[[dict[str, Any]], None],
        level: int = logging.WARNING,
        *,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(level)
        self._emit = emit
        self._progress = progress
        self._busy = threading.local()  # a sink that logs while emitting must not recurse
        self._seen: dict[str, int] = {}  # message shape -> times it came again
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, REPORTED, False) or record.name.startswith(self.IGNORED_LOGGERS):
            return
        if getattr(self._busy, "active", False):
            return
        self._busy.active = True
        try:
            raw = record.getMessage()
            bar = progress_bar(raw)
            if bar is not None:
                if self._progress is not None:
                    self._progress(bar)
                return
            if not raw.strip():
                return
            message = library_message(record.name, raw)
            if record.exc_info and record.exc_info[1] is not None:
                message += (
                    f" ({type(record.exc_info[1]).__name__}: {without_local_paths(str(record.exc_info[1]))})"
                )
            shape = _NUMBERS.sub("#", message)
            with self._lock:
                repeated = shape in self._seen
                self._seen[shape] = self._seen.get(shape, -1) + 1
            if repeated:
                return
            level = "error" if record.levelno >= logging.ERROR else "warning"
            self._emit(make_event("log", level=level, message=message[:MAX_LOG_MESSAGE]))
        except Exception:  # noqa: BLE001 — logging must never break the code that logged
            self.handleError(record)
        finally:
            self._busy.active = False

    def close(self) -> None:
        """Say how many library messages were not repeated (once, when the run ends)."""
        with self._lock:
            repeats = sum(self._seen.values())
            kinds = sum(1 for count in self._seen.values() if count)
            self._seen = {}
        if repeats:
            self._emit(
                make_event(
                    "log",
                    level="info",
                    message=f"{repeats} repeat{'s' if repeats != 1 else ''} of {kinds} library "
                    f"message{'s' if kinds != 1 else ''} were left out of this log",
                )
            )
        super().close()


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Events of a JsonlSink file (skipping a torn last line)."""
    events = []
    with Path(path).open(encoding="utf-8") as handle:
        for line in handle:
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events

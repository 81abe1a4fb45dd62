"""What the trainer benches share: an event sink that records each step's metrics and the phases, and
samples the process's resident memory, so a bench can say where the time and the memory went."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import psutil


class PhaseRecorder:
    """An event sink (`trainers.sdk.events.EventSink`) for a trainer run in this process: keeps each step's
    metrics and logs, and samples the resident set size every `interval` seconds from a thread, counting
    each sample towards the phase under way (`loading` until the first phase event)."""

    def __init__(self, interval: float = 0.02, echo: bool = False) -> None:
        self.steps: list[dict[str, float]] = []
        self.evaluations: list[dict[str, float]] = []
        self.logs: list[str] = []
        self.phase = "loading"
        self.peak_by_phase: dict[str, int] = {}
        self.echo = echo
        self._process = psutil.Process()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(interval,), daemon=True)
        self._thread.start()

    def _sample(self, interval: float) -> None:
        while not self._stop.is_set():
            rss = self._process.memory_info().rss
            if rss > self.peak_by_phase.get(self.phase, 0):
                self.peak_by_phase[self.phase] = rss
            time.sleep(interval)

    @property
    def peak(self) -> int:
        return max(self.peak_by_phase.values(), default=0)

    def emit(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "phase":
            self.phase = event["phase"]
        elif kind == "metrics":
            (self.steps if event.get("split") == "train" else self.evaluations).append(dict(event["values"]))
        elif kind == "log":
            self.logs.append(str(event.get("message", "")))
            if self.echo:
                print(f"  | {event.get('message', '')}", flush=True)

    def flush(self) -> None:
        return None

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def control(self) -> dict[str, Any]:
        return {}


def gib(size: float) -> str:
    return f"{size / 2**30:.2f} GiB"


def knob_overrides(pairs: list[str]) -> dict:
    """`key=value` pairs as knobs: JSON values where they parse, else strings."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--set wants key=value, not {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out

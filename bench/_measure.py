"""What the trainer benches share: an event sink that records each step's metrics and the phases, and
samples the process's resident memory, so a bench can say where the time and the memory went."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any, TypeVar

import psutil

# `--smoke` on any bench: its path exercised in seconds at tiny sizes, the figures meaningless — CI's bench lane
# runs every script so (tests/bench/test_smoke.py), so a schema or API change that breaks a bench fails CI
# instead of waiting for the next person who runs it. Each bench names its tiny sizes beside its real ones.
SMOKE = "--smoke" in sys.argv[1:]
T = TypeVar("T")


def size(full: T, smoke: T) -> T:
    """`full`, or under `--smoke` the bench's tiny `smoke` size."""
    return smoke if SMOKE else full


def smoke_parser(parser: argparse.ArgumentParser, **tiny: Any) -> argparse.ArgumentParser:
    """`parser` with a `--smoke` flag whose defaults are `tiny` (flags given on the command line still win)."""
    described = ", ".join(f"--{name.replace('_', '-')} {value}" for name, value in tiny.items())
    parser.add_argument("--smoke", action="store_true", help=f"seconds, for CI: {described or 'tiny sizes'}")
    if SMOKE:
        parser.set_defaults(**tiny)
    return parser


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


def close_trainer(trainer: Any) -> None:
    """Give back what a bench's in-process `Trainer` holds: its rollout source, its learner, its judges."""
    trainer.rollouts.close()
    trainer.learner.close()
    if getattr(trainer, "judges", None) is not None:
        trainer.judges.close()


def held_out_change(result: dict[str, Any], key: str) -> str:
    """`before → after (±change)` of an arm's held-out `eval/<key>`, in percent points."""
    before, after = (100 * result[when].get(f"eval/{key}", 0.0) for when in ("before", "after"))
    return f"{before:5.1f} → {after:5.1f} ({after - before:+.1f})"

"""The one cancellation check: whoever runs the work says how to tell that it should stop; the loops poll.

A worker (or a notebook) installs a `should_stop` callable for the duration of the work with
`cancellable(should_stop)`; the library's loops call `check_cancel()` where stopping is safe — after every
decode step of the transformers backend, between the turns and generation batches of the episode driver,
between micro-batches of the learner's first epoch, between groups while scoring, between batches of reward
model training and of an LLM judge annotating a queue — and it raises `Cancelled` once `should_stop()` says
so. Whoever installed the check catches `Cancelled` and reports the run CANCELLED.

Cheap by design: `check_cancel()` reads a context variable and, at most every `interval_s`, calls the
installed callable (`Poll`), so a decode loop may call it every token. The callable itself should be cheap
too (a `threading.Event.is_set`, a sink's last reply); the worker's watcher thread does the database reads
(`workers/cancel.py`).

No Django, no torch: the trainer library, the SDK's users and the worker share it.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

StopCheck = Callable[[], bool]


class Cancelled(Exception):
    """The work was asked to stop (the dashboard's Cancel button, a `.cancel` file next to the events)."""

    def __init__(self, message: str = "cancel requested") -> None:
        super().__init__(message)


class Poll:
    """`should_stop` asked at most once per `interval_s`; once it said yes, always yes."""

    def __init__(self, should_stop: StopCheck, interval_s: float = 0.2) -> None:
        self.should_stop, self.interval_s = should_stop, interval_s
        self._next = 0.0
        self.stopped = False

    def __call__(self) -> bool:
        if self.stopped:
            return True
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.interval_s
            self.stopped = bool(self.should_stop())
        return self.stopped


_CHECK: contextvars.ContextVar[Poll | None] = contextvars.ContextVar(
    "rollout_studio_stop_check", default=None
)


@contextmanager
def cancellable(should_stop: StopCheck | None, interval_s: float = 0.2) -> Iterator[Poll | None]:
    """Inside, `check_cancel()` raises `Cancelled` once `should_stop()` returns true (None: never). Nested
    checks both apply: the inner one asks the outer one too."""
    if should_stop is None:
        yield _CHECK.get()
        return
    outer = _CHECK.get()
    poll = Poll(should_stop if outer is None else lambda: outer() or should_stop(), interval_s)
    token = _CHECK.set(poll)
    try:
        yield poll
    finally:
        _CHECK.reset(token)


def installed() -> bool:
    """Whether the work under way has a cancellation check (so a loop may skip setting up its polls)."""
    return _CHECK.get() is not None


def stop_requested() -> bool:
    """Whether the work under way was asked to stop (False where nobody installed a check)."""
    poll = _CHECK.get()
    return poll is not None and poll()


def check_cancel() -> None:
    """Raise `Cancelled` if the work under way was asked to stop."""
    if stop_requested():
        raise Cancelled()

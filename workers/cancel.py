"""The worker's side of the one cancellation check (`trainers.sdk.cancel`): a thread that reads the run's
cancel request from the database every `POLL_S` and answers the trainer's `should_stop()` from memory.

The trainer polls cheaply and often (every decode step); the database is read once a second by this thread
only, on its own connection. A cancel therefore lands within about a second plus the time to the trainer's
next check — a decode step, a turn, a micro-batch — instead of at the end of the step.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import close_old_connections, connection

log = logging.getLogger(__name__)

POLL_S = 1.0


class CancelWatcher:
    """`requested()` turns true once `asked()` did (read every `poll_s` on a daemon thread, on its own
    database connection). `asked` may also be a periodic database write that never asks to stop (the run's
    heartbeat: `workers.execution.beating`); `doing` names it in the warning when one call fails."""

    def __init__(
        self,
        asked: Callable[[], bool],
        *,
        name: str,
        poll_s: float = POLL_S,
        doing: str = "read the cancel request",
    ) -> None:
        self._asked, self._poll_s, self._doing = asked, poll_s, doing
        self._requested = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"cancel-watch-{name}", daemon=True)

    def requested(self) -> bool:
        return self._requested.is_set()

    def start(self) -> CancelWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        try:
            while not self._stop.is_set() and not self._requested.is_set():
                try:
                    if self._asked():
                        self._requested.set()
                        break
                except Exception as exc:  # noqa: BLE001 — a flaky database read must not stop the run
                    log.warning("cannot %s: %r", self._doing, exc)
                    close_old_connections()
                self._stop.wait(self._poll_s)
        finally:
            connection.close()  # this thread's own connection


@contextmanager
def watching(
    asked: Callable[[], bool], *, name: str, poll_s: float = POLL_S, doing: str = "read the cancel request"
) -> Iterator[CancelWatcher]:
    watcher = CancelWatcher(asked, name=name, poll_s=poll_s, doing=doing).start()
    try:
        yield watcher
    finally:
        watcher.stop()

"""The one wrapper around a worker's background job — a run, a reward model's training, an LLM judge.

Every job goes the same way, so it is written once here (`run_job`):

1. claim it with the job's conditional update (a redelivered task finds it claimed and skips it);
2. do the work with a cancel watcher (`workers.cancel`) installed as the one cancellation check
   (`trainers.sdk.cancel`), so the job's loops stop within seconds of the Cancel button;
3. end it: `Cancelled` → the job's cancelled status; any other exception → failed, with one failure
   format (`Failure`), then re-raised if it was not an `Exception` (soft time limits, KeyboardInterrupt);
4. give the freed heap back to the operating system: the worker lives on after the job.

Each kind says only what is its own (`Job`: how to claim, read, cancel and fail it); the work itself
stays in its module (`workers.execution`, `judge_execution`, `reward_execution`).
"""

from __future__ import annotations

import logging
import os
import socket
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from trainers.sdk.cancel import Cancelled, cancellable
from workers.cancel import watching

log = logging.getLogger(__name__)

# What a job's error fields hold at most (their columns are text; the page shows the start).
ERROR_MAX_CHARS = 5000


@dataclass(frozen=True)
class Failure:
    """Why a job failed, as every job records it: `message` is "{type}: {error}" (what the page shows
    first), `traceback` where it happened. A job with one error field stores `text`."""

    message: str
    traceback: str

    @classmethod
    def of(cls, exc: BaseException) -> Failure:
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(message=f"{type(exc).__name__}: {exc}"[:ERROR_MAX_CHARS], traceback=trace)

    @property
    def text(self) -> str:
        return f"{self.message}\n\n{self.traceback}"[:ERROR_MAX_CHARS]


StopRequested = Callable[[], bool]


@dataclass(frozen=True)
class Job:
    """One kind of background job, as `run_job` drives it. Each callable does one conditional write or
    read of the job's row (its services'), so a worker, the reaper and a cancel racing never both win."""

    label: str  # "run 12", "reward model 3": for logs and the watcher thread's name
    claim: Callable[[], bool]  # QUEUED → running, once; False: someone else has it (or it ended)
    status: Callable[[], object]  # the job's status now (said when the claim fails)
    cancel_requested: Callable[[], bool]  # what the watcher polls every second
    cancelled: Callable[[], object]  # the work stopped on its cancel: → cancelled
    failed: Callable[[Failure], bool]  # → failed; False when the job had already ended


def worker_name(hostname: str = "") -> str:
    """Who claims the job: Celery's hostname, else this host and process."""
    return hostname or f"{socket.gethostname()}:{os.getpid()}"


def run_job(job: Job, work: Callable[[StopRequested], str]) -> str:
    """Claim `job`, do `work(stop_requested)` and end the job as it went. Returns what the Celery task
    reports: `work`'s answer, "skipped (<status>)", "cancelled" or "failed".

    `stop_requested` answers "was this job asked to stop?" from memory (the watcher reads the database);
    the same check is installed for `check_cancel()` in the library's loops while `work` runs."""
    if not job.claim():
        status = job.status()
        log.info("%s not started: it is %s", job.label, status)
        return f"skipped ({status})"
    try:
        name = job.label.replace(" ", "-")
        with watching(job.cancel_requested, name=name) as watcher, cancellable(watcher.requested):
            return work(watcher.requested)
    except Cancelled:  # stopped on its cancel: not a failure
        job.cancelled()
        log.info("%s cancelled", job.label)
        return "cancelled"
    except BaseException as exc:  # noqa: BLE001 — also soft time limits and KeyboardInterrupt
        if job.failed(Failure.of(exc)):
            log.exception("%s failed", job.label)
        else:  # the job had already ended (a run's trainer reported it): the error still goes somewhere
            log.error("%s raised after it had ended", job.label, exc_info=exc)
        if not isinstance(exc, Exception):
            raise
        return "failed"
    finally:
        from trainers.learn.memory import release_memory

        log.info("%s: released %.1f GB after the job", job.label, release_memory() / 2**30)

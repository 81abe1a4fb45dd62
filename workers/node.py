"""This worker process, as the dashboard's Workers page shows it: a heartbeat thread that reports
queues, CPUs, GPUs and the Ray address, and the run it is executing."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import threading

log = logging.getLogger(__name__)

_state: dict = {"hostname": "", "queues": [], "current_run_id": None}
_stop = threading.Event()
INTERVAL_S = 10


def detect_gpus() -> list[dict]:
    """GPUs from nvidia-smi when present; never imports torch in the worker's main process."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        index, name, memory = (part.strip() for part in line.split(",", 2))
        gpus.append({"index": int(index), "name": name, "memory_mb": int(float(memory))})
    return gpus


def report(stopped: bool = False) -> None:
    from django.conf import settings

    from webapp.fleet.services import worker_report

    worker_report(
        hostname=_state["hostname"] or f"{socket.gethostname()}:{os.getpid()}",
        queues=_state["queues"],
        gpus=_state.setdefault("gpus", detect_gpus()),
        cpus=os.cpu_count() or 0,
        ray_address=settings.RAY_ADDRESS or "local",
        pid=os.getpid(),
        current_run_id=_state["current_run_id"],
        stopped=stopped,
    )


def set_current_run(run_id: int | None) -> None:
    _state["current_run_id"] = run_id
    try:
        report()
    except Exception:  # the Workers page is informational: never fail a run over it
        log.exception("could not report worker state")


def start(hostname: str, queues: list[str]) -> None:
    _state.update(hostname=hostname, queues=queues)
    _stop.clear()

    def loop() -> None:
        while not _stop.is_set():
            try:
                report()
            except Exception:
                log.exception("could not report worker state")
            _stop.wait(INTERVAL_S)

    threading.Thread(target=loop, name="worker-node-heartbeat", daemon=True).start()


def stop() -> None:
    _stop.set()
    try:
        report(stopped=True)
    except Exception:
        log.exception("could not report worker shutdown")

"""This worker process, as the dashboard's Workers page shows it: a heartbeat thread that reports
queues, CPUs, GPUs, the Ray address, how busy the machine is (CPU, memory, and GPU utilisation and memory
where NVML is present) and the run it is executing."""

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


def _nvidia_smi(fields: str) -> list[str]:
    """One CSV line a GPU with `fields` (nvidia-smi's --query-gpu names); none where nvidia-smi is missing
    or fails."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return out.strip().splitlines()


def detect_gpus() -> list[dict]:
    """GPUs from nvidia-smi when present; never imports torch in the worker's main process."""
    gpus = []
    for line in _nvidia_smi("index,name,memory.total"):
        index, name, memory = (part.strip() for part in line.split(",", 2))
        gpus.append({"index": int(index), "name": name, "memory_mb": int(float(memory))})
    return gpus


def _nvml_usage() -> list[dict] | None:
    """Per GPU utilisation and memory through NVML (the nvidia-ml-py package, which vLLM brings); None
    when NVML is not here."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                {
                    "index": index,
                    "utilization_percent": float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu),
                    "memory_used_mb": round(memory.used / 2**20),
                    "memory_total_mb": round(memory.total / 2**20),
                }
            )
        return gpus
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def _nvidia_smi_usage() -> list[dict]:
    """The same from nvidia-smi (itself an NVML client) where the Python bindings are not installed."""
    gpus = []
    for line in _nvidia_smi("index,utilization.gpu,memory.used,memory.total"):
        try:
            index, utilization, used, total = (float(part) for part in line.split(","))
        except ValueError:
            continue  # "[N/A]" on GPUs that do not report it
        gpus.append(
            {
                "index": int(index),
                "utilization_percent": utilization,
                "memory_used_mb": round(used),
                "memory_total_mb": round(total),
            }
        )
    return gpus


def measure_usage() -> dict:
    """How busy this machine is now: CPU (percent of all cores since the previous call), memory, GPUs."""
    import psutil

    memory = psutil.virtual_memory()
    gpus = _nvml_usage()
    return {
        "cpu_percent": psutil.cpu_percent(interval=None),
        "memory_used_mb": round((memory.total - memory.available) / 2**20),
        "memory_total_mb": round(memory.total / 2**20),
        "gpus": gpus if gpus is not None else _nvidia_smi_usage(),
    }


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
        usage=measure_usage(),
        models=_state.setdefault("models", _servable_models()),
    )


def _servable_models() -> list[str]:
    """The judge models this worker can load (read once: the bundled package and the cache rarely change
    under a running worker)."""
    from trainers.rubrics.judge_models import servable_models

    try:
        return servable_models()
    except Exception:  # informational: never stop the heartbeat over it
        log.exception("could not list the models this worker serves")
        return []


def set_current_run(run_id: int | None) -> None:
    _state["current_run_id"] = run_id
    try:
        report()
    except Exception:  # the Workers page is informational: never fail a run over it
        log.exception("could not report worker state")


def touch_heartbeat_file() -> None:
    """Mark the file named by WORKER_HEARTBEAT_FILE (when set) as of now, after each report the database
    took: compose's health check of a worker is that file's age (docker-compose.yml), no Celery call."""
    path = os.environ.get("WORKER_HEARTBEAT_FILE", "")
    if path:
        with open(path, "a"):
            os.utime(path)


def start(hostname: str, queues: list[str]) -> None:
    _state.update(hostname=hostname, queues=queues)
    _stop.clear()

    def loop() -> None:
        while not _stop.is_set():
            try:
                report()
                touch_heartbeat_file()
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

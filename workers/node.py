"""This worker process, as the dashboard's Workers page shows it: a heartbeat thread that reports
queues, CPUs, GPUs, the Ray address and the size of that Ray cluster, how busy the machine is (CPU,
memory, and GPU utilisation and memory where NVML is present), the training parts it has
(`trainers.parts`) and the run it is executing."""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

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


# The size of the Ray cluster at RAY_ADDRESS changes when nodes join or leave: asked every minute (30 s
# after a failed try), from a short-lived process, on a thread of its own so that a slow cluster never
# delays a heartbeat. The process reads the live nodes' totals from the cluster's GCS (what `ray status`
# does), which registers no job; where that internal client is missing, it joins as a driver instead.
RAY_PROBE_EVERY_S = 60
RAY_PROBE_RETRY_S = 30
RAY_PROBE_TIMEOUT_S = 60
_RAY_PROBE = """
import json, sys
address = sys.argv[1]
try:
    from ray._private.services import canonicalize_bootstrap_address_or_die
    from ray._raylet import GcsClient
    nodes = GcsClient(address=canonicalize_bootstrap_address_or_die(address)).get_all_node_info(timeout=20)
    totals = {}
    for info in nodes.values():
        if info.state == 0:  # ALIVE
            for name, amount in info.resources_total.items():
                totals[name] = totals.get(name, 0.0) + amount
except (ImportError, AttributeError, TypeError):
    import ray
    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    totals = ray.cluster_resources()
print(json.dumps(totals))
"""


def probe_ray_cluster(address: str, *, timeout_s: float = RAY_PROBE_TIMEOUT_S) -> dict[str, float]:
    """The totals of the Ray cluster at `address` (`ray.cluster_resources()`: CPU, GPU, memory and any
    custom resource its nodes declare), asked by a short-lived process: joining Ray as a driver here would
    leave a Ray core worker inside Celery's prefork parent, which its forked children inherit. {} when the
    cluster cannot be asked (down, unreachable, Ray missing): unknown, which refuses no run."""
    try:
        out = subprocess.run(
            [sys.executable, "-c", _RAY_PROBE, address],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=True,
        ).stdout
        totals = json.loads(out.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        log.warning("could not ask the Ray cluster at %s for its size: %s", address, exc)
        return {}
    return {str(name): float(amount) for name, amount in totals.items() if isinstance(amount, int | float)}


def forming_is_unknown(totals: dict[str, float]) -> dict[str, float]:
    """A cluster that reports no CPU yet is still forming — compose's Ray head declares none and its nodes
    join after the workers start — and can run nothing: unknown ({}, refusing no run, asked again in 30 s)
    rather than a cluster too small for every run."""
    return totals if totals.get("CPU", 0.0) > 0 else {}


def local_ray_resources(gpus: list[dict]) -> dict[str, float]:
    """What a Ray the trainer starts on this machine (no RAY_ADDRESS) has: its CPUs, and its GPUs as Ray
    counts them (those CUDA_VISIBLE_DEVICES lets it see, when set). The trainer sizes a local Ray's CPUs
    for the run (`trainers.learn.distributed.cluster_for_run`): only its GPUs can fall short."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    count = (
        len(gpus) if visible is None else min(len(gpus), len([d for d in visible.split(",") if d.strip()]))
    )
    return {"CPU": float(os.cpu_count() or 1), **({"GPU": float(count)} if count else {})}


def ray_resources(*, measure: bool = False) -> dict[str, float] | None:
    """The Ray cluster this worker's runs would meet, as last measured ({} until the first answer; None in
    a process that never measured it, such as a run's pool process: the stored report stands).
    `measure`: start a new measurement when one is due (the heartbeat thread asks)."""
    from django.conf import settings

    address = settings.RAY_ADDRESS
    if not address:
        return local_ray_resources(_state.setdefault("gpus", detect_gpus()))
    if measure and time.monotonic() >= _state.get("ray_probe_due", 0.0):
        _state["ray_probe_due"] = math.inf  # one probe at a time

        def probe() -> None:
            totals = forming_is_unknown(probe_ray_cluster(address))
            _state["ray_resources"] = totals
            _state["ray_probe_due"] = time.monotonic() + (RAY_PROBE_EVERY_S if totals else RAY_PROBE_RETRY_S)

        threading.Thread(target=probe, name="worker-ray-probe", daemon=True).start()
    if "ray_resources" not in _state:
        return {} if measure else None
    return _state["ray_resources"]


def report(stopped: bool = False, *, measure: bool = False) -> None:
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
        ray_resources=ray_resources(measure=measure),
        parts=_state.setdefault("parts", _parts()),
    )


def _parts() -> list[dict]:
    """The training parts this worker has (read once: installing a part package means a restart)."""
    from trainers.parts import part_catalogue

    try:
        return part_catalogue()
    except Exception:  # informational until a launch asks: never stop the heartbeat over it
        log.exception("could not list the training parts this worker has")
        return []


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
                report(measure=True)
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

"""This process's peak memory, as a run reports it: resident (RSS) and, where torch uses CUDA, GPU.

The peak resident set is the kernel's high-water mark (`VmHWM` in /proc/self/status; `ru_maxrss`
elsewhere). A long-lived worker trains many runs, so it resets the mark when a run starts
(`reset_peaks`: writing 5 to /proc/self/clear_refs, Linux ≥ 4.0) and each run reports its own peak.
GPU memory is torch's `max_memory_allocated`, read only when torch is already imported and CUDA is
initialised (this module never imports torch).

The sink sends both on its heartbeats (`trainers.sdk.wire`: the heartbeat's peak_rss_mb and
peak_gpu_mb); the dashboard keeps the highest on the run.
"""

from __future__ import annotations

import re
import resource
import sys

_HWM = re.compile(r"^VmHWM:\s+(\d+)\s+kB", re.M)


def peak_rss_mb() -> int | None:
    """This process's peak resident memory in MB since it started or since `reset_peaks`."""
    try:
        with open("/proc/self/status") as status:
            match = _HWM.search(status.read())
        if match:
            return int(match.group(1)) // 1024
    except OSError:
        pass
    try:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KB on Linux, bytes on macOS
    except (OSError, ValueError):
        return None
    return int(peak // (2**20 if sys.platform == "darwin" else 1024))


def _cuda():
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        return torch.cuda if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    except Exception:  # noqa: BLE001 — a broken driver must not stop a report
        return None


def peak_gpu_mb() -> int | None:
    """The most GPU memory torch allocated at once (all devices, MB) since `reset_peaks`; None without CUDA."""
    cuda = _cuda()
    if cuda is None:
        return None
    return sum(int(cuda.max_memory_allocated(index)) for index in range(cuda.device_count())) // 2**20


def peaks() -> dict[str, int]:
    """The heartbeat's memory fields: {"peak_rss_mb", "peak_gpu_mb"}, each only where known."""
    values = {"peak_rss_mb": peak_rss_mb(), "peak_gpu_mb": peak_gpu_mb()}
    return {name: value for name, value in values.items() if value is not None}


def reset_peaks() -> bool:
    """Start the peaks afresh (a worker, when a run starts). Returns whether the resident peak was reset
    (False where the kernel does not let this process do it: the peak then covers the process's life)."""
    cuda = _cuda()
    if cuda is not None:
        for index in range(cuda.device_count()):
            cuda.reset_peak_memory_stats(index)
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
        return True
    except OSError:
        return False

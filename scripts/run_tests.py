"""The whole suite as pytest processes in lanes, two at a time (tests/parallel.py; `make test`).

    python scripts/run_tests.py [pytest arguments for every lane …]

Two slots, two cores. The heavy lane (`slow`: the real model, Ray, workers, servers) holds the first slot
from the start and prints as it runs; the other lanes (quick, browser, the two halves of the benches, then
the vLLM tier) wait in a queue, and each starts in whichever slot is free first, writing to
`<ROLLOUT_STUDIO_VAR>/<lane>-lane.log`, printed whole when all are done. So no slot stands idle while a lane
waits: when the heavy lane ends (~17 min), the benches' second half takes its slot instead of queueing
behind the first half (CI on 4d4c1f8: the heavy slot idle from 999 s, the other ending at 2,036 s).
Exits non-zero when any lane failed (a lane that selected no test counts as passed).

The vLLM tier (tests/vllm) runs in its own venv (the Makefile's venv-vllm) and state directory
(`<ROLLOUT_STUDIO_VAR>-vllm`), when that venv exists and no test paths are named. `make test-vllm` runs
the tier alone with the same pytest arguments.

Each lane's PyTorch (and the workers and servers its tests start) computes on one thread. With its default
two threads, a process whose other core is busy waits at every parallel region for the thread that is not
running: a training step of the bundled model beside a busy core took 18.8 s on two threads and 13.9 s on
one (8.0 s on two when alone), and the other core's work got half of its core instead of all of it. Set
OMP_NUM_THREADS yourself to choose otherwise.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.parallel import LANE_VARIABLE, LANES, QUEUED  # noqa: E402

NO_TESTS_COLLECTED = 5  # pytest's exit code


VLLM_LANE = "vllm"
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


def names_paths(extra: list[str]) -> bool:
    """Whether the arguments select tests by path (`tests/webapp`, `tests/x.py::test_y`)."""
    return any(not arg.startswith("-") and (ROOT / arg.split("::")[0]).exists() for arg in extra)


def queued_lanes(extra: list[str]) -> list[str]:
    """The lanes that wait for a free slot, in the order they start."""
    with_vllm = VLLM_PYTHON.exists() and not names_paths(extra)
    return [*QUEUED, *([VLLM_LANE] if with_vllm else [])]


def lane_command(lane: str, extra: list[str]) -> list[str]:
    if lane == VLLM_LANE:
        return [str(VLLM_PYTHON), "-m", "pytest", "-p", "no:django", "-m", "vllm", *extra, "tests/vllm"]
    return [sys.executable, "-m", "pytest", "-m", LANES[lane], *extra]


ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


# Each lane, and every worker, server and trainer its tests start, is a fresh Python process: with
# PYTHONDONTWRITEBYTECODE (set in the shells of the machines this is developed on) each one compiled
# webapp/, trainers/ and the packages uv installed without bytecode from source again, and pytest rewrote
# every test module's asserts anew (collecting the quick tests: 31 s with it, 19 s without once the
# caches are written; the heavy lane 23:00 → 18:44 on the AMD machine).
NOT_INHERITED = ("PYTHONDONTWRITEBYTECODE",)


def lane_environment(lane: str) -> dict[str, str]:
    """The lane's environment: its name, one compute thread per process unless told otherwise, bytecode."""
    threads = {} if "OMP_NUM_THREADS" in os.environ else ONE_THREAD
    inherited = {key: value for key, value in os.environ.items() if key not in NOT_INHERITED}
    if lane == VLLM_LANE:  # not one of tests/parallel.py's lanes: a state directory of its own instead
        inherited.pop(LANE_VARIABLE, None)
        var = os.environ.get("ROLLOUT_STUDIO_VAR", "var")
        return {**inherited, **threads, "ROLLOUT_STUDIO_VAR": f"{var}-vllm"}
    return {**inherited, **threads, LANE_VARIABLE: lane}


def start(lane: str, extra: list[str], log=None) -> subprocess.Popen:
    output = {"stdout": log, "stderr": subprocess.STDOUT} if log is not None else {}
    return subprocess.Popen(lane_command(lane, extra), cwd=ROOT, env=lane_environment(lane), **output)


SLOTS = 2
POLL_S = 0.5


def main(extra: list[str]) -> int:
    var = ROOT / os.environ.get("ROLLOUT_STUDIO_VAR", "var")
    var.mkdir(parents=True, exist_ok=True)
    waiting = queued_lanes(extra)
    order = ["heavy", *waiting]
    logs = {lane: var / f"{lane}-lane.log" for lane in waiting}
    started = time.monotonic()
    codes: dict[str, int] = {}
    ended: dict[str, float] = {}
    running: dict[str, tuple[subprocess.Popen, object]] = {"heavy": (start("heavy", extra), None)}
    try:
        while running or waiting:
            while waiting and len(running) < SLOTS:
                lane = waiting.pop(0)
                log = open(logs[lane], "w")  # noqa: SIM115 - closed when its lane ends
                running[lane] = (start(lane, extra, log), log)
            for lane, (process, log) in list(running.items()):
                if process.poll() is None:
                    continue
                codes[lane] = process.returncode
                ended[lane] = time.monotonic() - started
                if log is not None:
                    log.close()
                del running[lane]
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        for process, _ in running.values():
            process.send_signal(signal.SIGINT)
        for process, _ in running.values():
            process.wait()
        return 130
    for lane in order[1:]:
        selection = LANES.get(lane, "the vLLM venv's tests/vllm")
        print(f"\n===== the {lane} lane ({selection}): {logs[lane]} =====", flush=True)
        print(logs[lane].read_text(), end="", flush=True)
    ends = ", ".join(f"{lane} exited {codes[lane]} after {ended[lane]:.0f} s" for lane in order)
    print(f"\n===== lanes: {ends}; {time.monotonic() - started:.0f} s in all =====", flush=True)
    failed = [code for code in codes.values() if code not in (0, NO_TESTS_COLLECTED)]
    return failed[0] if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

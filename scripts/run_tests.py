"""The whole suite as pytest processes in lanes, two at a time (tests/parallel.py; `make test`).

    python scripts/run_tests.py [pytest arguments for every lane …]

The heavy lane (`slow`: the real model, Ray, workers, servers) prints as it runs; beside it the quick lane
(the in-process tests) and then the browser lane (Chromium against a daphne server, nothing trained) run
one after the other, each writing to `<ROLLOUT_STUDIO_VAR>/<lane>-lane.log`, printed whole when all are
done. Exits non-zero when any lane failed (a lane that selected no test counts as passed).

The vLLM tier (tests/vllm) runs last beside the heavy lane, in its own venv (the Makefile's venv-vllm)
and state directory (`<ROLLOUT_STUDIO_VAR>-vllm`), when that venv exists and no test paths are named: the
tier (2.5-3.5 min) runs beside the heavy lane instead of after everything, and the two slots end within
seconds to minutes of each other, by machine (docs/architecture.md, "Installs in seconds" and "Under 15
minutes"). `make test-vllm` runs the tier alone with the same pytest arguments.

Two lanes, two cores: each lane's PyTorch (and the workers and servers its tests start) computes on one
thread. With its default two threads, a process whose other core is busy waits at every parallel region
for the thread that is not running: a training step of the bundled model beside a busy core took 18.8 s
on two threads and 13.9 s on one (8.0 s on two when alone), and the other core's work got half of its
core instead of all of it. Set OMP_NUM_THREADS yourself to choose otherwise.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.parallel import AFTER_ONE_ANOTHER, LANE_VARIABLE, LANES  # noqa: E402

NO_TESTS_COLLECTED = 5  # pytest's exit code


VLLM_LANE = "vllm"
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


def names_paths(extra: list[str]) -> bool:
    """Whether the arguments select tests by path (`tests/webapp`, `tests/x.py::test_y`)."""
    return any(not arg.startswith("-") and (ROOT / arg.split("::")[0]).exists() for arg in extra)


def second_slot(extra: list[str]) -> list[str]:
    """The lanes that run one after the other beside the heavy one."""
    with_vllm = VLLM_PYTHON.exists() and not names_paths(extra)
    return [*AFTER_ONE_ANOTHER, *([VLLM_LANE] if with_vllm else [])]


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


def main(extra: list[str]) -> int:
    var = ROOT / os.environ.get("ROLLOUT_STUDIO_VAR", "var")
    var.mkdir(parents=True, exist_ok=True)
    after_one_another = second_slot(extra)
    logs = {lane: var / f"{lane}-lane.log" for lane in after_one_another}
    started = time.monotonic()
    codes: dict[str, int] = {}
    ended: dict[str, float] = {}
    heavy = start("heavy", extra)
    running = [heavy]

    def note_when_heavy_ends() -> None:  # its end, not when the other slot's lanes were done
        heavy.wait()
        ended["heavy"] = time.monotonic() - started

    heavy_watch = threading.Thread(target=note_when_heavy_ends, daemon=True)
    heavy_watch.start()
    try:
        for lane in after_one_another:
            with open(logs[lane], "w") as log:
                process = start(lane, extra, log)
                running.append(process)
                codes[lane] = process.wait()
                ended[lane] = time.monotonic() - started
        codes["heavy"] = heavy.wait()
        heavy_watch.join()
    except KeyboardInterrupt:
        for process in running:
            process.send_signal(signal.SIGINT)
        for process in running:
            process.wait()
        return 130
    for lane in after_one_another:
        selection = LANES.get(lane, "the vLLM venv's tests/vllm")
        print(f"\n===== the {lane} lane ({selection}), beside the heavy one: {logs[lane]} =====", flush=True)
        print(logs[lane].read_text(), end="", flush=True)
    ends = ", ".join(
        f"{lane} exited {codes[lane]} after {ended[lane]:.0f} s" for lane in ("heavy", *after_one_another)
    )
    print(f"\n===== lanes: {ends}; {time.monotonic() - started:.0f} s in all =====", flush=True)
    failed = [code for code in codes.values() if code not in (0, NO_TESTS_COLLECTED)]
    return failed[0] if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

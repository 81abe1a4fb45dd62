"""The whole suite as two pytest processes side by side, one per lane of tests/parallel.py (`make test`).

    python scripts/run_tests.py [pytest arguments for both lanes …]

The heavy lane (`slow` and `browser`: the real model, Ray, workers, servers, Chromium) prints as it runs;
the quick lane (everything else) writes to `<ROLLOUT_STUDIO_VAR>/quick-lane.log`, printed whole when both
are done. Exits non-zero when either lane failed (a lane that selected no test counts as passed).
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

from tests.parallel import LANE_VARIABLE, LANES  # noqa: E402

NO_TESTS_COLLECTED = 5  # pytest's exit code


def lane_command(lane: str, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-m", LANES[lane], *extra]


def main(extra: list[str]) -> int:
    var = ROOT / os.environ.get("ROLLOUT_STUDIO_VAR", "var")
    var.mkdir(parents=True, exist_ok=True)
    quick_log = var / "quick-lane.log"
    started = time.monotonic()
    with open(quick_log, "w") as log:
        quick = subprocess.Popen(
            lane_command("quick", extra),
            cwd=ROOT,
            env={**os.environ, LANE_VARIABLE: "quick"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        heavy = subprocess.Popen(
            lane_command("heavy", extra), cwd=ROOT, env={**os.environ, LANE_VARIABLE: "heavy"}
        )
        try:
            codes = {"heavy": heavy.wait()}
            heavy_s = time.monotonic() - started
            codes["quick"] = quick.wait()
        except KeyboardInterrupt:
            for process in (heavy, quick):
                process.send_signal(signal.SIGINT)
            for process in (heavy, quick):
                process.wait()
            return 130
    print(f"\n===== the quick lane ({LANES['quick']}), beside the heavy one: {quick_log} =====", flush=True)
    print(quick_log.read_text(), end="", flush=True)
    print(
        f"\n===== lanes: heavy exited {codes['heavy']} after {heavy_s:.0f} s, quick exited {codes['quick']}; "
        f"{time.monotonic() - started:.0f} s in all =====",
        flush=True,
    )
    failed = [code for code in codes.values() if code not in (0, NO_TESTS_COLLECTED)]
    return failed[0] if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

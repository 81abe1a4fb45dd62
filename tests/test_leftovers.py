"""A test session stops what it started: the embedded redis-server of a plain `pytest` run (the deploy tier's
host-side process is one) is gone when pytest exits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_plain_pytest_run_stops_the_embedded_redis_server_it_started(tmp_path):
    env = {
        k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "PYTEST_XDIST_WORKER")
    }
    env |= {"ROLLOUT_STUDIO_VAR": str(tmp_path), "ROLLOUT_STUDIO_TEST_LANE": ""}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "tests/test_parallel.py::test_this_session_runs_where_its_process_says",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (tmp_path / "redis.log").exists(), "the session should have started its own redis-server"
    still_running = [
        process.pid for process in psutil.process_iter() if str(tmp_path) in " ".join(_cmdline(process))
    ]
    assert not still_running, f"redis-server {still_running} outlived the pytest run that started it"


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []

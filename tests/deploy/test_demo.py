"""`manage.py demo` — what `make demo` runs — on the embedded default, in a fresh state directory:
it seeds the demo project, serves the dashboard where it says, and Ctrl-C stops every process it
started (web server, both workers, the embedded redis-server)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    """Running (a zombie whose parent has not reaped it yet counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in found]


@pytest.mark.slow
def test_the_demo_serves_the_seeded_project_and_ctrl_c_stops_everything(tmp_path):
    var = tmp_path / "var"
    port = free_port()
    # The embedded default: no DATABASE_URL / REDIS_URL, whatever this test session runs on.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_ALLOW_ASYNC_UNSAFE")
    }
    env.update(ROLLOUT_STUDIO_VAR=str(var), PYTHONUNBUFFERED="1")
    log = open(tmp_path / "demo.log", "w+")
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--port", str(port), "--no-launch"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert demo.poll() is None, (tmp_path / "demo.log").read_text()[-3000:]
            try:
                if requests.get(f"{url}/healthz", timeout=1).ok:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "the demo did not answer within 120 s"
            time.sleep(0.3)
        printed = (tmp_path / "demo.log").read_text()
        assert f"Rollout Studio is starting at {url}/" in printed and "demo / rollout-demo" in printed

        session = requests.Session()
        login_page = session.get(f"{url}/accounts/login/", timeout=10).text
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login_page).group(1)
        signed_in = session.post(
            f"{url}/accounts/login/",
            timeout=10,
            headers={"Referer": f"{url}/accounts/login/"},
            data={"csrfmiddlewaretoken": token, "username": "demo", "password": "rollout-demo"},
        )
        assert signed_in.ok and "/accounts/login/" not in signed_in.url
        home = session.get(f"{url}/p/demo/", timeout=10)
        assert home.status_code == 200 and "Demo: arithmetic agents" in home.text
        runs = session.get(f"{url}/p/demo/runs/", timeout=10).text
        assert "GRPO on arithmetic (demo)" in runs
        assert "Arithmetic with a calculator" in session.get(f"{url}/p/demo/environments/", timeout=10).text
        assert "Correct and well-formed" in session.get(f"{url}/p/demo/rubrics/", timeout=10).text

        started = _children(demo.pid)
        redis_pid = int((var / "redis.pid").read_text())
        assert len(started) == 3 and _alive(redis_pid)
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=60) == 0
        deadline = time.monotonic() + 10
        while any(map(_alive, [*started, redis_pid])) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in [*started, redis_pid] if _alive(pid)]
    finally:
        if demo.poll() is None:
            demo.kill()
        for pid in _children(demo.pid):
            os.kill(pid, signal.SIGKILL)
        log.close()

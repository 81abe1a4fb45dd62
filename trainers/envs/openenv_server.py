"""Environment servers started for the `openenv` kind ("start this server for me"): `server_app`
(`module:app`, run with uvicorn) or `server_command` (a command line with `{port}`), once per process
(per rollout worker), on a free 127.0.0.1 port, health-checked, and stopped at exit."""

from __future__ import annotations

import atexit
import os
import shlex
import subprocess
import sys
import threading
import time
from collections import deque

import requests

from trainers.envs.openenv_client import RemoteEnvironmentError
from trainers.envs.ports import free_port


class ManagedServer:
    """One server process on 127.0.0.1, started on a free port and stopped at exit."""

    def __init__(self, argv: list[str], *, cwd: str | None, startup_timeout_s: float) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [part.replace("{port}", str(self.port)) for part in argv]
        env = dict(os.environ)
        if cwd:  # a `module:app` next to the working directory must be importable
            env["PYTHONPATH"] = os.pathsep.join(p for p in (cwd, env.get("PYTHONPATH", "")) if p)
        self._log: deque[str] = deque(maxlen=40)
        try:
            self.process = subprocess.Popen(
                self.argv,
                cwd=cwd or None,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        except OSError as exc:
            raise RemoteEnvironmentError(
                f"Could not start the environment server {shlex.join(self.argv)!r}: {exc}"
            ) from exc
        # Drain its output (keeping the tail for error messages) so a chatty server never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()
        self._wait_healthy(startup_timeout_s)

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._log.append(line.rstrip())

    def output_tail(self) -> str:
        return "\n".join(list(self._log)[-10:])

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                time.sleep(0.1)  # let the drain thread read the last lines
                raise RemoteEnvironmentError(
                    f"The environment server {shlex.join(self.argv)!r} exited with code {self.process.returncode} "
                    f"before it was healthy. Its last output:\n{self.output_tail()}"
                )
            try:
                if requests.get(f"{self.url}/health", timeout=1.0).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.stop()
        raise RemoteEnvironmentError(
            f"The environment server {shlex.join(self.argv)!r} was not healthy at {self.url}/health within "
            f"{timeout_s:g} s. Its last output:\n{self.output_tail()}"
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


_SERVERS: dict[tuple[str, ...], ManagedServer] = {}
_SERVERS_LOCK = threading.Lock()


def server_argv(server_app: str, server_command: str) -> list[str]:
    if server_app:
        return [
            sys.executable,
            "-m",
            "uvicorn",
            server_app,
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "--log-level",
            "warning",
        ]
    return shlex.split(server_command)


def managed_server(argv: list[str], *, cwd: str, startup_timeout_s: float) -> ManagedServer:
    """The process's server for this command, started on first use (one per rollout worker)."""
    key = (*argv, cwd)
    with _SERVERS_LOCK:
        server = _SERVERS.get(key)
        if server is None or server.process.poll() is not None:
            server = ManagedServer(argv, cwd=cwd or None, startup_timeout_s=startup_timeout_s)
            _SERVERS[key] = server
        return server


@atexit.register
def stop_managed_servers() -> None:
    """Stop every server this process started (also registered to run at exit)."""
    with _SERVERS_LOCK:
        servers = list(_SERVERS.values())
        _SERVERS.clear()
    for server in servers:
        server.stop()
    from trainers.envs.openenv_container import stop_containers

    stop_containers()

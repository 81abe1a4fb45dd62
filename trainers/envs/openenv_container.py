"""OpenEnv environments shipped as Docker images (`image:` in the `openenv` config): one container per
process (per rollout worker), its port published on a free 127.0.0.1 port, health-checked on /health,
removed at exit; a container that exits is reported as that, with its exit code and last log lines."""

from __future__ import annotations

import atexit
import json
import subprocess
import threading
import time
import uuid

import requests

from trainers.envs.openenv_client import RemoteEnvironmentError
from trainers.envs.ports import free_port


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) < 300 else text[:300] + "…"


class ManagedContainer:
    """One container of `image` per process, its port published on a free 127.0.0.1 port, health-checked,
    removed at exit.

    Why not OpenEnv's `LocalDockerProvider` (what its `from_docker_image` uses): it publishes the
    port on every interface, not 127.0.0.1; a container that exits at start is only a time-out there,
    without its exit code or logs; and the container port is fixed at 8000."""

    def __init__(
        self, image: str, *, container_port: int, env: dict[str, str], startup_timeout_s: float
    ) -> None:
        self.image, self.container_port = image, container_port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.name = f"rollout-studio-openenv-{uuid.uuid4().hex[:12]}"
        argv = ["docker", "run", "-d", "--name", self.name, "-p", f"127.0.0.1:{self.port}:{container_port}"]
        for key, value in sorted(env.items()):
            argv += ["-e", f"{key}={value}"]
        argv.append(image)
        try:
            started = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RemoteEnvironmentError(
                f"Could not start a container of {image!r}: {_describe(exc)}"
            ) from exc
        if started.returncode != 0:
            raise RemoteEnvironmentError(
                f"Could not start a container of {image!r}: {(started.stderr or started.stdout).strip()[-600:]}"
            )
        self.container_id = started.stdout.strip()
        self._wait_healthy(startup_timeout_s)

    def _docker(self, *args: str, timeout: float = 20) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)

    def exit_problem(self) -> str | None:
        """Why the container is not running (its exit code and last log lines), or None while it runs."""
        try:
            state = self._docker("inspect", "-f", "{{.State.Running}} {{.State.ExitCode}}", self.container_id)
        except (OSError, subprocess.TimeoutExpired):
            return None  # docker itself did not answer: say nothing rather than guess
        running, _, code = state.stdout.strip().partition(" ")
        if state.returncode == 0 and running == "true":
            return None
        try:
            logs = self._docker("logs", "--tail", "10", self.container_id)
            tail = "\n".join((logs.stdout + logs.stderr).strip().splitlines()[-10:])
        except (OSError, subprocess.TimeoutExpired):
            tail = ""
        what = f"exited with code {code}" if state.returncode == 0 else "is gone"
        return f"The environment container {self.name} (image {self.image}) {what}. Its last output:\n{tail}"

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        checked = 0.0
        while time.monotonic() < deadline:
            if time.monotonic() - checked > 1.0:
                checked = time.monotonic()
                problem = self.exit_problem()
                if problem:
                    self.stop()
                    raise RemoteEnvironmentError(problem)
            try:
                if requests.get(f"{self.url}/health", timeout=1.0).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        self.stop()
        raise RemoteEnvironmentError(
            f"The environment container of {self.image!r} was not healthy at {self.url}/health within "
            f"{timeout_s:g} s."
        )

    def running(self) -> bool:
        return self.exit_problem() is None

    def stop(self) -> None:
        try:
            self._docker("rm", "-f", self.container_id, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            pass


_CONTAINERS: dict[str, ManagedContainer] = {}
_CONTAINERS_LOCK = threading.Lock()


def managed_container(
    image: str, *, container_port: int, env: dict[str, str], startup_timeout_s: float
) -> ManagedContainer:
    """The process's container of `image` (one per rollout worker), started on first use; a container
    that died is reported, not silently replaced (the run's error then says why)."""
    key = json.dumps([image, container_port, sorted(env.items())])
    with _CONTAINERS_LOCK:
        container = _CONTAINERS.get(key)
        if container is None:
            container = ManagedContainer(
                image, container_port=container_port, env=env, startup_timeout_s=startup_timeout_s
            )
            _CONTAINERS[key] = container
        return container


@atexit.register
def stop_containers() -> None:
    """Remove every container this process started (also registered to run at exit)."""
    with _CONTAINERS_LOCK:
        containers = list(_CONTAINERS.values())
        _CONTAINERS.clear()
    for container in containers:
        container.stop()

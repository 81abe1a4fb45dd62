"""docker-compose.yml describes the deployed shape: Postgres, Redis, an ASGI web server, a CPU worker,
a GPU worker with an NVIDIA reservation, a Ray head — each with a health check."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def load():
    return yaml.safe_load(COMPOSE.read_text())


def test_it_declares_every_service_with_a_health_check():
    services = load()["services"]
    assert {"postgres", "redis", "web", "worker-cpu", "worker-gpu", "ray-head"} <= set(services)
    for name, service in services.items():
        assert "healthcheck" in service, name


def test_the_gpu_worker_reserves_nvidia_devices_and_installs_the_gpu_extra():
    gpu = load()["services"]["worker-gpu"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert gpu["build"]["args"]["INSTALL_EXTRAS"] == "gpu"
    assert gpu["command"][gpu["command"].index("-Q") + 1] == "gpu"


def test_web_runs_an_asgi_server_on_postgres_and_redis():
    web = load()["services"]["web"]
    env = load()["x-app"]["environment"]
    assert "daphne" in " ".join(web["command"])
    assert env["DATABASE_URL"].startswith("postgres://")
    assert env["REDIS_URL"].startswith("redis://")


def _compose_command() -> list[str] | None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_docker_compose_accepts_the_file():
    command = _compose_command()
    if command is None:
        pytest.skip("no docker compose client on this machine")
    result = subprocess.run([*command, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr

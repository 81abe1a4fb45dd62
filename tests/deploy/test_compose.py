"""docker-compose.yml describes the deployed shape: Postgres, Redis, an ASGI web server, a CPU worker,
a GPU worker with an NVIDIA reservation, a Ray head — each with a health check."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
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
    command = " ".join(web["command"])
    assert "uvicorn webapp.asgi:application" in command and "--workers" in command
    assert env["DATABASE_URL"].startswith("postgres://")
    assert env["REDIS_URL"].startswith("redis://")


def _compose_command() -> list[str] | None:
    if (
        shutil.which("docker")
        and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    ):
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


SECRETS = {
    "SECRET_KEY": "k" * 20 + "-a-long-random-production-secret-key-value",
    "POSTGRES_PASSWORD": "0123abcd" * 3,
}


def _compose_config(**env: str) -> subprocess.CompletedProcess:
    command = _compose_command()
    if command is None:
        pytest.skip("no docker compose client on this machine")
    clean = {k: v for k, v in os.environ.items() if k not in {*SECRETS, "PRODUCTION"}}
    return subprocess.run(
        [*command, "-f", str(COMPOSE), "config", "-q"],
        capture_output=True,
        text=True,
        env={**clean, **env},
        cwd=COMPOSE.parent,
    )


def test_docker_compose_accepts_the_file():
    result = _compose_config(**SECRETS)
    assert result.returncode == 0, result.stderr


def test_compose_refuses_to_start_without_a_secret_key():
    result = _compose_config(PRODUCTION="true", POSTGRES_PASSWORD=SECRETS["POSTGRES_PASSWORD"])
    assert result.returncode != 0
    assert "SECRET_KEY is required" in result.stderr


def test_compose_refuses_to_start_without_a_database_password():
    result = _compose_config(SECRET_KEY=SECRETS["SECRET_KEY"])
    assert result.returncode != 0 and "POSTGRES_PASSWORD is required" in result.stderr


def test_no_secret_has_a_default_in_the_file():
    text = COMPOSE.read_text()
    assert "change-me" not in text
    for name in SECRETS:
        assert f"${{{name}:-" not in text and f"${{{name}}}" not in text, name
    assert load()["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith(
        "${POSTGRES_PASSWORD:?"
    )


_VARIABLE = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's `${VAR}`, `${VAR:-default}` and `${VAR:?error}` (enough for our file)."""

    def one(match: re.Match) -> str:
        name, kind, argument = match.groups()
        if env.get(name):
            return env[name]
        if kind == "?":
            raise ValueError(argument)
        return argument if kind == "-" else ""

    return _VARIABLE.sub(one, value)


def test_check_deploy_is_clean_in_the_compose_configuration(tmp_path):
    """The web service's environment as compose gives it (defaults included: PRODUCTION=true)."""
    environment = {
        name: interpolate(str(value), SECRETS) for name, value in load()["x-app"]["environment"].items()
    }
    assert environment["PRODUCTION"] == "true"
    keep = {
        k: v
        for k, v in os.environ.items()
        if k not in {*environment, "DJANGO_ALLOW_ASYNC_UNSAFE", "DEBUG", "SECURE_SSL_REDIRECT"}
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=COMPOSE.parent,
        capture_output=True,
        text=True,
        env={**keep, **environment, "ROLLOUT_STUDIO_VAR": str(tmp_path / "var")},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout

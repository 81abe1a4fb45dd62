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
    command = gpu["command"][-1]
    assert "-Q gpu" in command
    # The GPU worker's machine joins Ray as a node (with its GPUs) before the worker starts.
    assert command.startswith("ray start --address=ray-head:6379 && exec celery")
    # A node joins a head that answers: `ray start --address` fails when the head is not up yet.
    for name in ("worker-gpu", "worker-cpu", "ray-worker"):
        assert load()["services"][name]["depends_on"]["ray-head"] == {"condition": "service_healthy"}, name


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


def test_workers_are_healthy_by_the_age_of_their_heartbeat_file():
    config = load()
    assert config["x-app"]["environment"]["WORKER_HEARTBEAT_FILE"] == "/tmp/worker-heartbeat"
    for name in ("worker-cpu", "scheduler", "worker-gpu"):
        check = " ".join(config["services"][name]["healthcheck"]["test"])
        assert "/tmp/worker-heartbeat" in check and "-lt 60" in check, name


def test_the_images_users_pull_are_the_defaults_and_each_can_be_replaced():
    """Where Docker Hub is not reachable, scripts/docker-local-bases.sh makes stand-ins; the file is the same."""
    compose = load()
    assert compose["services"]["postgres"]["image"] == "${POSTGRES_IMAGE:-postgres:16}"
    assert compose["services"]["redis"]["image"] == "${REDIS_IMAGE:-redis:7}"
    assert compose["x-app"]["build"]["args"]["BASE_IMAGE"] == "${BASE_IMAGE:-python:3.11-slim}"
    dockerfile = (COMPOSE.parent / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=python:3.11-slim\nFROM ${BASE_IMAGE}" in dockerfile
    # The CA bundle is a build secret and the wheelhouse a mount: neither is copied into a layer.
    assert "--mount=type=secret,id=pip_cert" in dockerfile and "COPY wheelhouse" not in dockerfile


def test_rollout_actors_have_a_ray_node_of_their_own():
    services = load()["services"]
    # The head and the run's driver node offer no CPUs, so Ray places rollout actors on ray-worker.
    assert "--num-cpus=0" in services["ray-head"]["command"]
    assert services["worker-cpu"]["command"][-1].startswith("ray start --address=ray-head:6379 --num-cpus=0 ")
    assert services["ray-worker"]["command"][-1].startswith(
        "exec ray start --address=ray-head:6379 --num-cpus="
    )
    for name in ("web", "worker-cpu", "ray-worker", "ray-head", "postgres", "redis"):
        assert "mem_limit" in services[name], name


def test_workers_in_compose_keep_the_real_stdout_that_ray_needs():
    # ray.init(address=...) inside a Celery task asks sys.stdout for fileno(); Celery's LoggingProxy has none.
    assert load()["x-app"]["environment"]["CELERY_REDIRECT_STDOUTS"] == "0"
    assert (
        'os.environ.get("CELERY_REDIRECT_STDOUTS", "1") != "0"'
        in (COMPOSE.parent / "workers" / "celery.py").read_text()
    )

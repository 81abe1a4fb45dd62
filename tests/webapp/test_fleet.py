"""Worker heartbeats, the Workers page and the LOST-run reaper."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from webapp.experiments.models import Run
from webapp.fleet.services import reap_lost_runs, worker_report


def test_a_run_without_heartbeat_turns_lost_and_a_fresh_one_does_not(run, project, environment, rubric, users):
    from webapp.experiments.services import run_create

    fresh, _ = run_create(project=project, name="fresh", environment=environment, rubric=rubric, preset="grpo",
                          overrides={}, user=users["bob"], dispatch=False)
    long_ago = timezone.now() - timedelta(seconds=300)
    Run.objects.filter(pk=run.pk).update(status="RUNNING", heartbeat_at=long_ago)
    Run.objects.filter(pk=fresh.pk).update(status="RUNNING", heartbeat_at=timezone.now())

    assert reap_lost_runs(timeout_s=45) == [run.pk]
    run.refresh_from_db()
    fresh.refresh_from_db()
    assert run.status == "LOST" and "stopped reporting" in run.error_message and run.finished_at
    assert fresh.status == "RUNNING"
    assert reap_lost_runs(timeout_s=45) == []  # a final status never changes again


def test_queued_runs_are_never_reaped(run):
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
    assert reap_lost_runs(timeout_s=45) == []


def test_the_workers_page_names_a_run_only_to_its_project_members(client_for, run):
    worker_report(hostname="cpu@box", queues=["cpu"], gpus=[{"index": 0, "name": "H100", "memory_mb": 81559}],
                  cpus=16, ray_address="10.0.0.5:6379", pid=123, current_run_id=run.pk)
    page = client_for("dave").get("/workers/").content.decode()
    assert "cpu@box" in page and "H100" in page and run.name in page and "online" in page

    page = client_for("eve").get("/workers/").content.decode()
    assert "cpu@box" in page and run.name not in page and "a run of another project" in page


def test_the_workers_page_needs_a_sign_in(client):
    response = client.get("/workers/")
    assert response.status_code == 302 and "/accounts/login" in response["Location"]

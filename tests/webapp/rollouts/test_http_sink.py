"""trainers.sdk.reporting.HttpSink against the real dashboard served over HTTP."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from trainers.sdk.reporting import HttpSink
from webapp.experiments.models import Run
from webapp.rollouts.models import MetricPoint, RunEvent, Trajectory


@pytest.fixture
def reporting_run(transactional_db, project, environment, rubric, users):
    from webapp.experiments.services import run_create

    return run_create(
        project=project,
        name="reported",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )


def test_it_delivers_events_in_batches_and_sees_cancel(live_server, reporting_run):
    run, token = reporting_run
    Run.objects.filter(pk=run.pk).update(status="RUNNING")
    sink = HttpSink(live_server.url, run.pk, token, flush_interval_s=0.05)
    for step in range(50):
        sink.emit({"type": "metrics", "step": step, "values": {"reward/mean": step / 50, "kl": float("nan")}})
    sink.emit(
        {
            "type": "trajectories",
            "step": 1,
            "items": [
                {
                    "group": 0,
                    "sample": 0,
                    "task_id": "t",
                    "reward": 1.0,
                    "turns": [{"role": "assistant", "text": "hi"}],
                }
            ],
        }
    )
    assert sink.flush(30)
    assert RunEvent.objects.filter(run=run).count() == 51
    assert MetricPoint.objects.filter(run=run, key="reward/mean").count() == 50
    assert not MetricPoint.objects.filter(run=run, key="kl").exists()  # NaN travels as null and is skipped
    assert Trajectory.objects.filter(run=run).count() == 1
    assert sink.control() == {"cancel": False}

    Run.objects.filter(pk=run.pk).update(cancel_requested=True)
    sink.emit({"type": "log", "message": "still going"})
    assert sink.flush(30)
    assert sink.control() == {"cancel": True}
    sink.close()
    assert sink.stats["sent"] == 52 and sink.stats["rejected"] == 0


def test_emit_never_waits_for_the_network(reporting_run):
    """A dashboard that accepts connections and never answers: every POST hangs until its 10 s timeout,
    yet emitting stays instant, because only the sink's thread talks to the network."""
    run, token = reporting_run
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # never accept(): requests hang
    sink = HttpSink(f"http://127.0.0.1:{silent.getsockname()[1]}", run.pk, token, timeout_s=10)
    try:
        started = time.perf_counter()
        for step in range(500):
            sink.emit({"type": "metrics", "step": step, "values": {"reward/mean": 0.0}})
        assert time.perf_counter() - started < 5  # one blocking POST alone would take 10 s
        assert not sink.flush(timeout_s=0.1)  # nothing could be delivered, and flush says so
    finally:
        silent.close()
        sink.close(timeout_s=1)  # its thread gives up on the closed port instead of retrying into later tests


class _Flaky(BaseHTTPRequestHandler):
    """Answers 503 to the first requests, then accepts: the sink must retry the same sequence numbers."""

    failures_left = 2
    received: list[list[int]] = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        seqs = [e["seq"] for e in body["events"]]
        type(self).received.append(seqs)
        if type(self).failures_left > 0:
            type(self).failures_left -= 1
            self.send_response(503)
            self.send_header("Retry-After", "0")
            self.end_headers()
            return
        reply = json.dumps(
            {"accepted": len(seqs), "duplicates": 0, "last_seq": max(seqs), "control": {}}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        return


def test_it_retries_a_failed_batch_with_the_same_sequence_numbers():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sink = HttpSink(
            f"http://127.0.0.1:{server.server_port}", 1, "rsr_x", start_seq=41, max_backoff_s=0.05
        )
        for i in range(3):
            sink.emit({"type": "log", "message": f"line {i}"})
        assert sink.flush(10)
        sink.close()
    finally:
        server.shutdown()
    first = _Flaky.received[0]
    assert first[0] == 41
    assert _Flaky.received[1] == first and _Flaky.received[2] == first  # the same batch, retried twice
    assert sorted({seq for batch in _Flaky.received for seq in batch}) == [41, 42, 43]
    assert sink.stats["retries"] == 2 and sink.stats["sent"] == 3


def test_a_phase_reaches_the_dashboard_at_once_even_with_a_long_flush_interval(live_server, reporting_run):
    """The run page shows a phase within 2 s of its start: the sink sends what is emitted as soon as its
    thread is free (the interval only paces an idle sink's checks), so nothing waits for a batch to fill."""
    run, token = reporting_run
    Run.objects.filter(pk=run.pk).update(status="RUNNING")
    sink = HttpSink(live_server.url, run.pk, token, flush_interval_s=30.0)
    try:
        time.sleep(0.3)  # the sink's thread is idle, waiting
        emitted = time.monotonic()
        sink.emit(
            {"type": "phase", "phase": "generating", "step": 1, "done": 0, "total": 4, "elapsed_s": 0.0}
        )
        while not RunEvent.objects.filter(run=run, type="phase").exists():
            assert time.monotonic() - emitted < 2, "the phase event is still waiting in the sink"
            time.sleep(0.02)
        stored = RunEvent.objects.get(run=run, type="phase").summary
        assert (stored["phase"], stored["done"], stored["total"]) == ("generating", 0, 4)
    finally:
        sink.close()


def test_a_busy_sink_still_sends_the_processs_peak_memory_which_the_run_keeps_and_shows(
    live_server, reporting_run, client
):
    """Issue 25 point 3: the sink's heartbeats carry the peak memory, one every heartbeat interval even
    while events keep coming; the run keeps the highest, and its page and the Workers page show it."""
    from webapp.fleet.services import worker_report

    run, token = reporting_run
    Run.objects.filter(pk=run.pk).update(status="RUNNING")
    sink = HttpSink(live_server.url, run.pk, token, flush_interval_s=0.05, heartbeat_interval_s=0.3)
    deadline = time.monotonic() + 5
    while not Run.objects.get(pk=run.pk).peak_rss_mb and time.monotonic() < deadline:
        sink.emit({"type": "log", "message": "busy"})  # never idle
        time.sleep(0.05)
    assert sink.close(30)
    run.refresh_from_db()
    from trainers.sdk.resources import peak_rss_mb

    assert 0 < run.peak_rss_mb <= peak_rss_mb() and run.peak_gpu_mb is None
    beats = RunEvent.objects.filter(run=run, type="heartbeat").count()
    assert beats >= 1

    # A lower report never lowers it; a higher one raises it.
    for seq, value in ((10_000, 1), (10_001, run.peak_rss_mb + 1000)):
        response = client.post(
            f"/api/runs/{run.pk}/events",
            data=json.dumps({"events": [{"seq": seq, "type": "heartbeat", "peak_rss_mb": value}]}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
        assert response.status_code == 200, response.content
    highest = run.peak_rss_mb + 1000
    run.refresh_from_db()
    assert run.peak_rss_mb == highest

    worker_report(
        hostname="cpu@box", queues=["cpu"], gpus=[], cpus=2, ray_address="", pid=1, current_run_id=run.pk
    )
    client.force_login(run.created_by)
    page = client.get(f"/p/{run.project.slug}/runs/{run.pk}/").content.decode()
    assert f"{highest} MB resident" in page.split("data-run-peak-memory>")[1].split("</dd>")[0]
    workers = client.get("/workers/").content.decode()
    assert f"peak {highest} MB resident" in workers.split("data-worker-peak-memory>")[1].split("</div>")[0]
    assert client.get(f"/api/runs/{run.pk}/").json()["peak_rss_mb"] == highest

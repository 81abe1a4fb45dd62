"""The run page is always true: along every path a run's status can take, the page a user keeps open —
moved only by the websocket — shows what a fresh load of it shows, part by part (status badges, the
actions offered, the cancel-requested badges, the error banner, the timestamps and worker, the checkpoints
table, progress and the trainer's current phase). Each state is compared with a reload rendered by the
server alone (JavaScript off) and with a reload whose script has applied its snapshot.

Real headless Chromium against a real daphne, the real channel layer and the real ingestion API; the
worker's claim, the cancel button and the LOST reaper go through the services the product uses."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
import requests
from django.contrib.auth import get_user_model
from django.utils import timezone

from tests.browser.conftest import PAGE_TIMEOUT_MS, elsewhere, new_page, sign_in, wait_until_following

PASSWORD = "correct-horse-battery"

# What the page shows, read from the marks the template and run_live.js share (elements inside a hidden
# ancestor count as absent).
PAGE_STATE = """() => {
  const shown = (node) => Boolean(node) && !node.closest('[hidden]');
  const words = (node) => node.textContent.replace(/\\s+/g, ' ').trim();
  const all = (selector) => Array.from(document.querySelectorAll(selector));
  const instantOf = (cell) => new Date(cell.querySelector('time').getAttribute('datetime')).toISOString().slice(0, 16);
  const texts = (selector) => all(selector).map((node) => shown(node) ? words(node) : null);
  // A time ({% when %} and static/js/when.js: its text is in the reader's zone) as the instant it names,
  // to the second, so a page without JavaScript (UTC text) and one with it compare: "—" when there is none.
  const instants = (selector) => all(selector).map((node) => {
    if (!shown(node)) return null;
    const time = node.querySelector('time[datetime]');
    return time ? new Date(time.getAttribute('datetime')).toISOString().slice(0, 19) : words(node);
  });
  const phase = document.querySelector('[data-live-phase]');
  const bar = document.querySelector('[data-live-phase-progress]');
  const errorPanel = document.querySelector('[data-run-error-panel]');
  return {
    status: texts('[data-run-status], [data-live-status]'),
    cancelRequested: all('[data-run-cancel-requested], [data-live-cancel]').map(shown),
    actions: all('[data-run-action]').filter(shown).map((node) => node.dataset.runAction),
    error: shown(errorPanel) ? words(document.querySelector('[data-run-error]')) : null,
    started: instants('[data-run-started_at]'),
    finished: instants('[data-run-finished_at]'),
    heartbeat: instants('[data-run-heartbeat_at]'),
    worker: texts('[data-run-worker]'),
    checkpoints: all('[data-run-checkpoints] tbody tr').map((row) => Array.from(row.cells).map(
      (cell) => cell.querySelector('time[datetime]') ? instantOf(cell) : words(cell)).join(' | ')),
    startFrom: all('[data-start-from-checkpoint] a').filter(shown).map((link) => words(link) + ' ' + link.getAttribute('href')),
    hackingAlarm: shown(document.querySelector('[data-hacking-alarm]')),
    step: texts('[data-live-step]'),
    best: texts('[data-live-best]'),
    progress: document.querySelector('[data-live-progress]').getAttribute('aria-valuenow'),
    phase: shown(phase) ? {text: words(document.querySelector('[data-live-phase-text]')), bar: shown(bar),
                           done: bar.getAttribute('aria-valuenow'), total: bar.getAttribute('aria-valuemax')} : null,
  };
}"""


@pytest.fixture
def queued_run(transactional_db):
    from webapp.experiments.services import environment_create, rubric_create, run_create
    from webapp.projects.services import project_create

    alice = get_user_model().objects.create_user("alice", "alice@example.com", PASSWORD)
    project = project_create(name="Agents", owner=alice)
    environment = environment_create(
        project=project, name="arith", kind="arithmetic_calculator", config={}, user=alice
    )
    rubric = rubric_create(
        project=project,
        name="r",
        user=alice,
        spec={
            "aggregation": "weighted_sum",
            "criteria": [{"name": "correct", "kind": "numeric_match", "weight": 1.0, "params": {}}],
        },
    )
    run, token = run_create(
        project=project,
        name="watched run",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={"max_steps": 4},
        user=alice,
        dispatch=False,
    )
    return project, run, token


class Trainer:
    """Reports like a trainer: numbered event batches through the ingestion API."""

    def __init__(self, server: str, run, token: str) -> None:
        self.url = f"{server}/api/runs/{run.pk}/events"
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.seq = 0

    def report(self, *events: dict) -> None:
        numbered = []
        for event in events:
            self.seq += 1
            numbered.append({"seq": self.seq, "time": time.time(), **event})
        response = requests.post(
            self.url, data=json.dumps({"events": numbered}), headers=self.headers, timeout=10
        )
        assert response.status_code == 200, response.text


class Watch:
    """Alice's open run page, and fresh loads of it to compare with."""

    def __init__(self, browser, server: str, project, run) -> None:
        self.run = run
        self.url = f"{server}/p/{project.slug}/runs/{run.pk}/"
        # bypass_csp: wait_for_function evaluates with eval, which the policy refuses (see the page fixture)
        self.context = browser.new_context(viewport={"width": 1360, "height": 900}, bypass_csp=True)
        self.page = new_page(self.context)
        sign_in(self.page, server, "alice", PASSWORD)
        self.page.goto(self.url)
        wait_until_following(self.page)
        # Alice's other tabs for the fresh loads, signed in once with her session: one renders with
        # JavaScript off (the server's page alone), one with it on. Each comparison loads the page anew.
        session = self.context.storage_state()
        self.reloads = {}
        for javascript in (False, True):
            context = browser.new_context(
                java_script_enabled=javascript, bypass_csp=True, storage_state=session
            )
            self.reloads[javascript] = new_page(context)

    def state(self) -> dict:
        return self.page.evaluate(PAGE_STATE)

    def reloaded(self, *, javascript: bool) -> dict:
        page = self.reloads[javascript]
        page.goto(self.url)
        if javascript:
            wait_until_following(page)
        return page.evaluate(PAGE_STATE)

    def wait_for(self, expression: str, timeout: float = PAGE_TIMEOUT_MS) -> None:
        self.page.wait_for_function(expression, timeout=timeout)

    def wait_for_status(self, label: str) -> None:
        self.wait_for(f"document.querySelector('[data-live-status]').textContent === {json.dumps(label)}")

    def settle(self) -> None:
        """Wait until the page shows the run's latest heartbeat: every message of the last change is in."""
        self.run.refresh_from_db()
        beat = self.run.heartbeat_at
        expected = beat.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S") if beat else "—"
        self.wait_for(
            "(() => { const cell = document.querySelector('[data-run-heartbeat_at]');"
            " const time = cell.querySelector('time[datetime]');"
            " return (time ? new Date(time.getAttribute('datetime')).toISOString().slice(0, 19)"
            f" : cell.textContent) === {json.dumps(expected)}; }})()"
        )

    def agrees_with_a_reload(self) -> dict:
        self.settle()
        live = self.state()
        assert live == self.reloaded(javascript=False), "the live page differs from the server's rendering"
        assert live == self.reloaded(javascript=True), "the live page differs from a reload's"
        return live

    def close(self) -> None:
        for page in self.reloads.values():
            page.context.close()
        self.context.close()


@pytest.fixture
def watch(queued_run, server, browser):
    from django.db import connections

    project, run, _token = queued_run
    watching = Watch(browser, server, project, run)
    yield watching
    watching.close()
    connections.close_all()


def claim(run, worker: str = "gpu-box-1") -> None:
    """What a worker does when it takes the run from the queue (workers/execution.py)."""
    from webapp.experiments.services import run_transition

    assert elsewhere(lambda: run_transition(run.pk, "STARTING", worker=worker, heartbeat_at=timezone.now()))


def cancel_from_another_tab(browser, server: str, url: str) -> None:
    """Someone presses Cancel on the run page: the page asks first, then posts."""
    context = browser.new_context(bypass_csp=True)
    try:
        page = context.new_page()
        sign_in(page, server, "alice", PASSWORD)
        page.goto(url)
        page.click("[data-run-action=cancel] button")
        page.locator("[data-cancel-dialog]").wait_for(state="visible")
        page.click("[data-cancel-dialog-confirm]")
        page.wait_for_load_state()
    finally:
        context.close()


def test_queued_then_running_then_succeeded(queued_run, server, watch):
    project, run, token = queued_run
    trainer = Trainer(server, run, token)
    queued = watch.agrees_with_a_reload()
    assert queued["status"] == ["Queued", "Queued"] and queued["actions"] == ["cancel"]
    assert queued["phase"] is None and queued["checkpoints"] == ["No checkpoints yet."]

    claim(run)
    watch.wait_for_status("Starting")
    assert watch.agrees_with_a_reload()["worker"] == ["on gpu-box-1"]

    # The trainer starts and says what it does: the page shows the phase within 2 s of its start.
    trainer.report({"type": "status", "status": "RUNNING"})
    started = time.monotonic()
    trainer.report(
        {
            "type": "phase",
            "phase": "generating",
            "step": 1,
            "done": 0,
            "total": 4,
            "message": "4 groups of 8",
            "elapsed_s": 0,
        }
    )
    watch.wait_for("!document.querySelector('[data-live-phase]').hidden", timeout=2_000)
    assert time.monotonic() - started < 2
    running = watch.agrees_with_a_reload()
    assert running["phase"] == {
        "text": "Generating · step 1 · 4 groups of 8",
        "bar": True,
        "done": "0",
        "total": "4",
    }
    assert running["started"] != ["—"] and running["finished"] == ["—"]

    trainer.report(
        {
            "type": "phase",
            "phase": "generating",
            "step": 1,
            "done": 3,
            "total": 4,
            "message": "turn 2: 3 of 4 groups done",
            "elapsed_s": 1.5,
        }
    )
    watch.wait_for(
        "document.querySelector('[data-live-phase-progress]').getAttribute('aria-valuenow') === '3'"
    )
    watch.agrees_with_a_reload()

    trainer.report(
        {"type": "metrics", "step": 1, "values": {"reward/mean": 0.25, "accuracy": 0.5}},
        {"type": "checkpoint", "step": 1, "path": "/runs/ckpt/step-1", "metrics": {"reward/mean": 0.25}},
        {"type": "phase", "phase": "checkpointing", "step": 1},
    )
    watch.wait_for("document.querySelectorAll('[data-checkpoint-step]').length === 1")
    middle = watch.agrees_with_a_reload()
    assert middle["step"] == ["step 1 of 4"] and middle["best"] == ["0.2500"]
    # Key metrics as columns (eval accuracy, eval reward, reward), no server path, the weights and the
    # whole model (weights, config, tokenizer) as downloads.
    assert middle["checkpoints"][0].startswith("1 | full | — | — | 0.25 |  | ")
    assert middle["checkpoints"][0].endswith(" | safetensors · model.tar")
    assert "/runs/ckpt" not in middle["checkpoints"][0]
    assert middle["phase"]["text"] == "Checkpointing · step 1" and middle["phase"]["bar"] is False
    # A new run can start from it (the links appear live, as a reload renders them); no alarm here.
    assert [link.split("?from_checkpoint=")[0] for link in middle["startFrom"]] == [
        "step 1 /p/agents/runs/new/"
    ]
    assert middle["hackingAlarm"] is False

    trainer.report({"type": "status", "status": "SUCCEEDED", "message": "finished 4 steps"})
    watch.wait_for_status("Succeeded")
    done = watch.agrees_with_a_reload()
    assert done["phase"] is None and done["finished"] != ["—"]
    assert done["actions"] == [
        "resume",
        "fork",
        "delete",
    ]  # finished with a checkpoint: continued, or deleted


def test_queued_then_cancelled(queued_run, server, browser, watch):
    project, run, _token = queued_run
    # The button asks first; "Keep running" keeps it.
    watch.page.click("[data-run-action=cancel] button")
    watch.page.locator("[data-cancel-dialog]").wait_for(state="visible")
    watch.page.click("[data-cancel-dialog-keep]")
    watch.page.locator("[data-cancel-dialog]").wait_for(state="hidden")
    run.refresh_from_db()
    assert run.status == "QUEUED"

    cancel_from_another_tab(browser, server, watch.url)
    watch.wait_for_status("Cancelled")
    cancelled = watch.agrees_with_a_reload()
    assert cancelled["actions"] == ["delete"] and cancelled["cancelRequested"] == [False, False]
    assert cancelled["finished"] != ["—"] and cancelled["started"] == ["—"]

    # Someone deletes it while the page is open: the page says so, by whom, and offers nothing more.
    from webapp.experiments.models import Run
    from webapp.experiments.services.deletion import run_delete

    elsewhere(lambda: run_delete(run=Run.objects.get(pk=run.pk), user=run.created_by))
    watch.page.locator("[data-run-deleted]").wait_for(state="visible", timeout=PAGE_TIMEOUT_MS)
    banner = watch.page.locator("[data-run-deleted]").inner_text()
    assert "alice deleted this run" in banner and "freed in the background" in banner
    assert watch.state()["actions"] == []


def test_running_then_cancelled(queued_run, server, browser, watch):
    project, run, token = queued_run
    trainer = Trainer(server, run, token)
    claim(run)
    trainer.report(
        {"type": "status", "status": "RUNNING"},
        {"type": "phase", "phase": "updating", "step": 2, "message": "16 samples"},
    )
    watch.wait_for_status("Running")

    cancel_from_another_tab(browser, server, watch.url)
    watch.wait_for("!document.querySelector('[data-run-cancel-requested]').hidden")
    asked = watch.agrees_with_a_reload()
    # Asked once: the page says so and does not offer the button a second time.
    assert asked["cancelRequested"] == [True, True] and asked["actions"] == []

    # The trainer hears it in its next reply, saves a checkpoint and stops.
    trainer.report(
        {"type": "checkpoint", "step": 2, "path": "/runs/ckpt/step-2", "metrics": {}},
        {"type": "status", "status": "CANCELLED", "message": "cancelled after step 2"},
    )
    watch.wait_for_status("Cancelled")
    cancelled = watch.agrees_with_a_reload()
    assert cancelled["cancelRequested"] == [False, False] and cancelled["phase"] is None
    assert cancelled["actions"] == ["resume", "fork", "delete"]


def test_running_then_failed(queued_run, server, watch):
    project, run, token = queued_run
    trainer = Trainer(server, run, token)
    claim(run)
    trainer.report({"type": "status", "status": "RUNNING"}, {"type": "phase", "phase": "scoring", "step": 1})
    watch.wait_for_status("Running")
    watch.agrees_with_a_reload()

    trainer.report(
        {
            "type": "status",
            "status": "FAILED",
            "message": "RuntimeError: CUDA out of memory <b>x</b>",
            "traceback": "Traceback (most recent call last): …",
        }
    )
    watch.wait_for_status("Failed")
    failed = watch.agrees_with_a_reload()
    assert failed["error"] == "RuntimeError: CUDA out of memory <b>x</b>"
    assert failed["actions"] == ["delete"] and failed["phase"] is None  # no checkpoint: nothing to resume


def test_running_then_lost(queued_run, server, watch):
    from webapp.experiments.models import Run
    from webapp.fleet.services import reap_lost_runs

    project, run, token = queued_run
    trainer = Trainer(server, run, token)
    claim(run)
    trainer.report(
        {"type": "status", "status": "RUNNING"},
        {"type": "checkpoint", "step": 1, "path": "/runs/ckpt/step-1", "metrics": {"reward/mean": 0.5}},
    )
    watch.wait_for("document.querySelectorAll('[data-checkpoint-step]').length === 1")
    watch.agrees_with_a_reload()

    # The worker goes silent: the reaper marks the run LOST.
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    assert elsewhere(lambda: reap_lost_runs(timeout_s=45)) == [run.pk]
    watch.wait_for_status("Lost")
    lost = watch.agrees_with_a_reload()
    assert "stopped reporting" in lost["error"] and lost["actions"] == ["resume", "fork", "delete"]


def test_the_live_times_are_in_the_readers_zone(queued_run, server, browser):
    """A reader in Tokyo keeps the run page open while it starts, beats, logs and saves a checkpoint: the
    times that arrive live (Started, Last heartbeat, the checkpoint's, the log's) are Tokyo's, the zone
    named, as the page renders them on a reload — never UTC unnamed."""
    from zoneinfo import ZoneInfo

    from playwright.sync_api import expect

    project, run, token = queued_run
    tokyo = ZoneInfo("Asia/Tokyo")
    context = browser.new_context(timezone_id="Asia/Tokyo", locale="en-GB", bypass_csp=True)
    try:
        page = new_page(context)
        sign_in(page, server, "alice", PASSWORD)
        page.goto(f"{server}/p/{project.slug}/runs/{run.pk}/")
        wait_until_following(page)
        claim(run)
        trainer = Trainer(server, run, token)
        trainer.report(
            {"type": "status", "status": "RUNNING"},
            {"type": "log", "level": "info", "message": "loaded the model"},
            {"type": "checkpoint", "step": 1, "path": "/runs/ckpt/step-1", "metrics": {}},
        )
        page.wait_for_function("document.querySelectorAll('[data-checkpoint-step]').length === 1")
        page.wait_for_function("document.querySelector('[data-run-started_at] time') !== null")
        run.refresh_from_db()

        started = page.locator("[data-run-started_at] time[data-when=seconds]")
        expect(started).to_have_attribute("data-localized", "1")
        assert started.inner_text() == run.started_at.astimezone(tokyo).strftime("%-d %b %Y, %H:%M:%S GMT+9")
        assert "Asia/Tokyo" in started.get_attribute("title")
        beat = page.locator("[data-run-heartbeat_at] time[data-when=seconds]")
        expect(beat).to_have_attribute("data-localized", "1")
        assert beat.inner_text().endswith("GMT+9")
        saved = page.locator("[data-checkpoint-step='1'] time[data-when=exact]")
        assert saved.inner_text() == run.checkpoints.get().created_at.astimezone(tokyo).strftime(
            "%-d %b %Y, %H:%M GMT+9"
        )
        log = page.locator("[data-live-log]")
        expect(log).to_contain_text("loaded the model")
        line = log.locator("div", has_text="loaded the model").inner_text()
        hour = int(line[:2])
        assert hour == datetime.now(tokyo).hour or hour == (datetime.now(tokyo).hour - 1) % 24, line
        expect(page.locator("[data-live-log-zone]")).to_have_text(", times in Asia/Tokyo")

        # A reload renders the same times (the server's UTC text, rewritten by when.js in the zone).
        page.reload()
        expect(started).to_have_attribute("data-localized", "1")
        assert started.inner_text() == run.started_at.astimezone(tokyo).strftime("%-d %b %Y, %H:%M:%S GMT+9")
        assert saved.inner_text().endswith("GMT+9")
    finally:
        context.close()

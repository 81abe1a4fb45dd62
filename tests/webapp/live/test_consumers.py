"""The run websocket through the real stack: webapp.asgi.application (origin check, session auth,
routing), the real Redis channel layer, and events posted through the real ingestion API, which
broadcasts after its commit."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from webapp.asgi import application
from webapp.experiments.models import Run
from webapp.experiments.services import run_create, run_request_cancel
from webapp.live import selectors

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://testserver")


@pytest.fixture
def reporting_run(project, environment, rubric, users):
    run, token = run_create(
        project=project,
        name="live",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )
    return run, token


@pytest.fixture
def cookie_of(users):
    def session_cookie(name: str) -> bytes:
        client = Client()
        client.force_login(users[name])
        return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode()

    return session_cookie


def metrics(seq: int, step: int, reward: float = 0.5) -> dict:
    return {
        "seq": seq,
        "type": "metrics",
        "time": 1_700_000_000.0 + step,
        "step": step,
        "values": {"reward/mean": reward, "kl": 0.01 * step},
    }


def post_events(run: Run, token: str, events: list[dict]) -> dict:
    response = Client().post(
        f"/api/runs/{run.pk}/events",
        data=json.dumps({"events": events}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 200, response.content
    return response.json()


apost_events = sync_to_async(post_events)


@asynccontextmanager
async def socket(run: Run, cookie: bytes | None, query: str = ""):
    headers = [ORIGIN] + ([(b"cookie", cookie)] if cookie else [])
    communicator = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/{query}", headers=headers)
    connected, _ = await communicator.connect(timeout=10)
    assert connected
    try:
        yield communicator
    finally:
        await communicator.disconnect()


def is_heartbeat(frame: dict) -> bool:
    """The server's seq-less "last heartbeat" news, sent when the second it shows changes."""
    return (
        frame.get("type") == "event"
        and frame["event"].get("type") == "heartbeat"
        and "seq" not in frame["event"]
    )


async def receive_events(communicator: WebsocketCommunicator, count: int) -> list[dict]:
    """The next `count` events, passing over the heartbeat news between them."""
    frames = []
    while len(frames) < count:
        frame = await communicator.receive_json_from(timeout=10)
        if not is_heartbeat(frame):
            frames.append(frame)
    assert all(frame["type"] == "event" for frame in frames), frames
    return [frame["event"] for frame in frames]


async def nothing_more(communicator: WebsocketCommunicator, timeout: float = 0.2) -> bool:
    """Whether nothing but heartbeat news arrives within `timeout`."""
    while not await communicator.receive_nothing(timeout=timeout):
        if not is_heartbeat(await communicator.receive_json_from(timeout=1)):
            return False
    return True


async def receive_snapshot(communicator: WebsocketCommunicator) -> dict:
    frame = await communicator.receive_json_from(timeout=10)
    assert frame["type"] == "snapshot", frame
    return frame


def run_async(scenario):
    async_to_sync(scenario)()


# --- who may subscribe ----------------------------------------------------------------------------------


def test_anonymous_users_and_outsiders_are_turned_away_with_a_close_code(reporting_run, cookie_of):
    run, _ = reporting_run

    eve = cookie_of("eve")

    async def scenario():
        for cookie, code in [(None, 4401), (eve, 4404)]:
            async with socket(run, cookie) as ws:
                assert await ws.receive_output(timeout=10) == {"type": "websocket.close", "code": code}

    run_async(scenario)


def test_a_viewer_is_accepted_and_gets_the_snapshot(reporting_run, cookie_of):
    run, _ = reporting_run
    dave = cookie_of("dave")

    async def scenario():
        async with socket(run, dave) as ws:
            frame = await receive_snapshot(ws)
            assert frame["run"]["id"] == run.pk and frame["run"]["status"] == "QUEUED"
            assert frame["run"]["last_seq"] == 0 and frame["run"]["cancel_requested"] is False
            assert frame["replay"] == {"after_seq": 0, "count": 0, "truncated": False}
            assert await nothing_more(ws)

    run_async(scenario)


def test_a_socket_from_another_origin_is_refused(reporting_run, cookie_of):
    run, _ = reporting_run
    alice = cookie_of("alice")

    async def scenario():
        communicator = WebsocketCommunicator(
            application,
            f"/ws/runs/{run.pk}/",
            headers=[(b"origin", b"http://evil.example"), (b"cookie", alice)],
        )
        try:
            connected, _ = await communicator.connect(timeout=10)
            assert not connected
        finally:
            # Leave no application task behind for the event loop's shutdown to wait on.
            await communicator.disconnect(timeout=5)

    run_async(scenario)


def test_an_unknown_run_is_not_found(reporting_run, cookie_of):
    run, _ = reporting_run
    alice = cookie_of("alice")

    async def scenario():
        communicator = WebsocketCommunicator(
            application, f"/ws/runs/{run.pk + 1000}/", headers=[ORIGIN, (b"cookie", alice)]
        )
        assert (await communicator.connect(timeout=10))[0]
        assert await communicator.receive_output(timeout=10) == {"type": "websocket.close", "code": 4404}
        await communicator.disconnect()

    run_async(scenario)


# --- live events ------------------------------------------------------------------------------------------


def test_a_batch_posted_to_the_api_arrives_at_a_connected_client(reporting_run, cookie_of):
    run, token = reporting_run
    Run.objects.filter(pk=run.pk).update(status="STARTING")
    dave = cookie_of("dave")

    async def scenario():
        async with socket(run, dave) as ws:
            await receive_snapshot(ws)
            reply = await apost_events(
                run,
                token,
                [
                    {"seq": 1, "type": "status", "status": "RUNNING"},
                    metrics(2, 1, 0.25),
                    {"seq": 3, "type": "log", "level": "info", "message": "<b>step 1</b> done"},
                ],
            )
            assert reply["accepted"] == 3
            stored = [(await ws.receive_json_from(timeout=10))["event"] for _ in range(3)]
            # Then the run's new heartbeat (for the page's "Last heartbeat"), without a seq: never stored.
            heartbeat = (await ws.receive_json_from(timeout=10))["event"]
            assert heartbeat["type"] == "heartbeat" and "seq" not in heartbeat and heartbeat["heartbeat_at"]
            # The status change arrives once, as the stored event (with its seq), carrying what the
            # page's header needs; no second, unsequenced copy follows.
            assert [e["seq"] for e in stored] == [1, 2, 3]
            assert stored[0]["type"] == "status" and stored[0]["status"] == "RUNNING"
            assert stored[0]["started_at"] and stored[0]["finished_at"] is None
            assert stored[1]["values"] == {"reward/mean": 0.25, "kl": 0.01} and stored[1]["step"] == 1
            assert stored[2]["message"] == "<b>step 1</b> done"  # escaping is the page's job (textContent)
            assert await nothing_more(ws)

    run_async(scenario)


def test_a_cancel_request_is_pushed_to_the_page(reporting_run, cookie_of):
    run, _ = reporting_run
    Run.objects.filter(pk=run.pk).update(status="RUNNING")
    alice = cookie_of("alice")

    async def scenario():
        async with socket(run, alice) as ws:
            await receive_snapshot(ws)
            await sync_to_async(run_request_cancel)(run=await sync_to_async(Run.objects.get)(pk=run.pk))
            # With the actions that apply now: the page stops offering Cancel at once.
            assert await receive_events(ws, 1) == [
                {
                    "type": "cancel_requested",
                    "cancel_requested": True,
                    "actions": {"cancel": False, "resume": False, "fork": False, "delete": False},
                }
            ]

    run_async(scenario)


HACKABLE = [
    {"name": "correct", "kind": "exact_match", "weight": 1.0, "params": {}},
    {"name": "rm", "kind": "learned_reward", "weight": 1.0, "params": {"path": "/rm", "bounded": True}},
]


def criterion_metrics(seq: int, step: int, *, rm: float, correct: float) -> dict:
    return {**metrics(seq, step), "values": {"criterion/rm": rm, "criterion/correct": correct}}


def test_the_hacking_alarm_is_pushed_when_it_starts_and_is_in_the_next_snapshot(reporting_run, cookie_of):
    run, token = reporting_run
    Run.objects.filter(pk=run.pk).update(
        status="RUNNING", resolved_config={**run.resolved_config, "rubric": {"criteria": HACKABLE}}
    )
    alice = cookie_of("alice")

    async def scenario():
        async with socket(run, alice) as ws:
            assert (await receive_snapshot(ws))["run"]["hacking_alarm"] is None
            # A batch without criterion means says nothing about the alarm.
            await apost_events(run, token, [metrics(1, 1)])
            assert [e["type"] for e in await receive_events(ws, 1)] == ["metrics"]
            assert await nothing_more(ws)
            # The learned reward rises while correctness falls: the alarm starts, after the batch.
            await apost_events(
                run,
                token,
                [criterion_metrics(s + 1, s, rm=-0.2 + 0.15 * s, correct=0.8 - 0.1 * s) for s in range(1, 7)],
            )
            *stored, alarm = await receive_events(ws, 7)
            assert [e["seq"] for e in stored] == [2, 3, 4, 5, 6, 7]
            assert alarm["type"] == "hacking_alarm" and "seq" not in alarm
            assert (alarm["alarm"]["first_step"], alarm["alarm"]["last_step"]) == (1, 6)
            assert "possible reward hacking" in alarm["alarm"]["message"]
        async with socket(run, alice, "?last_seq=7") as ws:
            assert (await receive_snapshot(ws))["run"]["hacking_alarm"] == alarm["alarm"]
            # Correctness recovers: the alarm clears, and the page is told so.
            await apost_events(
                run, token, [criterion_metrics(s + 1, s, rm=0.8, correct=0.9) for s in range(7, 13)]
            )
            *_, cleared = await receive_events(ws, 7)
            assert cleared == {"type": "hacking_alarm", "alarm": None}

    run_async(scenario)


# --- resume ---------------------------------------------------------------------------------------------


def test_reconnecting_with_the_last_seq_gets_exactly_the_missed_events_in_order(reporting_run, cookie_of):
    run, token = reporting_run
    post_events(run, token, [metrics(seq, seq) for seq in range(1, 6)])
    cookie = cookie_of("dave")

    async def scenario():
        async with socket(run, cookie) as ws:
            snapshot = await receive_snapshot(ws)
            assert snapshot["replay"]["count"] == 5
            seen = [e["seq"] for e in await receive_events(ws, 5)]
            assert seen == [1, 2, 3, 4, 5]
        # Offline while the trainer reports two more batches.
        await apost_events(run, token, [metrics(seq, seq) for seq in range(6, 9)])
        await apost_events(run, token, [{"seq": 9, "type": "log", "message": "x"}, metrics(10, 10)])
        async with socket(run, cookie, f"?last_seq={seen[-1]}") as ws:
            snapshot = await receive_snapshot(ws)
            assert snapshot["run"]["last_seq"] == 10 and snapshot["run"]["current_step"] == 10
            assert snapshot["replay"] == {"after_seq": 5, "count": 5, "truncated": False}
            assert [e["seq"] for e in await receive_events(ws, 5)] == [6, 7, 8, 9, 10]
            assert await nothing_more(ws, 0.3)
            # …and it keeps going live after the replay, without repeats.
            await apost_events(run, token, [metrics(10, 10), metrics(11, 11)])  # seq 10 is a retry
            assert [e["seq"] for e in await receive_events(ws, 1)] == [11]
            assert await nothing_more(ws, 0.3)

    run_async(scenario)


def test_a_resume_message_on_an_open_socket_replays_only_what_this_connection_has_not_sent(
    reporting_run, cookie_of
):
    run, token = reporting_run
    post_events(run, token, [metrics(seq, seq) for seq in range(1, 7)])
    carol = cookie_of("carol")

    async def scenario():
        async with socket(run, carol, "?last_seq=4") as ws:
            assert (await receive_snapshot(ws))["replay"]["count"] == 2
            assert [e["seq"] for e in await receive_events(ws, 2)] == [5, 6]
            await ws.send_json_to({"type": "resume", "last_seq": 2})
            snapshot = await receive_snapshot(ws)
            assert snapshot["replay"] == {"after_seq": 6, "count": 0, "truncated": False}
            assert await nothing_more(ws)
            await ws.send_json_to({"type": "resume", "last_seq": "soon"})
            assert (await ws.receive_json_from(timeout=10))["type"] == "error"

    run_async(scenario)


def test_a_long_absence_replays_only_the_newest_events_and_says_so(reporting_run, cookie_of, monkeypatch):
    run, token = reporting_run
    monkeypatch.setattr(selectors, "REPLAY_LIMIT", 3)
    post_events(run, token, [metrics(seq, seq) for seq in range(1, 9)])
    dave = cookie_of("dave")

    async def scenario():
        async with socket(run, dave, "?last_seq=1") as ws:
            snapshot = await receive_snapshot(ws)
            assert snapshot["replay"] == {"after_seq": 1, "count": 3, "truncated": True}
            assert [e["seq"] for e in await receive_events(ws, 3)] == [6, 7, 8]

    run_async(scenario)


def test_a_member_removed_from_the_project_is_closed_out_at_the_next_resume(reporting_run, cookie_of, users):
    from webapp.projects.models import Membership

    run, _ = reporting_run
    dave = cookie_of("dave")

    async def scenario():
        async with socket(run, dave) as ws:
            await receive_snapshot(ws)
            await sync_to_async(Membership.objects.filter(user=users["dave"]).delete)()
            await ws.send_json_to({"type": "resume", "last_seq": 0})
            assert await ws.receive_output(timeout=10) == {"type": "websocket.close", "code": 4404}

    run_async(scenario)


# --- what the run page needs: phase, actions, checkpoints ------------------------------------------------


def phase(seq: int, name: str, step: int, done: int = 0, total: int = 0) -> dict:
    return {
        "seq": seq,
        "type": "phase",
        "time": 1_700_000_000.0 + seq,
        "phase": name,
        "step": step,
        "done": done,
        "total": total,
        "message": f"{done} of {total} groups",
        "elapsed_s": 0.5 * done,
    }


def test_a_phase_is_pushed_at_once_and_a_page_opened_mid_phase_gets_it_in_the_snapshot(
    reporting_run, cookie_of
):
    run, token = reporting_run
    Run.objects.filter(pk=run.pk).update(status="RUNNING")
    dave = cookie_of("dave")

    async def scenario():
        async with socket(run, dave) as ws:
            assert (await receive_snapshot(ws))["run"]["phase"] is None
            await apost_events(run, token, [phase(1, "generating", 1, 0, 4)])
            [event] = await receive_events(ws, 1)
            assert event == {
                "seq": 1,
                "type": "phase",
                "time": 1_700_000_001.0,
                "phase": "generating",
                "step": 1,
                "done": 0,
                "total": 4,
                "message": "0 of 4 groups",
                "elapsed_s": 0.0,
            }
        await apost_events(
            run,
            token,
            [phase(2, "generating", 1, 3, 4), metrics(3, 1), {"seq": 4, "type": "log", "message": "x"}],
        )
        async with socket(run, dave, "?last_seq=4") as ws:
            snapshot = await receive_snapshot(ws)
            assert snapshot["run"]["phase"]["done"] == 3 and snapshot["run"]["phase"]["seq"] == 2

    run_async(scenario)


def test_a_status_change_carries_the_actions_and_checkpoints_the_page_shows(reporting_run, cookie_of):
    run, token = reporting_run
    alice = cookie_of("alice")

    async def scenario():
        async with socket(run, alice) as ws:
            snapshot = (await receive_snapshot(ws))["run"]
            assert snapshot["actions"] == {"cancel": True, "resume": False, "fork": False, "delete": False}
            assert snapshot["checkpoints"] == [] and snapshot["worker"] == ""
            await apost_events(
                run,
                token,
                [
                    {"seq": 1, "type": "status", "status": "STARTING"},
                    {"seq": 2, "type": "status", "status": "RUNNING"},
                    {
                        "seq": 3,
                        "type": "checkpoint",
                        "step": 2,
                        "path": "/ckpt/step-2",
                        "metrics": {"reward/mean": 0.5},
                    },
                    {"seq": 4, "type": "status", "status": "CANCELLED", "message": "cancelled after step 2"},
                ],
            )
            events = await receive_events(ws, 4)
            assert events[1]["actions"] == {"cancel": True, "resume": False, "fork": False, "delete": False}
            checkpoint = events[2]
            # The key metrics as columns, formatted; no server path (viewers watch this page too).
            assert (checkpoint["step"], checkpoint["key_metrics"], checkpoint["metrics_text"]) == (
                2,
                ["—", "—", "0.5"],
                "",
            )
            assert "path" not in checkpoint
            cancelled = events[3]
            assert cancelled["status"] == "CANCELLED" and cancelled["finished_at"]
            # Stopped with a checkpoint: resume and fork become available, cancel does not.
            assert cancelled["actions"] == {"cancel": False, "resume": True, "fork": True, "delete": True}
            assert [c["step"] for c in cancelled["checkpoints"]] == [2]

    run_async(scenario)


def test_junk_frames_get_an_error_frame_and_the_socket_keeps_working(reporting_run, cookie_of):
    """docs/live.md promises `{"type": "error"}` for what the server does not understand: text that is not
    JSON, JSON nested thousands deep, a binary frame. None of them closes the socket (it used to: 1011)."""
    run, token = reporting_run
    post_events(run, token, [metrics(1, 1)])
    dave = cookie_of("dave")

    async def scenario():
        async with socket(run, dave) as ws:
            await receive_snapshot(ws)
            await receive_events(ws, 1)
            for junk in ("not json at all", "[" * 5000 + "]" * 5000, "{"):
                await ws.send_to(text_data=junk)
                frame = await ws.receive_json_from(timeout=10)
                assert frame["type"] == "error" and "JSON" in frame["detail"], frame
            await ws.send_to(bytes_data=b"\x00\x01")
            assert (await ws.receive_json_from(timeout=10))["type"] == "error"
            await ws.send_json_to({"type": "ping"})
            assert await ws.receive_json_from(timeout=10) == {"type": "pong", "last_seq": 1}

    run_async(scenario)

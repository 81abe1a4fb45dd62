"""Run event ingestion through the real HTTP endpoint."""

from __future__ import annotations

import json

import pytest

from webapp.experiments.models import Checkpoint, Run
from webapp.rollouts.apis import IN_FLIGHT
from webapp.rollouts.models import MetricPoint, RunEvent, Trajectory, Turn


@pytest.fixture
def reporting_run(project, environment, rubric, users):
    from webapp.experiments.services import run_create

    run, token = run_create(
        project=project,
        name="reported",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )
    return run, token


def trajectory(group=0, sample=0, reward=1.0, text="<answer>4</answer>"):
    return {
        "group": group,
        "sample": sample,
        "task_id": f"t{group}",
        "seed": 7,
        "split": "train",
        "prompt": "What is 2 + 2?",
        "reward": reward,
        "advantage": 0.5,
        "status": "ok",
        "components": [
            {"name": "correct", "kind": "numeric_match", "raw": reward, "weight": 1.0, "weighted": reward}
        ],
        "turns": [
            {"role": "user", "text": "What is 2 + 2?"},
            {"role": "assistant", "text": text, "token_ids": [1, 2, 3], "loss_mask": [1, 1, 1]},
        ],
    }


def batch():
    return {
        "events": [
            {"seq": 1, "type": "status", "status": "RUNNING"},
            {"seq": 2, "type": "metrics", "step": 1, "values": {"reward/mean": 0.5, "kl": 0.01}},
            {
                "seq": 3,
                "type": "trajectories",
                "step": 1,
                "items": [trajectory(0, 0, 1.0), trajectory(0, 1, 0.0)],
            },
            {
                "seq": 4,
                "type": "checkpoint",
                "step": 1,
                "path": "/tmp/ckpt-1",
                "metrics": {"reward/mean": 0.5},
            },
            {"seq": 5, "type": "log", "level": "info", "message": "step 1 done"},
        ]
    }


def post(client, run, token, body, **extra):
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return client.post(
        f"/api/runs/{run.pk}/events",
        data=data,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        **extra,
    )


def counts():
    return (
        RunEvent.objects.count(),
        MetricPoint.objects.count(),
        Trajectory.objects.count(),
        Turn.objects.count(),
        Checkpoint.objects.count(),
    )


def test_it_stores_a_batch_and_updates_the_run(client, reporting_run):
    run, token = reporting_run
    Run.objects.filter(pk=run.pk).update(status="STARTING")
    response = post(client, run, token, batch())
    assert response.status_code == 200, response.content
    assert response.json() == {"accepted": 5, "duplicates": 0, "last_seq": 5, "control": {"cancel": False}}
    assert counts() == (5, 2, 2, 4, 1)
    run.refresh_from_db()
    assert run.status == "RUNNING" and run.current_step == 1 and run.best_reward == 0.5 and run.last_seq == 5
    turn = Turn.objects.get(trajectory__sample_index=0, index=1)
    assert turn.loss_mask == [1, 1, 1] and turn.text == "<answer>4</answer>"


def test_the_same_batch_posted_three_times_is_stored_once(client, reporting_run):
    run, token = reporting_run
    replies = [post(client, run, token, batch()).json() for _ in range(3)]
    assert [r["accepted"] for r in replies] == [5, 0, 0]
    assert [r["duplicates"] for r in replies] == [0, 5, 5]
    assert counts() == (5, 2, 2, 4, 1)


def metrics_batch(first_seq, count, keys=25):
    """`count` metrics events of `keys` values each, as a trainer logs a step (ints and floats mixed)."""
    return {
        "events": [
            {
                "seq": seq,
                "type": "metrics",
                "step": seq,
                "time": 1_700_000_000 + seq if seq % 2 else 1_700_000_000.5 + seq,
                "tokens": 1000 * seq,
                "values": {f"train/m{k}": (seq if k == 0 else seq + k / 10) for k in range(keys)},
            }
            for seq in range(first_seq, first_seq + count)
        ]
    }


def test_a_retried_metrics_batch_that_overlaps_the_stored_one_stores_each_point_once(client, reporting_run):
    # 1,000 points per batch, as the ingestion bench sends: on Postgres the points go in by binary COPY.
    run, token = reporting_run
    first = post(client, run, token, metrics_batch(1, 40)).json()
    retried = post(client, run, token, metrics_batch(21, 40)).json()  # seqs 21-40 again, then 41-60
    assert (first["accepted"], first["duplicates"]) == (40, 0)
    assert (retried["accepted"], retried["duplicates"], retried["last_seq"]) == (20, 20, 60)
    assert MetricPoint.objects.filter(run=run).count() == 60 * 25
    assert RunEvent.objects.filter(run=run).count() == 60
    point = MetricPoint.objects.get(run=run, key="train/m3", step=33)
    assert (point.value, point.wall_time, point.tokens) == (33.3, 1_700_000_033.0, 33_000)
    assert MetricPoint.objects.get(run=run, key="train/m0", step=40).wall_time == 1_700_000_040.5
    run.refresh_from_db()
    assert run.current_step == 60 and run.last_seq == 60


def test_deleting_a_run_deletes_its_points_and_events(client, reporting_run):
    # The database no longer enforces these foreign keys (migration 0014): Django's cascade does the work.
    run, token = reporting_run
    post(client, run, token, metrics_batch(1, 4))
    Run.objects.get(pk=run.pk).delete()
    assert not MetricPoint.objects.filter(run_id=run.pk).exists()
    assert not RunEvent.objects.filter(run_id=run.pk).exists()


def test_malformed_json_is_a_clear_400_and_writes_nothing(client, reporting_run):
    run, token = reporting_run
    response = post(client, run, token, '{"events": [')
    assert response.status_code == 400
    assert response.json()["error"] == "malformed_json"
    assert counts() == (0, 0, 0, 0, 0)


def test_one_invalid_event_rejects_the_whole_batch_with_field_paths(client, reporting_run):
    run, token = reporting_run
    body = batch()
    body["events"][2]["items"][1]["turns"][0]["role"] = "robot"
    body["events"][1]["values"]["kl"] = "high"
    del body["events"][3]["path"]
    response = post(client, run, token, body)
    assert response.status_code == 400
    fields = response.json()["fields"]
    assert "events.2.items.1.turns.0.role" in fields
    assert fields["events.1.values.kl"] == ["Must be a finite number or null."]
    assert fields["events.3.path"] == ["This field is required."]
    assert counts() == (0, 0, 0, 0, 0)


def test_an_oversized_batch_gets_413(client, reporting_run, settings):
    run, token = reporting_run
    settings.INGEST_MAX_BATCH_BYTES = 1000
    body = {"events": [{"seq": 1, "type": "log", "message": "x" * 2000}]}
    response = post(client, run, token, body)
    assert response.status_code == 413 and response.json()["error"] == "batch_too_large"
    assert counts() == (0, 0, 0, 0, 0)


def test_a_wrong_token_or_unknown_run_gets_401(client, reporting_run):
    run, token = reporting_run
    assert post(client, run, "rsr_wrong", batch()).status_code == 401
    assert (
        client.post(
            "/api/runs/999999/events",
            data="{}",
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        ).status_code
        == 401
    )
    assert counts() == (0, 0, 0, 0, 0)


def test_a_reissued_token_or_a_deleted_run_is_refused_after_the_token_was_remembered(client, reporting_run):
    # The endpoint remembers verified tokens (no look-up per batch); the row it locks is the judge.
    from webapp.experiments.services import run_issue_ingest_token

    run, token = reporting_run
    log = lambda seq: {"events": [{"seq": seq, "type": "log", "message": "hi"}]}  # noqa: E731
    assert post(client, run, token, log(1)).status_code == 200
    new_token = run_issue_ingest_token(run)
    response = post(client, run, token, log(2))
    assert response.status_code == 401 and response.json()["error"] == "unauthorized"
    assert post(client, run, new_token, log(2)).status_code == 200
    assert list(RunEvent.objects.filter(run=run).values_list("seq", flat=True).order_by("seq")) == [1, 2]
    run_id = run.pk
    Run.objects.filter(pk=run_id).delete()
    assert post(client, run, new_token, log(3)).status_code == 401
    assert not RunEvent.objects.filter(run_id=run_id).exists()


def test_under_overload_it_answers_429_with_retry_after(client, reporting_run):
    run, token = reporting_run
    saved = IN_FLIGHT.count
    IN_FLIGHT.count = IN_FLIGHT.limit
    try:
        response = post(client, run, token, batch())
    finally:
        IN_FLIGHT.count = saved
    assert response.status_code == 429 and response["Retry-After"] == "1"
    assert counts() == (0, 0, 0, 0, 0)


def test_the_reply_carries_a_cancel_request(client, reporting_run):
    run, token = reporting_run
    Run.objects.filter(pk=run.pk).update(status="RUNNING", cancel_requested=True)
    reply = post(client, run, token, {"events": [{"seq": 1, "type": "heartbeat"}]}).json()
    assert reply["control"] == {"cancel": True}


def test_a_failed_status_keeps_the_error_and_traceback(client, reporting_run):
    run, token = reporting_run
    Run.objects.filter(pk=run.pk).update(status="RUNNING")
    post(
        client,
        run,
        token,
        {
            "events": [
                {
                    "seq": 1,
                    "type": "status",
                    "status": "FAILED",
                    "message": "CUDA out of memory",
                    "traceback": "Traceback (most recent call last):\n  ...",
                }
            ]
        },
    )
    run.refresh_from_db()
    assert run.status == "FAILED" and run.error_message == "CUDA out of memory"
    assert run.error_traceback.startswith("Traceback") and run.finished_at is not None


def test_token_stats_join_turns_already_stored_and_refuse_turns_that_are_not(client, reporting_run):
    from trainers.sdk import wire

    run, token = reporting_run
    item = trajectory()
    item["turns"][1]["token_stats"] = {"logprob": wire.pack_halves([-0.5, -1.0, -2.0])}
    post(client, run, token, {"events": [{"seq": 1, "type": "trajectories", "step": 1, "items": [item]}]})
    gap = wire.pack_halves([0.0, 0.25, -0.5])
    later = {
        "group": 0,
        "sample": 0,
        "turn": 1,
        "stats": {"gap": gap, "logprob": wire.pack_halves([-1, -1, -1])},
    }
    assert (
        post(
            client, run, token, {"events": [{"seq": 2, "type": "token_stats", "step": 1, "items": [later]}]}
        ).status_code
        == 200
    )
    stored = Turn.objects.get(trajectory__run=run, index=1).token_stats
    assert stored == {
        "logprob": wire.pack_halves([-1, -1, -1]),
        "gap": gap,
    }  # joined; a name sent again replaced

    for bad, field in (
        ({**later, "turn": 5}, "token_stats.items.0"),
        ({**later, "stats": {"gap": wire.pack_halves([0.0])}}, "token_stats.items.0.stats.gap"),
    ):
        response = post(
            client, run, token, {"events": [{"seq": 3, "type": "token_stats", "step": 1, "items": [bad]}]}
        )
        assert response.status_code == 400 and field in response.json()["fields"], response.json()
    assert Turn.objects.get(trajectory__run=run, index=1).token_stats == stored

"""What a careless or hostile reporter sends to POST /api/runs/<id>/events is refused with a 400 that names
the field (or a 415), never a 500, and nothing is stored: integers past their column, huge numbers,
JSON nested thousands deep, empty metric names, a sample twice in one step, token lists that disagree,
a body that is not JSON."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from webapp.experiments.services import run_create
from webapp.rollouts.models import MetricPoint, RunEvent, Trajectory

BIG = 2**63  # one past the largest 64-bit integer
DEEP = 5000  # deeper than Python's json parser can recurse


@pytest.fixture
def reporting(project, environment, rubric, users):
    run, token = run_create(
        project=project,
        name="reporting",
        environment=environment,
        rubric=rubric,
        preset="grpo",
        overrides={},
        user=users["bob"],
        dispatch=False,
    )
    return run, token


def post(run, token: str, body: str | bytes, content_type: str = "application/json"):
    return Client().post(
        f"/api/runs/{run.pk}/events",
        data=body,
        content_type=content_type,
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def post_events(run, token: str, *events: dict):
    return post(run, token, json.dumps({"events": list(events)}))


def item(**fields) -> dict:
    return {"group": 0, "sample": 0, "task_id": "t", "reward": 1.0, "turns": [], **fields}


def nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def assert_refused(response, path: str, status: int = 400) -> None:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["error"] == "validation_failed", body
    assert path in body["fields"], body["fields"]
    assert (
        not RunEvent.objects.exists() and not Trajectory.objects.exists() and not MetricPoint.objects.exists()
    )


@pytest.mark.parametrize(
    "event, path",
    [
        ({"seq": BIG, "type": "heartbeat"}, "events.0.seq"),
        ({"seq": 1, "type": "metrics", "step": BIG, "values": {"kl": 0.1}}, "events.0.step"),
        (
            {"seq": 1, "type": "metrics", "step": 2**31, "values": {"kl": 0.1}},
            "events.0.step",
        ),  # a 32-bit column
        ({"seq": 1, "type": "metrics", "step": 1, "tokens": BIG, "values": {"kl": 0.1}}, "events.0.tokens"),
        ({"seq": 1, "type": "trajectories", "step": 1, "items": [item(group=BIG)]}, "events.0.items.0.group"),
        (
            {"seq": 1, "type": "trajectories", "step": 1, "items": [item(sample=BIG)]},
            "events.0.items.0.sample",
        ),
        ({"seq": 1, "type": "trajectories", "step": 1, "items": [item(seed=BIG)]}, "events.0.items.0.seed"),
        (
            {"seq": 1, "type": "trajectories", "step": 1, "items": [item(policy_version=BIG)]},
            "events.0.items.0.policy_version",
        ),
    ],
)
def test_an_integer_past_its_column_is_a_400_on_its_field(reporting, event, path):
    assert_refused(post_events(*reporting, event), path)


def test_a_401_digit_metric_value_is_a_400(reporting):
    run, token = reporting
    body = '{"events": [{"seq": 1, "type": "metrics", "step": 1, "values": {"kl": 1' + "0" * 400 + "}}]}"
    assert_refused(post(run, token, body), "events.0.values.kl")


def test_tool_args_nested_thousands_deep_is_a_400_not_a_recursion_error(reporting):
    run, token = reporting
    body = (
        '{"events": [{"seq": 1, "type": "trajectories", "step": 1, "items": [{"group": 0, "sample": 0, '
        '"task_id": "t", "reward": 1, "turns": [{"role": "assistant", "tool_args": '
        + nested(DEEP)
        + "}]}]}]}"
    )
    assert_refused(post(run, token, body), "non_field_errors")


def test_tool_args_nested_past_the_limit_is_a_400_on_the_field(reporting):
    run, token = reporting
    deep = json.loads(nested(40))
    turns = [{"role": "assistant", "tool_args": deep}]
    response = post_events(
        run, token, {"seq": 1, "type": "trajectories", "step": 1, "items": [item(turns=turns)]}
    )
    assert_refused(response, "events.0.items.0.turns.0.tool_args")


def test_an_empty_metric_name_is_a_400(reporting):
    assert_refused(
        post_events(*reporting, {"seq": 1, "type": "metrics", "step": 1, "values": {"": 1.0}}),
        "events.0.values",
    )


def test_the_same_group_and_sample_twice_in_one_step_is_a_400(reporting):
    event = {"seq": 1, "type": "trajectories", "step": 1, "items": [item(), item(reward=0.0)]}
    assert_refused(post_events(*reporting, event), "events.0.items.1.sample")


def test_token_ids_and_loss_mask_of_different_lengths_are_a_400(reporting):
    turns = [{"role": "assistant", "text": "hi", "token_ids": [1, 2, 3], "loss_mask": [1, 1]}]
    event = {"seq": 1, "type": "trajectories", "step": 1, "items": [item(turns=turns)]}
    assert_refused(post_events(*reporting, event), "events.0.items.0.turns.0.loss_mask")


def test_an_omitted_seed_reads_back_as_null(reporting, signed_in):
    run, token = reporting
    assert (
        post_events(run, token, {"seq": 1, "type": "trajectories", "step": 1, "items": [item()]}).status_code
        == 200
    )
    [trajectory] = signed_in("dave").get(f"/api/runs/{run.pk}/trajectories/").json()["results"]
    assert trajectory["seed"] is None


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
def test_a_body_that_is_not_declared_json_is_a_415(reporting, content_type):
    run, token = reporting
    response = post(run, token, json.dumps({"events": [{"seq": 1, "type": "heartbeat"}]}), content_type)
    assert response.status_code == 415
    assert response.json()["error"] == "unsupported_media_type"
    assert not RunEvent.objects.exists()


def test_json_with_a_charset_is_json(reporting):
    run, token = reporting
    response = post(
        run,
        token,
        json.dumps({"events": [{"seq": 1, "type": "heartbeat"}]}),
        "application/json; charset=utf-8",
    )
    assert response.status_code == 200 and response.json()["accepted"] == 1


def test_a_float_too_large_for_a_double_inside_a_free_form_object_is_refused(reporting):
    run, token = reporting
    body = (
        '{"events": [{"seq": 1, "type": "trajectories", "step": 1, "items": [{"group": 0, "sample": 0, '
        '"task_id": "t", "reward": 1, "turns": [], "env_state": {"x": 1e400}}]}]}'
    )
    response = post(run, token, body)
    assert response.status_code == 400 and response.json()["error"] == "malformed_json"
    assert not Trajectory.objects.exists()

"""The wire format (trainers/sdk/wire.py) is the only declaration of what a trainer may report. Every field it
declares goes through the SDK, ingestion and storage, and comes back from the API unchanged — so a field
added to the format but forgotten in a model, the storage or the serializer fails here, not in a user's run."""

from __future__ import annotations

from typing import Any

import pytest

from trainers.sdk import wire, wire_check
from trainers.sdk.client import Studio
from webapp.rollouts.models import Trajectory

FAST = {"flush_interval_s": 0.02, "heartbeat_interval_s": 0.2}


def sample_value(field: wire.Field, index: int) -> Any:
    """A valid value for `field` that differs from its default, so storing the default by mistake shows."""
    if field.choices:
        return field.choices[-1] if field.default != field.choices[-1] else field.choices[0]
    if field.type == "record":  # packed per-token arrays, one entry per token id ([1, 0, 1] below)
        assert field.items is not None
        return {
            f.name: wire.pack_halves([-0.5, None, -2.0 - i])
            if f.type == "halves"
            else wire.pack_octets([1, 2, 3])
            for i, f in enumerate(field.items.fields)
        }
    return {
        "integer": 3 + index,
        "number": 0.25 + index,
        "string": f"{field.name} value",
        "boolean": not field.default,
        "integers": [1, 0, 1],
        "numbers": {"a": 0.5},
        "object": {"nested": {"depth": 2}, "name": field.name},
    }[field.type]


def every_field(shape: wire.Shape, **given: Any) -> dict[str, Any]:
    return {
        f.name: given.get(f.name, sample_value(f, i)) for i, f in enumerate(shape.fields) if f.type != "list"
    }


@pytest.fixture
def studio(live_server, transactional_db, project, users):
    from webapp.accounts.services import api_token_create

    _token, raw = api_token_create(user=users["bob"], name="wire test")
    return Studio(live_server.url, raw)


def test_every_declared_trajectory_turn_and_component_field_reads_back_from_the_api(studio, users):
    turns = [every_field(wire.TURN, role=role) for role in ("user", "assistant", "tool")]
    component = every_field(wire.COMPONENT, turn_rewards={"1": 0.5})
    item = every_field(wire.TRAJECTORY, split="train", status="truncated", group=2, sample=1)
    item.update(turns=turns, components=[component])
    assert wire_check.check_item(item) == {}

    with studio.start_run(project="agents", name="every field", **FAST) as run:
        assert run.log_trajectories(4, [item]) == 1
    assert run.stats["invalid"] == 0 and run.stats["rejected"] == 0

    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(users["dave"])
    stored = Trajectory.objects.get(run_id=run.id)
    body = client.get(f"/api/runs/{run.id}/trajectories/{stored.pk}/?include_tokens=true").json()
    for column, field in wire.TRAJECTORY.columns.items():
        assert body[column] == item[field.name], column
    assert body["step"] == 4
    for sent, got in zip(turns, body["turns"], strict=True):
        for column, field in wire.TURN.columns.items():
            assert got[column] == sent[field.name], column
    assert body["components"] == [component]

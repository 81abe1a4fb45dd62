"""The wire format's checker: what ingestion refuses and the SDK drops, and the docs that describe it."""

from __future__ import annotations

import json

import jsonschema

from trainers import wire


def trajectory(**fields) -> dict:
    return {"group": 0, "sample": 0, "task_id": "t", "reward": 1.0, "turns": [], **fields}


def batch(*events) -> dict:
    return {"events": [{"seq": i + 1, **e} for i, e in enumerate(events)]}


def test_integers_must_fit_the_column_they_are_stored_in():
    errors = wire.check_batch(
        batch(
            {"type": "heartbeat", "seq": 2**63},
            {"type": "trajectories", "step": 2**31, "items": [trajectory(seed=2**63)]},
        )
    )
    assert errors["events.0.seq"] == ["Must be an integer between 1 and 9223372036854775807."]
    assert errors["events.1.step"] == ["Must be an integer between 0 and 2147483647."]
    assert "events.1.items.0.seed" in errors


def test_huge_and_non_finite_numbers_empty_names_and_deep_json_are_refused():
    errors = wire.check_batch(
        batch(
            {"type": "metrics", "step": 0, "values": {"a": 10**400}},
            {"type": "metrics", "step": 0, "values": {"": 1.0}},
        )
    )
    assert errors["events.0.values.a"] == ["Must be a finite number or null."]
    assert "1 to 100 characters" in errors["events.1.values"][0]
    deep: dict = {}
    for _ in range(50):
        deep = {"x": deep}
    errors = wire.check_batch(
        batch({"type": "trajectories", "step": 0, "items": [trajectory(env_state=deep)]})
    )
    assert errors["events.0.items.0.env_state"] == ["Nested deeper than 32 levels."]


def test_what_ingestion_used_to_accept_silently_is_refused_with_a_field_path():
    twice = [trajectory(sample=1), trajectory(sample=1)]
    mismatched = trajectory(turns=[{"role": "assistant", "text": "x", "token_ids": [1, 2], "loss_mask": [1]}])
    errors = wire.check_batch(
        batch(
            {"type": "trajectories", "step": 0, "items": twice},
            {"type": "trajectories", "step": 0, "items": [mismatched]},
            {"type": "trajectories", "step": 0, "items": [trajectory(turn_rewards={})]},
        )
    )
    assert "appears twice" in errors["events.0.items.1.sample"][0]
    assert errors["events.1.items.0.turns.0.loss_mask"] == ["Must have one entry per token id (2), not 1."]
    assert errors["events.2.items.0.turn_rewards"][0].startswith("Unknown field")


def test_a_valid_batch_of_every_event_type_passes_and_matches_the_published_json_schema():
    good = batch(
        {"type": "status", "status": "RUNNING"},
        {"type": "metrics", "step": 1, "values": {"reward/mean": 0.5, "kl": None}, "tokens": 10},
        {
            "type": "trajectories",
            "step": 1,
            "items": [
                trajectory(
                    seed=None,
                    turns=[
                        {"role": "assistant", "text": "4", "reward": 0.5, "token_ids": [5], "loss_mask": [1]}
                    ],
                )
            ],
        },
        {"type": "checkpoint", "step": 1, "path": "/c", "metrics": {"reward/mean": 0.5}},
        {"type": "log", "message": "hi", "level": "warning"},
        {"type": "phase", "phase": "generating", "step": 2, "done": 3, "total": 8},
        {"type": "heartbeat"},
    )
    assert wire.check_batch(good) == {}
    jsonschema.validate(json.loads(json.dumps(good)), wire.json_schema())

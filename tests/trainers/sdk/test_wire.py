"""The wire format's checker: what ingestion refuses and the SDK drops, and the docs that describe it."""

from __future__ import annotations

import json

import jsonschema

from trainers.sdk import wire, wire_check, wire_docs


def trajectory(**fields) -> dict:
    return {"group": 0, "sample": 0, "task_id": "t", "reward": 1.0, "turns": [], **fields}


def batch(*events) -> dict:
    return {"events": [{"seq": i + 1, **e} for i, e in enumerate(events)]}


def test_integers_must_fit_the_column_they_are_stored_in():
    errors = wire_check.check_batch(
        batch(
            {"type": "heartbeat", "seq": 2**63},
            {"type": "trajectories", "step": 2**31, "items": [trajectory(seed=2**63)]},
        )
    )
    assert errors["events.0.seq"] == ["Must be an integer between 1 and 9223372036854775807."]
    assert errors["events.1.step"] == ["Must be an integer between 0 and 2147483647."]
    assert "events.1.items.0.seed" in errors


def test_huge_and_non_finite_numbers_empty_names_and_deep_json_are_refused():
    errors = wire_check.check_batch(
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
    errors = wire_check.check_batch(
        batch({"type": "trajectories", "step": 0, "items": [trajectory(env_state=deep)]})
    )
    assert errors["events.0.items.0.env_state"] == ["Nested deeper than 32 levels."]


def test_what_ingestion_used_to_accept_silently_is_refused_with_a_field_path():
    twice = [trajectory(sample=1), trajectory(sample=1)]
    mismatched = trajectory(turns=[{"role": "assistant", "text": "x", "token_ids": [1, 2], "loss_mask": [1]}])
    errors = wire_check.check_batch(
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
    assert wire_check.check_batch(good) == {}
    jsonschema.validate(json.loads(json.dumps(good)), wire_docs.json_schema())


def test_token_stats_are_packed_one_entry_per_token_and_checked():
    packed = wire.pack_halves([-0.1, None, -3.5, 1e9, float("nan")])
    assert wire.unpack_halves(packed) == [-0.0999755859375, None, -3.5, 65504.0, None]
    assert wire.unpack_octets(wire.pack_octets([0, 3, 300])) == [0, 3, 255]
    turn = {"role": "assistant", "text": "ab", "token_ids": [5, 6], "token_stats": {"logprob": packed}}
    errors = wire_check.check_item(trajectory(turns=[turn]))
    assert errors == {"turns.0.token_stats.logprob": ["Must have one entry per token id (2), not 5."]}
    turn["token_stats"] = {"logprob": wire.pack_halves([-1, -2]), "text_lengths": wire.pack_octets([1, 1])}
    assert wire_check.check_item(trajectory(turns=[turn])) == {}
    turn["token_stats"] = {"entropy": "not base64!", "bogus": "AA=="}
    errors = wire_check.check_item(trajectory(turns=[turn]))
    assert errors["turns.0.token_stats.entropy"] == ["Must be base64 of little-endian half floats."]
    assert errors["turns.0.token_stats.bogus"][0].startswith("Unknown field; a token_stats has: logprob")
    del turn["token_ids"]
    turn["token_stats"] = {"gap": wire.pack_halves([0.0, 0.1])}
    assert wire_check.check_item(trajectory(turns=[turn])) == {
        "turns.0.token_stats": ["Needs the turn's token_ids (one entry per token)."]
    }


def test_the_sdk_packs_plain_lists_of_token_stats():
    from trainers.sdk.coercion import trajectory_item

    item = trajectory_item(
        {
            "reward": 1.0,
            "prompt": "2+2?",
            "turns": [
                {
                    "role": "assistant",
                    "text": "4",
                    "token_ids": [19, 2],
                    "token_stats": {"logprob": [-0.25, -1.5], "gap": (0.0, 0.75), "text_lengths": [1, 0]},
                }
            ],
        }
    )
    stats = item["turns"][0]["token_stats"]
    assert wire.unpack_halves(stats["logprob"]) == [-0.25, -1.5]
    assert wire.unpack_halves(stats["gap"]) == [0.0, 0.75]
    assert wire.unpack_octets(stats["text_lengths"]) == [1, 0]
    assert wire_check.check_item({**item, "group": 0, "sample": 0}) == {}

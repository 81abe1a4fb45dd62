"""Per-token statistics (`token_stats`): the learner records them while it trains, the trainer packs them
on each model turn in the wire format, and they decode back to the values the loss used."""

from __future__ import annotations

import math

import pytest

from trainers.recipes.grpo import Trainer
from trainers.run_config import RunConfig
from trainers.sdk import wire, wire_check
from trainers.sdk.events import MemorySink

ONE_STEP = {
    "max_steps": 1,
    "group_size": 4,
    "prompts_per_step": 2,
    "max_new_tokens": 10,
    "max_turns": 2,
    "eval_tasks": 0,
    "checkpoint_every": 0,
    "temperature": 1.0,
}


def _run(tiny, toy_env, **knobs):
    model, tokenizer = tiny
    sink = MemorySink()
    trainer = Trainer({**ONE_STEP, **knobs}, sink=sink, model=model, tokenizer=tokenizer, env_factory=toy_env)
    assert trainer.run().status == "SUCCEEDED"
    items = [i for e in sink.of_type("trajectories") for i in e["items"]]
    # The learner's values follow the update in token_stats events: join them as the dashboard does.
    for event in sink.of_type("token_stats"):
        assert not wire_check.check_event({**event, "seq": 1})
        for extra in event["items"]:
            item = next(
                i
                for i in items
                if (i["group"], i["sample"], i["split"]) == (extra["group"], extra["sample"], extra["split"])
            )
            item["turns"][extra["turn"]]["token_stats"].update(extra["stats"])
    # Reported before the update (the feed shows them at once), the learner's statistics after it.
    kinds = [e["type"] for e in sink.events]
    if "token_stats" in kinds:
        assert kinds.index("trajectories") < kinds.index("token_stats")
    return items


def test_each_model_turn_carries_its_token_stats(tiny, toy_env):
    items = _run(tiny, toy_env, token_stats="on")
    assert not wire_check.check_batch(
        {"events": [{"seq": 1, "type": "trajectories", "step": 1, "items": items}]}
    )
    trained = [i for i in items if i["advantage"] != 0]
    assert trained, "the toy environment gives groups reward variance"
    for item in items:
        for turn in item["turns"]:
            stats = turn.get("token_stats")
            if turn["role"] != "assistant":
                assert stats is None
                continue
            n = len(turn["token_ids"])
            logprob = wire.unpack_halves(stats["logprob"])
            advantage = wire.unpack_halves(stats["advantage"])
            assert len(logprob) == len(advantage) == n
            assert all(v is not None and v <= 0.01 for v in logprob)
            assert all(math.isclose(a, item["advantage"], rel_tol=2e-3, abs_tol=2e-3) for a in advantage)
            if item["advantage"] != 0:
                gap, entropy = wire.unpack_halves(stats["gap"]), wire.unpack_halves(stats["entropy"])
                assert len(gap) == len(entropy) == n
                # The same weights sample and learn: the two log-probs agree up to the sampler's precision.
                assert max(abs(g) for g in gap) < 0.5
                assert all(e is not None and e >= 0 for e in entropy)
            if "text_lengths" in stats:
                assert sum(wire.unpack_octets(stats["text_lengths"])) == len(turn["text"])
    # The bundled tokenizer decodes token by token into the reply's text: the page can split it.
    assert any("text_lengths" in (t.get("token_stats") or {}) for i in items for t in i["turns"])


def test_off_sends_none(tiny, toy_env):
    items = _run(tiny, toy_env, token_stats="off")
    assert all("token_stats" not in t for i in items for t in i["turns"])


@pytest.mark.parametrize(
    "choice, params, on",
    [
        ("auto", 135e6, True),
        ("auto", 8e9, False),
        ("auto", None, False),
        ("on", 8e9, True),
        ("off", 1e6, False),
    ],
)
def test_auto_is_on_for_small_models(choice, params, on):
    assert RunConfig(token_stats=choice).token_stats_enabled(params) is on

"""Training a learned reward model from preference pairs: the split, the Bradley–Terry head, and one
real run on the default model whose saved result the `learned_reward` criterion loads and agrees with."""

from __future__ import annotations

import json
import random
import time

import pytest
import torch

from trainers.learn.reward_training import (
    TRAINING_SCHEMA,
    PreferenceDataError,
    PreferencePair,
    as_pairs,
    fit_head,
    load_encoder,
    pairwise_stats,
    split_by_prompt,
)
from trainers.recipes.reward_model import train_reward_model
from trainers.registry import validate_config
from trainers.rubrics import score_group
from trainers.rubrics.reward_model import load_reward_model, read_metadata
from trainers.types import Task, Trajectory, Turn

GOOD = [
    "The answer is <answer>{s}</answer>.",
    "<answer>{s}</answer>",
    "{a} + {b} = {s}, so <answer>{s}</answer>",
]
BAD = [
    "I think it is {w}, but I am not sure.",
    "hmm {w}??",
    "Sorry, I cannot do math right now.",
    "{w} maybe, or something else",
]


def format_preferences(n: int, seed: int = 0) -> list[dict]:
    """Annotators prefer a tagged, confident answer to a hedging or refusing one (the numbers differ too)."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        s, w = a + b, a + b + rng.choice([-10, -1, 1, 10])
        pairs.append(
            {
                "prompt": f"What is {a} + {b}?",
                "chosen": rng.choice(GOOD).format(a=a, b=b, s=s),
                "rejected": rng.choice(BAD).format(w=w),
                "provenance": {"pair_id": len(pairs)},
            }
        )
    return pairs


def test_held_out_pairs_are_whole_prompts_and_the_split_is_seeded():
    pairs = [PreferencePair(f"p{i // 3}", "good", "bad") for i in range(30)]  # 10 prompts, 3 pairs each
    train, held = split_by_prompt(pairs, 0.2, seed=1)
    assert len(held) == 6 and sorted(train + held) == list(range(30))
    assert not {pairs[i].prompt for i in train} & {pairs[i].prompt for i in held}
    assert split_by_prompt(pairs, 0.2, seed=1) == (train, held)
    assert split_by_prompt(pairs, 0.2, seed=2) != (train, held)
    assert split_by_prompt(pairs, 0.0, seed=1) == (list(range(30)), [])


def test_one_prompt_is_split_by_pair_and_something_always_trains():
    same_prompt = [PreferencePair("p", f"good {i}", "bad") for i in range(5)]
    train, held = split_by_prompt(same_prompt, 0.4, seed=0)
    assert len(held) == 2 and len(train) == 3
    two = [PreferencePair("p", "a", "b"), PreferencePair("q", "a", "b")]
    assert [len(side) for side in split_by_prompt(two, 0.5, seed=0)] == [1, 1]


def test_malformed_pairs_are_refused_by_position():
    with pytest.raises(PreferenceDataError, match="pair 1: needs prompt, chosen and rejected"):
        as_pairs([{"prompt": "p", "chosen": "a", "rejected": "b"}, {"prompt": "p", "chosen": "a"}])
    with pytest.raises(PreferenceDataError, match="must be strings"):
        as_pairs([{"prompt": "p", "chosen": None, "rejected": "b"}])
    with pytest.raises(PreferenceDataError, match="at least 2 preference pairs"):
        train_reward_model([{"prompt": "p", "chosen": "a", "rejected": "b"}], out_dir="unused")


def test_the_knob_schema_accepts_defaults_and_refuses_nonsense():
    assert validate_config(TRAINING_SCHEMA, {}) == {}
    assert validate_config(TRAINING_SCHEMA, {"head": "mlp", "epochs": 50, "held_out_fraction": 0.25}) == {}
    errors = validate_config(TRAINING_SCHEMA, {"head": "transformer", "lr": 0, "surprise": 1})
    assert set(errors) == {"head", "lr", ""}


def synthetic_embeddings(n: int, dim: int = 32, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Chosen texts sit a little further along one hidden direction than rejected ones, amid noise
    and an offset far from the origin (so the head must cope with unstandardised features)."""
    g = torch.Generator().manual_seed(seed)
    direction = torch.zeros(dim)
    direction[3] = 1.0
    base = torch.randn(n, dim, generator=g) * 2 + 40
    chosen = base + 1.5 * direction + torch.randn(n, dim, generator=g) * 0.5
    rejected = base + torch.randn(n, dim, generator=g) * 0.5
    return chosen, rejected


@pytest.mark.parametrize("head", ["linear", "mlp"])
def test_the_bradley_terry_head_learns_a_preference_direction_and_is_deterministic(head):
    chosen, rejected = synthetic_embeddings(120)
    args = dict(
        eval_chosen=chosen[80:], eval_rejected=rejected[80:], head=head, epochs=60, seed=3, hidden_units=16
    )
    fitted, curve = fit_head(chosen[:80], rejected[:80], **args)
    _, held_out_accuracy = pairwise_stats(fitted.score(chosen[80:]), fitted.score(rejected[80:]))
    assert held_out_accuracy > 0.85
    assert curve[-1]["eval_accuracy"] == pytest.approx(
        held_out_accuracy
    )  # the folded head is the trained one
    assert curve[-1]["train_loss"] < curve[0]["train_loss"] < 0.7  # below log 2, the loss of a blank head
    assert float(torch.cat([fitted.score(chosen[:80]), fitted.score(rejected[:80])]).mean()) == pytest.approx(
        0, abs=1e-3
    )
    again, _ = fit_head(chosen[:80], rejected[:80], **args)
    assert torch.equal(again.weight, fitted.weight) and again.bias == fitted.bias


@pytest.mark.slow
def test_a_reward_model_trained_on_the_default_model_beats_chance_on_held_out_prompts(tmp_path):
    pairs = format_preferences(40)
    started = time.perf_counter()
    encoder = load_encoder()
    loaded = time.perf_counter()
    result = train_reward_model(
        pairs,
        out_dir=tmp_path / "linear",
        encoder=encoder,
        seed=0,
        held_out_fraction=0.25,
        provenance={"snapshot": 7},
    )
    trained = time.perf_counter()
    # Embedding is nearly all the cost (compute-bound: ~0.2 GFLOP a token), so the MLP sees fewer pairs.
    mlp_pairs = format_preferences(20, seed=1)
    mlp = train_reward_model(
        mlp_pairs,
        out_dir=tmp_path / "mlp",
        encoder=encoder,
        seed=0,
        held_out_fraction=0.25,
        head="mlp",
        hidden_units=32,
    )
    print(
        f"\nload {loaded - started:.1f}s, linear {trained - loaded:.1f}s ({result.seconds}), "
        f"held-out accuracy linear {result.held_out_accuracy:.3f} mlp {mlp.held_out_accuracy:.3f}"
    )

    assert result.n_train + result.n_eval == 40 and result.n_eval == 10
    assert result.held_out_accuracy > 0.7 and mlp.held_out_accuracy > 0.7
    assert result.train_accuracy >= result.held_out_accuracy - 0.1
    metadata = read_metadata(tmp_path / "linear")
    assert metadata.base_model_path == "builtin:smollm2-135m" and metadata.hidden_size == 576
    assert metadata.provenance["snapshot"] == 7 and metadata.provenance["n_pairs"] == 40
    # The criterion standardises with the training texts' raw-score statistics, then bounds with tanh.
    assert metadata.score_scale == result.score_scale and metadata.score_scale["std"] > 0
    assert metadata.provenance["held_out_accuracy"] == pytest.approx(result.held_out_accuracy)
    assert len(json.loads((tmp_path / "linear" / "training_curve.json").read_text())) == len(result.curve)

    # The rubric criterion loads the saved model and prefers the chosen answer of held-out prompts.
    _, held = split_by_prompt(as_pairs(pairs), 0.25, seed=0)
    spec = {
        "criteria": [
            {
                "name": "rm",
                "kind": "learned_reward",
                "weight": 1.0,
                "params": {"path": str(tmp_path / "linear")},
            }
        ]
    }

    def answered(prompt: str, text: str) -> Trajectory:
        return Trajectory(task=Task("t", prompt, None), turns=[Turn("user", prompt), Turn("assistant", text)])

    trajectories = [
        answered(pairs[i]["prompt"], pairs[i][side]) for i in held for side in ("chosen", "rejected")
    ]
    scored = score_group(spec, trajectories)
    totals = [score.total for score in scored]
    assert all(-1 < total < 1 for total in totals)  # bounded
    assert all("raw_score" in score.components[0].provenance for score in scored)
    criterion_accuracy = sum(c > r for c, r in zip(totals[::2], totals[1::2], strict=True)) / len(held)
    assert criterion_accuracy == pytest.approx(result.held_out_accuracy)

    # The MLP head (hidden layer in the same format) loads and scores the same way.
    _, mlp_held = split_by_prompt(as_pairs(mlp_pairs), 0.25, seed=0)
    model = load_reward_model(tmp_path / "mlp")
    scores = model.score(
        [
            f"{mlp_pairs[i]['prompt']}\n\n{mlp_pairs[i][side]}"
            for i in mlp_held
            for side in ("chosen", "rejected")
        ]
    )
    assert sum(c > r for c, r in zip(scores[::2], scores[1::2], strict=True)) / len(
        mlp_held
    ) == pytest.approx(mlp.held_out_accuracy)


def test_a_reward_model_training_reports_its_embedding_progress_batch_by_batch(tiny, tmp_path):
    """Embedding is most of a training's time: the page's progress moves with each batch, not once."""
    model, tokenizer = tiny
    pairs = [{"prompt": f"q{i}", "chosen": f"right {i}", "rejected": f"wrong {i}"} for i in range(6)]
    reported: list[tuple[str, float]] = []
    train_reward_model(
        pairs,
        out_dir=tmp_path,
        encoder=(model, tokenizer),
        embed_batch_size=2,
        epochs=2,
        progress=lambda phase, fraction: reported.append((phase, fraction)),
    )
    embedding = [fraction for phase, fraction in reported if phase == "embed"]
    assert embedding == sorted(embedding) and embedding[-1] == 1.0
    assert len([f for f in embedding if 0 < f < 1]) >= 4  # 12 texts in batches of 2
    assert [phase for phase, _ in reported if phase != "embed"][:1] == ["load"]

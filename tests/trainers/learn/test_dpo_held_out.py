"""DPO measures what it learned on pairs it never trained on: a share of the prompts is held out (all of a
prompt's pairs on one side), and their loss, margin and preference accuracy reach the run as eval/dpo/*."""

from __future__ import annotations

from trainers.recipes.dpo import MIN_PAIRS_TO_HOLD_OUT, held_out_split


def pairs(prompts: int, per_prompt: int = 1) -> list[dict]:
    return [
        {"prompt": f"What is {p} + {p}?", "chosen": f"<answer>{2 * p}</answer>", "rejected": f"maybe {k}"}
        for p in range(prompts)
        for k in range(per_prompt)
    ]


def test_about_the_fraction_of_prompts_is_held_out_with_all_their_pairs():
    rows = pairs(50, per_prompt=2)
    train, held = held_out_split(rows, 0.2)
    assert len(train) + len(held) == len(rows) and 10 <= len(held) <= 30
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in held}
    assert held_out_split(rows, 0.2) == (train, held)  # stable
    assert held_out_split(rows, 0.0) == (rows, [])
    few = pairs(MIN_PAIRS_TO_HOLD_OUT - 1)
    assert held_out_split(few, 0.5) == (few, [])
    one_held = held_out_split(pairs(MIN_PAIRS_TO_HOLD_OUT), 0.01)[1]
    assert len(one_held) == 1  # a tiny fraction of a few prompts still holds one out


def test_a_dpo_run_reports_its_accuracy_on_the_held_out_pairs(tiny, tmp_path):
    from trainers.recipes.dpo import train_dpo
    from trainers.sdk.events import MemorySink

    model, tokenizer = tiny
    sink = MemorySink()
    result = train_dpo(
        pairs(8),
        {"max_steps": 2, "batch_size": 2, "max_length": 64, "save_every": 2, "device": "cpu"},
        out_dir=tmp_path,
        sink=sink,
        model=model,
        tokenizer=tokenizer,
    )
    assert result.steps == 2
    evals = [e["values"] for e in sink.of_type("metrics") if e["split"] == "eval"]
    assert len(evals) == 2 and all(0.0 <= values["eval/dpo/accuracy"] <= 1.0 for values in evals)
    assert "eval/dpo/margin" in evals[-1]

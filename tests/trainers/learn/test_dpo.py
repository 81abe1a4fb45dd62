"""Our DPO: TRL's loss and gradients on the same batch, lean (one model, the reference its adapters off),
and never silent (phase progress, per-step loss, margin and preference accuracy, held-out evaluation,
checkpoints that are models), with exact resume."""

from __future__ import annotations

import copy

import pytest
import torch

from trainers.learn.checkpoint import load_trainer_state
from trainers.learn.pairs import dpo_losses, pair_logprobs, tokenize_pair
from trainers.recipes.dpo import train_dpo
from trainers.sdk.events import MemorySink

PAIRS = [
    {
        "prompt": [{"role": "user", "content": f"What is {a} + {a}?"}],
        "chosen": [{"role": "assistant", "content": f"<answer>{2 * a}</answer>"}],
        "rejected": [{"role": "assistant", "content": f"I think it is {a}, or maybe {3 * a}."}],
    }
    for a in range(10)
]
# As a snapshot's pairs: one system prompt before every question, encoded once for the batch.
SYSTEM = "You solve sums. Think briefly, then give the result inside <answer></answer> tags, nothing else."
WITH_SYSTEM = [{**row, "prompt": [{"role": "system", "content": SYSTEM}, *row["prompt"]]} for row in PAIRS]
TINY = {"max_length": 64, "batch_size": 2, "learning_rate": 1e-2, "device": "cpu", "lora_r": 4}


def _moved_off(model):
    """A policy that differs from `model` (its reference), as after some training."""
    policy = copy.deepcopy(model)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return policy


@pytest.mark.parametrize(
    ("loss_type", "pairs", "max_tokens"),
    [("sigmoid", PAIRS, 0), ("ipo", PAIRS, 0), ("sigmoid", WITH_SYSTEM, 0), ("sigmoid", WITH_SYSTEM, 40)],
    ids=["sigmoid", "ipo", "shared-system-prompt", "shared-system-prompt-in-passes"],
)
def test_our_loss_and_gradients_equal_trls_dpo_trainer_on_the_same_batch(
    tiny, tmp_path, loss_type, pairs, max_tokens
):
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from trainers.learn.pairs import shared_prefix

    model, tokenizer = tiny  # full fine-tuning against a reference that differs: the loss is not log 2
    rows = pairs[:4]
    theirs = _moved_off(model)
    ours = copy.deepcopy(theirs)
    args = DPOConfig(
        output_dir=str(tmp_path), beta=0.1, loss_type=[loss_type], per_device_train_batch_size=4,
        report_to=[], use_cpu=True, bf16=False, max_length=64, dataloader_num_workers=0,
    )  # fmt: skip
    trainer = DPOTrainer(
        model=theirs,
        ref_model=copy.deepcopy(model),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    # Same tokens: TRL's tokenized dataset and ours.
    tokens = [tokenize_pair(row, tokenizer, 64) for row in rows]
    for pair, tokenized in zip(tokens, trainer.train_dataset, strict=True):
        assert (pair.prompt_ids, pair.chosen_ids, pair.rejected_ids) == (
            tokenized["prompt_ids"], tokenized["chosen_ids"], tokenized["rejected_ids"],
        )  # fmt: skip
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    theirs.train()
    their_loss = trainer.compute_loss(theirs, batch)
    their_loss.backward()
    assert abs(float(their_loss) - 0.6931) > 1e-3  # the policy is not the reference: a real loss

    if pairs is WITH_SYSTEM:  # the system prompt is encoded once for the four pairs
        assert len(shared_prefix(tokens)) > len(tokenizer(SYSTEM)["input_ids"])
    with torch.no_grad():
        ref_chosen, ref_rejected = pair_logprobs(model, tokens, max_tokens=max_tokens)
    lengths = torch.tensor([[len(p.chosen_ids), len(p.rejected_ids)] for p in tokens], dtype=torch.float32)
    losses: list[float] = []

    def loss_of(indices, chosen, rejected):
        index = torch.tensor(indices)
        per_pair = dpo_losses(
            chosen, rejected, ref_chosen[index], ref_rejected[index], beta=0.1, loss_type=loss_type,
            chosen_tokens=lengths[index, 0], rejected_tokens=lengths[index, 1],
        )  # fmt: skip
        losses.append(float(per_pair.detach().sum()))
        return per_pair.sum() / len(tokens)

    ours.train()
    passes = []
    pair_logprobs(ours, tokens, loss_of=loss_of, max_tokens=max_tokens, progress=passes.append)
    assert len(passes) == (1 if max_tokens == 0 else 4)  # 40 tokens hold one pair after the system prompt
    assert sum(losses) / len(tokens) == pytest.approx(float(their_loss), rel=1e-5, abs=1e-6)
    their_grads = {n: p.grad for n, p in theirs.named_parameters() if p.requires_grad}
    our_grads = {n: p.grad for n, p in ours.named_parameters() if p.requires_grad}
    assert their_grads.keys() == our_grads.keys() and their_grads
    for name, grad in our_grads.items():
        torch.testing.assert_close(grad, their_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_a_dpo_run_tells_its_phase_progress_and_each_steps_dpo_numbers(tiny, tmp_path):
    model, tokenizer = tiny
    sink = MemorySink()
    result = train_dpo(
        PAIRS, {**TINY, "max_steps": 3, "save_every": 2}, out_dir=tmp_path, sink=sink,
        model=copy.deepcopy(model), tokenizer=tokenizer,
    )  # fmt: skip
    assert result.status == "SUCCEEDED" and result.steps == 3
    statuses = [e["status"] for e in sink.of_type("status")]
    assert statuses == ["RUNNING", "SUCCEEDED"]
    phases = [(e["phase"], e.get("message", "")) for e in sink.of_type("phase")]
    said = " | ".join(message for _, message in phases)
    assert "tokenizing 10 of 10 pairs" in said and "reference log-probs: 10 of 10 pairs" in said
    assert "step 3 of 3: 2 of 2 pairs" in said
    assert {"loading", "scoring", "updating", "evaluating", "checkpointing"} <= {p for p, _ in phases}
    train = [e for e in sink.of_type("metrics") if e["split"] == "train"]
    assert [e["step"] for e in train] == [1, 2, 3]
    assert all({"loss", "dpo/margin", "dpo/accuracy"} <= e["values"].keys() for e in train)
    evals = [e for e in sink.of_type("metrics") if e["split"] == "eval"]
    assert [e["step"] for e in evals] == [0, 2, 3]  # before the first step, at the checkpoint, at the end
    assert evals[0]["values"]["eval/dpo/margin"] == pytest.approx(0.0, abs=1e-5)  # starts as the reference
    logs = [e["message"] for e in sink.of_type("log")]
    assert any(m.startswith("step 2/3: loss ") and "preference accuracy" in m for m in logs)
    assert any(m.startswith("evaluation at step 3: preference accuracy") for m in logs)
    checkpoints = sink.of_type("checkpoint")
    assert [c["step"] for c in checkpoints] == [2, 3] and checkpoints[0]["kind"] == "adapter"
    assert "eval/dpo/accuracy" in checkpoints[0]["metrics"]
    # The checkpoint is a model another run starts from.
    assert (tmp_path / "checkpoints" / "step-000003" / "tokenizer.json").is_file()


def test_a_resumed_dpo_run_takes_the_step_the_stopped_one_would_have(tiny, tmp_path):
    model, tokenizer = tiny
    knobs = {**TINY, "max_steps": 2, "save_every": 1, "eval_fraction": 0.0}
    straight = MemorySink()
    train_dpo(
        PAIRS, knobs, out_dir=tmp_path / "a", sink=straight, model=copy.deepcopy(model), tokenizer=tokenizer
    )
    step_one = tmp_path / "a" / "checkpoints" / "step-000001"
    assert load_trainer_state(step_one)["data_position"] == 2
    resumed = MemorySink()
    train_dpo(
        PAIRS, knobs, out_dir=tmp_path / "b", sink=resumed, resume_from=step_one,
        model=copy.deepcopy(model), tokenizer=tokenizer,
    )  # fmt: skip

    def step_two(sink):
        return next(e["values"] for e in sink.of_type("metrics") if e["step"] == 2 and e["split"] == "train")

    assert [e["step"] for e in resumed.of_type("metrics")] == [2]
    assert step_two(resumed)["loss"] == pytest.approx(step_two(straight)["loss"], rel=1e-5)


def test_a_cancelled_dpo_run_stops_within_a_pair_with_a_checkpoint(tiny, tmp_path):
    model, tokenizer = tiny
    sink = MemorySink()

    def cancel_after_two_steps() -> bool:  # the Cancel button, pressed once the page shows step 2
        return len([e for e in sink.of_type("metrics") if e["split"] == "train"]) >= 2

    # (A count of calls would be a clock: the check is polled at most every 0.2 s, and 50 tiny steps may
    # all finish before the 41st poll.)
    result = train_dpo(
        PAIRS, {**TINY, "max_steps": 50, "save_every": 0}, out_dir=tmp_path, sink=sink,
        cancel=cancel_after_two_steps, model=copy.deepcopy(model), tokenizer=tokenizer,
    )  # fmt: skip
    assert result.status == "CANCELLED" and 2 <= result.steps < 50
    trained = [e["step"] for e in sink.of_type("metrics") if e["split"] == "train"]
    assert trained == list(range(1, result.steps + 1))  # the step cut short is not counted
    assert [e["status"] for e in sink.of_type("status")][-1] == "CANCELLED"
    assert [c["step"] for c in sink.of_type("checkpoint")] == [result.steps]

"""The training loop on the real SmolLM2: log-probs, one real update, events, cancel, multi-turn tokens."""

from __future__ import annotations

import time

import pytest
import torch

from trainers import models
from trainers.learn.losses import completion_logprobs, policy_loss
from trainers.models import cpu_runs_fast
from trainers.recipes.grpo import Trainer
from trainers.rollout.chat import ChatFormat
from trainers.rollout.episodes import Rollout
from trainers.sdk import wire
from trainers.sdk.events import MemorySink
from trainers.types import Task, Trajectory

pytestmark = pytest.mark.slow

TINY = {
    "max_steps": 1,
    "group_size": 2,
    "prompts_per_step": 1,
    "max_new_tokens": 12,
    "eval_tasks": 0,
    "checkpoint_every": 0,
    "learning_rate": 1e-4,
}


def hand_rollouts(tokenizer, texts_by_prompt: dict[str, list[str]]) -> list[Rollout]:
    """Rollouts from fixed texts: a model reply, a tool message (mask 0), a second reply."""
    chat = ChatFormat(tokenizer)
    rollouts = []
    for g, (question, replies) in enumerate(texts_by_prompt.items()):
        system_ids, user_ids = chat.prompt("Be brief.", question)
        for s, reply in enumerate(replies):
            first = chat.encode(reply)
            tool = chat.continuation("tool", "Result: 4", ended_with_eos=False)
            second = chat.encode("<answer>4</answer>")
            r = Rollout(
                group=g,
                sample=s,
                task=Task(id=f"t{g}", prompt=question),
                seed=s,
                trajectory=Trajectory(task=Task(id=f"t{g}", prompt=question)),
                prompt_ids=system_ids + user_ids,
            )
            r.completion_ids = first + tool + second
            r.loss_mask = [1] * len(first) + [0] * len(tool) + [1] * len(second)
            rollouts.append(r)
    return rollouts


def naive_logprobs(model, rollout: Rollout) -> torch.Tensor:
    ids = torch.tensor([rollout.prompt_ids + rollout.completion_ids])
    logits = model(input_ids=ids).logits[0].float()
    logp = torch.log_softmax(logits[len(rollout.prompt_ids) - 1 : -1], dim=-1)
    return logp.gather(-1, torch.tensor(rollout.completion_ids)[:, None]).squeeze(-1)


def test_completion_logprobs_match_a_plain_forward(smollm):
    model, tokenizer = smollm
    rollouts = hand_rollouts(
        tokenizer,
        {
            "What is 2+2?": ["Let me use the tool.", "<tool_call>{}</tool_call>"],
            "Hi!": ["Hello there, friend."],
        },
    )
    masks = [r.loss_mask for r in rollouts]
    with torch.no_grad():
        logp, mask, entropy = completion_logprobs(model, rollouts, masks, with_entropy=True)
        for i, r in enumerate(rollouts):
            expected = naive_logprobs(model, r)
            n = len(r.completion_ids)
            sel = torch.tensor(r.loss_mask).bool()
            assert torch.allclose(logp[i, :n][sel], expected[sel], atol=2e-4)
            assert torch.all(logp[i, :n][~sel] == 0)  # tool tokens: never scored
            assert torch.equal(mask[i, :n], sel.float())
    assert entropy > 0


def test_one_update_changes_the_weights_and_lowers_the_loss(policy_copy, toy_env):
    model, tokenizer = policy_copy
    trainer = Trainer({**TINY, "learning_rate": 2e-5}, env_factory=toy_env, model=model, tokenizer=tokenizer)
    trainer.setup()
    rollouts = hand_rollouts(tokenizer, {"What is 2+2?": ["I will compute it.", "Cats are nice."]})
    rollouts[0].advantage, rollouts[1].advantage = 1.0, -1.0
    masks = [r.loss_mask for r in rollouts]
    advantages = torch.tensor([1.0, -1.0])
    with torch.no_grad():
        before, mask, _ = completion_logprobs(model, rollouts, masks)
    loss_before, _ = policy_loss(before, before, advantages, mask, loss_agg="seq-mean-token-mean")
    weights_before = model.model.layers[0].self_attn.q_proj.weight.detach().clone()

    metrics = trainer.update(rollouts, {})

    with torch.no_grad():
        after, _, _ = completion_logprobs(model, rollouts, masks)
    loss_after, _ = policy_loss(after, before, advantages, mask, loss_agg="seq-mean-token-mean")
    assert not torch.equal(weights_before, model.model.layers[0].self_attn.q_proj.weight)
    assert loss_after.item() < loss_before.item() - 1e-3
    assert metrics["trained_sequences"] == 2 and metrics["grad_norm"] > 0
    # The preferred reply became more likely, the other less.
    assert (after[0] - before[0]).sum() > 0 > (after[1] - before[1]).sum()


def test_a_run_on_the_arithmetic_environment_reports_everything(policy_copy):
    model, tokenizer = policy_copy
    sink = MemorySink()
    config = {
        **TINY,
        "max_turns": 2,
        "eval_tasks": 2,
        "environment": {"kind": "arithmetic_calculator", "config": {}},
    }
    result = Trainer(config, sink=sink, model=model, tokenizer=tokenizer).run()
    assert result.status == "SUCCEEDED" and result.step == 1
    statuses = [e["status"] for e in sink.of_type("status")]
    assert statuses == ["RUNNING", "SUCCEEDED"]
    assert [e["seq"] for e in sink.events] == list(range(1, len(sink.events) + 1))
    assert all("time" in e for e in sink.events)
    train = [e for e in sink.of_type("metrics") if e["split"] == "train"]
    assert len(train) == 1
    for key in (
        "reward/mean",
        "reward/std",
        "entropy",
        "clip_fraction",
        "response_length",
        "turns",
        "tool_calls",
        "zero_variance_fraction",
        "step_time",
        "tokens_per_s",
        "loss",
        "kl",
    ):
        assert key in train[0]["values"], key
    # The run page's async-health panel stacks these phases per step and calls the rest waiting.
    values = train[0]["values"]
    phases = [f"time/{part}" for parts in wire.STEP_TIME_PARTS.values() for part in parts]
    assert all(values[key] >= 0 for key in phases), sorted(values)
    assert sum(values[key] for key in phases) <= values["step_time"]
    evals = [e for e in sink.of_type("metrics") if e["split"] == "eval"]
    assert [e["step"] for e in evals] == [0, 1]
    # A step's rollouts are reported as soon as they are scored, before its update begins.
    order = [(e["type"], e.get("phase"), e.get("step")) for e in sink.events]
    train_rollouts = next(
        i
        for i, e in enumerate(sink.events)
        if e["type"] == "trajectories" and e["items"][0]["split"] == "train"
    )
    assert sink.events[train_rollouts]["step"] == 1
    assert train_rollouts < order.index(("phase", "updating", 1)), order
    batches = sink.of_type("trajectories")
    eval_items = [i for b in batches for i in b["items"] if i["split"] == "eval"]
    train_items = [i for b in batches for i in b["items"] if i["split"] == "train"]
    assert len(eval_items) == 4 and len(train_items) == 2
    # The eval set is fixed: the same tasks and seeds before and after training.
    assert [(i["task_id"], i["seed"]) for i in eval_items[:2]] == [
        (i["task_id"], i["seed"]) for i in eval_items[2:]
    ]
    item = train_items[0]
    assert {
        "group",
        "sample",
        "task_id",
        "seed",
        "reward",
        "components",
        "advantage",
        "status",
        "policy_version",
        "prompt_tokens",
        "completion_tokens",
        "turns",
        "env_state",
    } <= set(item)
    assert item["turns"][0]["role"] == "system" and item["turns"][2]["role"] == "assistant"
    for turn in item["turns"]:
        assert len(turn["token_ids"]) == len(turn["loss_mask"])
        assert set(turn["loss_mask"]) <= ({1} if turn["role"] == "assistant" else {0})
    assert item["completion_tokens"] == sum(
        len(t["token_ids"]) for t in item["turns"] if t["role"] == "assistant"
    )


def test_zero_steps_evaluate_the_starting_policy_and_train_nothing(policy_copy, tmp_path):
    """`max_steps: 0` is an evaluation run (issue 35.1: evaluate a checkpoint from the dashboard and the API,
    as `python -m trainers eval` does): the held-out figures of the policy it starts from, no training step,
    no checkpoint written, SUCCEEDED."""
    model, tokenizer = policy_copy
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    sink = MemorySink()
    config = {
        **TINY,
        "max_steps": 0,
        "eval_tasks": 2,
        "checkpoint_every": 1,
        "environment": {"kind": "arithmetic_calculator", "config": {}},
    }
    result = Trainer(config, sink=sink, model=model, tokenizer=tokenizer, out_dir=tmp_path).run()
    assert result.status == "SUCCEEDED" and result.step == 0
    metrics = sink.of_type("metrics")
    assert [(e["split"], e["step"]) for e in metrics] == [("eval", 0)]
    assert "eval/reward/mean" in metrics[0]["values"]
    assert not sink.of_type("checkpoint") and not (tmp_path / "checkpoints").exists()
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())


def test_zero_steps_without_held_out_tasks_are_refused_in_words():
    from trainers.config import resolve_run_config, validate_run_config

    errors = validate_run_config(
        resolve_run_config(preset="grpo", overrides={"max_steps": 0, "eval_tasks": 0})
    )
    assert errors["max_steps"] == [
        "0 steps only evaluates the starting policy: give it held-out tasks (eval_tasks above 0)."
    ]


def test_cancel_between_steps(policy_copy, toy_env):
    model, tokenizer = policy_copy
    sink = MemorySink()
    result = Trainer(
        {**TINY, "max_steps": 5},
        sink=sink,
        env_factory=toy_env,
        model=model,
        tokenizer=tokenizer,
        cancel=lambda: bool(sink.of_type("metrics")),  # let one step run
    ).run()
    assert result.status == "CANCELLED" and result.step == 1
    assert sink.of_type("status")[-1]["status"] == "CANCELLED"
    # The log says where it stopped and what a resume would start from (here: no checkpoint directory).
    assert sink.of_type("log")[-1]["message"] == (
        "cancelled: stopped after step 1, with no checkpoint saved; there is nothing to resume from"
    )


def test_a_cancel_saves_the_checkpoint_the_dialog_promises_and_the_log_names_it(
    policy_copy, toy_env, tmp_path
):
    """Walk 35.8: the cancel dialog promised a checkpoint, then the page said "No checkpoints yet" and the
    log had no cancel line. A run with somewhere to write (checkpoints off, as the walk's) keeps the last
    finished step as a checkpoint event the page lists, and its log says that a resume starts there."""
    model, tokenizer = policy_copy
    sink = MemorySink()
    result = Trainer(
        {**TINY, "max_steps": 5, "checkpoint_every": 0},
        sink=sink,
        env_factory=toy_env,
        out_dir=tmp_path,
        model=model,
        tokenizer=tokenizer,
        cancel=lambda: bool(sink.of_type("metrics")),  # let one step run
    ).run()
    assert result.status == "CANCELLED" and result.step == 1
    assert [event["step"] for event in sink.of_type("checkpoint")] == [1]
    assert result.checkpoint is not None and (tmp_path / "checkpoints" / "step-000001").is_dir()
    assert sink.of_type("log")[-1]["message"] == (
        "cancelled: stopped after step 1; a resume starts from the checkpoint of step 1"
    )


def test_cancel_mid_evaluation_stops_inside_the_generation(policy_copy, toy_env):
    """The one cancellation check (trainers.sdk.cancel) is polled inside the decode loop: a cancel asked
    while the held-out tasks generate stops the evaluation there, before any of it is reported."""
    model, tokenizer = policy_copy
    sink = MemorySink()
    asked_at: list[float] = []

    def cancel() -> bool:
        evaluating = any(e["phase"] == "evaluating" for e in sink.of_type("phase"))
        if evaluating and not asked_at:
            asked_at.append(time.monotonic())
            return False  # asked now; seen at the next poll, inside the decode loop
        return bool(asked_at)

    result = Trainer(
        {**TINY, "max_steps": 3, "eval_tasks": 8, "max_new_tokens": 64},
        sink=sink,
        env_factory=toy_env,
        model=model,
        tokenizer=tokenizer,
        cancel=cancel,
    ).run()
    assert result.status == "CANCELLED" and result.step == 0
    assert time.monotonic() - asked_at[0] < 5
    assert not sink.of_type("metrics") and not sink.of_type("trajectories")
    assert sink.of_type("status")[-1]["message"] == "cancelled after step 0"
    assert sink.of_type("log")[-1]["message"] == (
        "cancelled: stopped before its first step finished, with no checkpoint saved; there is nothing to resume from"
    )


def test_a_failure_is_reported_with_its_traceback(policy_copy, toy_env):
    model, tokenizer = policy_copy

    class Broken(toy_env):
        def tasks(self, split, n, seed):
            raise RuntimeError("no tasks today")

    sink = MemorySink()
    with pytest.raises(RuntimeError, match="no tasks today"):
        Trainer(TINY, sink=sink, env_factory=Broken, model=model, tokenizer=tokenizer).run()
    failed = sink.of_type("status")[-1]
    assert failed["status"] == "FAILED" and "no tasks today" in failed["traceback"]


def test_dapo_with_a_rubric_reports_components_that_add_up(policy_copy, toy_env):
    model, tokenizer = policy_copy
    sink = MemorySink()
    rubric = {
        "aggregation": "weighted_sum",
        "criteria": [
            {"name": "env", "kind": "env_reward", "weight": 1.0, "params": {}},
            {"name": "short", "kind": "length", "weight": 0.5, "params": {"max_len": 20}},
        ],
    }
    config = {
        **TINY,
        "preset": "dapo",
        "group_size": 4,
        "overlong_buffer": 4,
        "max_new_tokens": 8,
        "dynamic_sampling_max_rounds": 1,
        "rubric": rubric,
        "max_turns": 1,
        "max_turns_schedule": [[0, 2]],
    }
    Trainer(config, sink=sink, env_factory=toy_env, model=model, tokenizer=tokenizer).run()
    values = sink.of_type("metrics")[0]["values"]
    assert values["max_turns"] == 2  # the schedule wins over max_turns from step 0
    assert 1 <= values["sampling_rounds"] <= 2
    assert "criterion/env" in values and "criterion/short/weighted" in values
    items = sink.of_type("trajectories")[0]["items"]
    for item in items:
        names = [c["name"] for c in item["components"]]
        assert names == [
            "env",
            "short",
            "overlong",
        ]  # the knobs add the criterion (config.OVERLONG_CRITERION)
        assert item["reward"] == pytest.approx(sum(c["weighted"] for c in item["components"]))
        if item.get("dropped"):
            assert item["advantage"] == 0


@pytest.mark.skipif(not cpu_runs_fast(torch.bfloat16), reason="this CPU samples bf16 copies in fp32")
def test_a_bf16_sampler_follows_the_fp32_policy(policy_copy, toy_env):
    model, tokenizer = policy_copy
    trainer = Trainer(
        {**TINY, "group_size": 4, "generation_dtype": "bfloat16", "weight_decay": 0.1},
        env_factory=toy_env,
        model=model,
        tokenizer=tokenizer,
    )
    trainer.setup()
    trainer.train_step()
    sampler = trainer.rollouts.backend.model
    assert sampler is not trainer.model and next(sampler.parameters()).dtype == torch.bfloat16
    assert sampler.config._attn_implementation == models.GROUPED_ATTENTION  # models.attention_implementation
    sampled = trainer.rollouts.backend.state_dict()  # a packed copy's weights unpacked
    for key, value in trainer.model.state_dict().items():
        assert torch.equal(sampled[key], value.to(torch.bfloat16)), key


@pytest.mark.skipif(not cpu_runs_fast(torch.bfloat16), reason="this CPU samples bf16 copies in fp32")
def test_the_update_runs_without_the_sampling_copy_and_leaves_no_gradients(policy_copy, toy_env, monkeypatch):
    """Memory (issue 25): the bf16 copy's weights are given back while the learner holds its gradients and
    activations, and the gradients while generation runs; the copy comes back as the new policy."""
    model, tokenizer = policy_copy
    trainer = Trainer(
        {**TINY, "group_size": 4, "generation_dtype": "bfloat16"},
        env_factory=toy_env,
        model=model,
        tokenizer=tokenizer,
    )
    trainer.setup()
    sampler = trainer.rollouts.backend.model
    held: list[int] = []
    update = trainer.learner.update

    def watched(*args, **kwargs):
        held.append(sum(p.numel() for p in sampler.parameters()))
        return update(*args, **kwargs)

    monkeypatch.setattr(trainer.learner, "update", watched)
    trainer.train_step()
    assert held == [0]
    assert all(p.grad is None for p in trainer.model.parameters())
    sampled = trainer.rollouts.backend.state_dict()  # a packed copy's weights unpacked
    for key, value in trainer.model.state_dict().items():
        assert torch.equal(sampled[key], value.to(torch.bfloat16)), key


@pytest.mark.skipif(not cpu_runs_fast(torch.bfloat16), reason="this CPU samples bf16 copies in fp32")
def test_a_failed_update_gives_the_sampling_copy_its_weights_back(policy_copy, toy_env, monkeypatch):
    model, tokenizer = policy_copy
    trainer = Trainer(
        {**TINY, "group_size": 4, "generation_dtype": "bfloat16"},
        env_factory=toy_env,
        model=model,
        tokenizer=tokenizer,
    )
    trainer.setup()

    def fails(*args, **kwargs):
        raise RuntimeError("the update failed")

    monkeypatch.setattr(trainer.learner, "update", fails)
    with pytest.raises(RuntimeError, match="the update failed"):
        trainer.train_step()
    sampled = trainer.rollouts.backend.state_dict()  # a packed copy's weights unpacked
    for key, value in trainer.model.state_dict().items():
        assert torch.equal(sampled[key], value.to(torch.bfloat16)), key


@pytest.mark.skipif(not cpu_runs_fast(torch.bfloat16), reason="mixed runs fp32 passes on this CPU")
def test_mixed_precision_on_a_cpu_samples_with_a_bf16_copy_and_trains_fp32_weights(policy_copy, toy_env):
    """`dtype: mixed` with `generation_dtype: auto` samples in the learner's compute dtype, in a copy:
    decoding under CPU autocast would cast every weight at every token."""
    model, tokenizer = policy_copy
    trainer = Trainer(
        # A KL term: every sampled row is trained (and scored), whatever rewards the toy environment gives.
        {**TINY, "group_size": 4, "dtype": "mixed", "kl_coef": 0.05},
        env_factory=toy_env,
        model=model,
        tokenizer=tokenizer,
    )
    trainer.setup()
    metrics = trainer.train_step()
    sampler = trainer.rollouts.backend.model
    assert sampler is not trainer.model and next(sampler.parameters()).dtype == torch.bfloat16
    assert next(trainer.model.parameters()).dtype == torch.float32
    assert trainer.learner.precision.autocast_dtype is torch.bfloat16
    # The learner's bf16 passes score the bf16 sampler's tokens within rounding.
    assert metrics["trained_sequences"] > 0 and metrics["logprob_mismatch/mean"] < 0.1


def test_a_sampler_in_the_policys_own_dtype_is_the_policy_itself(policy_copy, toy_env):
    """No copy (and no weight push per step) when the sampling dtype is the policy's: fp32 asked for, or
    bf16 on a CPU that samples it in fp32."""
    model, tokenizer = policy_copy
    sink = MemorySink()
    trainer = Trainer(
        {**TINY, "group_size": 2, "generation_dtype": "float32"},
        env_factory=toy_env,
        model=model,
        tokenizer=tokenizer,
        sink=sink,
    )
    trainer.setup()
    assert trainer.rollouts.backend.model is trainer.model
    assert any("sampling with the policy itself in float32" in e.get("message", "") for e in sink.events)

"""The TRL callback inside a real transformers.Trainer loop, reporting to the real dashboard (live_server).

A tiny randomly initialised GPT-2 trains for real on CPU (no download); a second callback writes the
completion log exactly where and when TRL's GRPOTrainer does (after on_log, completions_<step>.parquet),
so the callback sees the same files and call order it sees under GRPOTrainer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from trainers.integrations.trl import RolloutStudioCallback  # noqa: E402
from trainers.sdk.client import Studio  # noqa: E402
from webapp.experiments.models import Checkpoint, Run, RunStatus  # noqa: E402
from webapp.rollouts.models import MetricPoint, Trajectory  # noqa: E402

FAST = {"flush_interval_s": 0.02, "heartbeat_interval_s": 0.2}


@dataclass
class GRPOLikeConfig(TrainingArguments):
    """The GRPOConfig fields the callback reads (TRL itself is optional here)."""

    log_completions: bool = field(default=True)
    reward_weights: list[float] | None = field(default=None)


class ToyGRPOTrainer(Trainer):
    """Adds TRL-style reward metrics to every log, as GRPOTrainer.log does before calling super().log."""

    def log(self, logs, start_time=None):
        if "loss" in logs:
            step = self.state.global_step
            logs.update(
                {
                    "reward": step / 10,
                    "reward_std": 0.1,
                    "rewards/correct/mean": step / 10,
                    "kl": 0.001 * step,
                    "entropy": 2.0,
                    "clip_ratio/region_mean": 0.0,
                    "completions/mean_length": 7.0,
                    "num_tokens": 64.0 * step,
                }
            )
        super().log(logs, start_time)


class WritesCompletions(TrainerCallback):
    """After our callback's on_log, write what GRPOTrainer writes with log_completions=True."""

    def __init__(self, upto_step: int):
        self.upto_step = upto_step

    def on_log(self, args, state, control, logs=None, **kwargs):
        step = state.global_step
        if step > self.upto_step or "loss" not in (logs or {}):
            return
        prompts = [[{"role": "user", "content": f"{a}+{a}?"}] for a in (1, 1, 2, 2)]
        table = pa.Table.from_pydict(
            {
                "step": [step] * 4,
                "prompt": prompts,
                "completion": [
                    [{"role": "assistant", "content": f"{text} (step {step})"}]
                    for text in ("2", "3", "4", "4")
                ],
                "correct": [1.0, 0.0, 1.0, 1.0],
                "format": [1.0, 1.0, float("nan"), 0.0],
                "advantage": [0.7, -0.7, 0.0, 0.0],
            }
        )
        directory = Path(args.output_dir) / "completions"
        directory.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, directory / f"completions_{step:05d}.parquet")


class CancelsInTheDashboard(TrainerCallback):
    """Someone presses Cancel while step `at` runs (through the dashboard's own service)."""

    def __init__(self, at: int):
        self.at = at

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            from webapp.experiments.services import run_request_cancel

            run_request_cancel(run=Run.objects.get())


def tiny_trainer(tmp_path: Path, callbacks: list, max_steps: int, reward_weights=None) -> Trainer:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=16))
    data = [
        {"input_ids": torch.randint(0, 64, (8,)), "labels": torch.randint(0, 64, (8,))} for _ in range(16)
    ]
    args = GRPOLikeConfig(
        output_dir=str(tmp_path / "grpo-toy"),
        max_steps=max_steps,
        per_device_train_batch_size=2,
        logging_steps=1,
        save_strategy="steps",
        save_steps=2,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        learning_rate=1e-3,
        reward_weights=reward_weights,
        save_only_model=True,
    )
    return ToyGRPOTrainer(model=model, args=args, train_dataset=data, callbacks=callbacks)


@pytest.fixture
def studio(live_server, transactional_db, project, users):
    from webapp.accounts.services import api_token_create

    return Studio(live_server.url, api_token_create(user=users["bob"], name="trl")[1])


def test_it_reports_metrics_completions_and_checkpoints_of_a_training_run(studio, tmp_path):
    callback = RolloutStudioCallback(studio=studio, project="agents", **FAST)
    trainer = tiny_trainer(
        tmp_path, [callback, WritesCompletions(upto_step=3)], max_steps=4, reward_weights=[1.0, 0.5]
    )
    trainer.train()

    run = Run.objects.get()
    assert run.status == RunStatus.SUCCEEDED and run.is_external
    assert run.name == "grpo-toy" and run.preset == "trl-grpolike" and run.max_steps == 4
    assert run.resolved_config["max_steps"] == 4 and run.resolved_config["reward_weights"] == [1.0, 0.5]
    rewards = MetricPoint.objects.filter(run=run, key="reward/mean").order_by("step")
    assert [(p.step, p.value, p.tokens) for p in rewards] == [(s, s / 10, 64 * s) for s in range(1, 5)]
    keys = set(MetricPoint.objects.filter(run=run).values_list("key", flat=True))
    assert {
        "reward/std",
        "criterion/correct",
        "kl",
        "entropy",
        "clip_fraction",
        "response_length",
        "loss",
        "learning_rate",
        "grad_norm",
    } <= keys
    assert not any(k.startswith(("reward_std", "rewards/", "clip_ratio", "completions/")) for k in keys)

    # Completions of steps 1–3 (written after on_log) arrive as trajectories, grouped by prompt.
    assert sorted(set(Trajectory.objects.filter(run=run).values_list("step", flat=True))) == [1, 2, 3]
    step2 = {(t.group_index, t.sample_index): t for t in Trajectory.objects.filter(run=run, step=2)}
    assert sorted(step2) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert step2[(0, 0)].prompt == "1+1?" and step2[(0, 0)].reward == 1.5 and step2[(0, 0)].advantage == 0.7
    assert [c["weight"] for c in step2[(0, 0)].components] == [1.0, 0.5]
    assert [c["name"] for c in step2[(1, 0)].components] == ["correct"]  # format gave NaN: not applied

    checkpoints = list(Checkpoint.objects.filter(run=run).order_by("step"))
    assert [c.step for c in checkpoints] == [2, 4]
    assert checkpoints[0].path.endswith("grpo-toy/checkpoint-2") and Path(checkpoints[0].path).is_dir()
    assert math.isclose(checkpoints[0].metrics["reward/mean"], 0.2)


def test_cancel_in_the_dashboard_stops_training(studio, tmp_path):
    callback = RolloutStudioCallback(studio=studio, project="agents", name="to cancel", **FAST)
    trainer = tiny_trainer(tmp_path, [callback, CancelsInTheDashboard(at=2)], max_steps=400)
    trainer.train()

    assert callback.cancelled
    assert 2 < trainer.state.global_step < 400
    run = Run.objects.get()
    assert run.status == RunStatus.CANCELLED
    assert any("cancel requested" in e.summary.get("message", "") for e in run.events.filter(type="log"))


def test_a_crash_inside_a_run_context_reports_failed(studio, tmp_path):
    class Explodes(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2:
                raise RuntimeError("CUDA error: device-side assert triggered")

    with pytest.raises(RuntimeError, match="device-side assert"):
        with studio.start_run(project="agents", name="crash", **FAST) as run:
            tiny_trainer(tmp_path, [RolloutStudioCallback(run), Explodes()], max_steps=10).train()
    stored = Run.objects.get()
    assert stored.status == RunStatus.FAILED and "device-side assert" in stored.error_message
    assert "on_step_end" in stored.error_traceback
    assert MetricPoint.objects.filter(run=stored, key="reward/mean").count() >= 1


@pytest.mark.slow
def test_it_reports_a_real_trl_grpo_run(studio, tmp_path):
    """TRL's own GRPOTrainer (when installed): a tiny random Llama and a word-level tokenizer built here."""
    pytest.importorskip("trl")
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from trl import GRPOConfig, GRPOTrainer

    words = ["<pad>", "<eos>", "<unk>", "+", "?", "What", "is", *map(str, range(20))]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(words),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=64,
            pad_token_id=0,
            eos_token_id=1,
            bos_token_id=1,
        )
    )

    def correct(completions, **kwargs):
        return [float("4" in c.split()) for c in completions]

    def short(completions, **kwargs):
        return [-len(c) / 10 for c in completions]

    args = GRPOConfig(
        output_dir=str(tmp_path / "trl-real"),
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=4,
        logging_steps=1,
        log_completions=True,
        report_to=[],
        use_cpu=True,
        save_strategy="steps",
        save_steps=2,
        disable_tqdm=True,
        reward_weights=[1.0, 0.5],
    )
    callback = RolloutStudioCallback(studio=studio, project="agents", **FAST)
    GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[correct, short],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": [f"What is {a} + {a} ?" for a in range(4)]}),
        callbacks=[callback],
    ).train()

    run = Run.objects.get()
    assert run.status == RunStatus.SUCCEEDED and run.preset == "trl-grpo"
    keys = set(MetricPoint.objects.filter(run=run).values_list("key", flat=True))
    assert {
        "reward/mean",
        "reward/std",
        "criterion/correct",
        "criterion/short",
        "entropy",
        "clip_fraction",
        "response_length",
        "zero_variance_fraction",
    } <= keys
    trajectories = list(Trajectory.objects.filter(run=run))
    assert sorted({t.step for t in trajectories}) == [1, 2] and len(trajectories) == 8
    for t in trajectories:
        assert {c["name"]: c["weight"] for c in t.components} == {"correct": 1.0, "short": 0.5}
        assert math.isclose(t.reward, sum(c["weighted"] for c in t.components), abs_tol=1e-6)
        assert t.advantage is not None and t.prompt.startswith("What is")
    assert {(t.step, t.group_index) for t in trajectories} == {(s, g) for s in (1, 2) for g in (0, 1)}
    assert list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [2]

"""Checkpoints: keep-best-N pruning, and resume continuing exactly where a run stopped."""

from __future__ import annotations

import copy
import json

import torch

from trainers.learn.checkpoint import CheckpointRegistry, checkpoint_kind, load_trainer_state
from trainers.recipes.grpo import Trainer
from trainers.sdk.events import MemorySink


def test_registry_keeps_the_best_n_and_the_latest(tmp_path):
    registry = CheckpointRegistry(tmp_path, keep_best_n=2, metric="eval/reward/mean", mode="max")
    rewards = {1: 0.5, 2: 0.9, 3: 0.1, 4: 0.7, 5: 0.2}
    for step, reward in rewards.items():
        path = registry.path_for(step)
        path.mkdir()
        registry.add(step, path, {"eval/reward/mean": reward})
    assert [e.step for e in registry.entries] == [2, 4, 5]  # best two (0.9, 0.7) and the latest
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [
        "step-000002",
        "step-000004",
        "step-000005",
    ]
    assert registry.best().step == 2 and registry.latest().step == 5
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["best"].endswith("step-000002")
    assert [e.step for e in CheckpointRegistry(tmp_path, 2, "eval/reward/mean").entries] == [2, 4, 5]


def test_registry_min_mode_and_missing_metric(tmp_path):
    registry = CheckpointRegistry(tmp_path, keep_best_n=1, metric="loss", mode="min")
    for step, metrics in {1: {"loss": 0.3}, 2: {}, 3: {"loss": 0.1}, 4: {"loss": 0.5}}.items():
        registry.path_for(step).mkdir()
        registry.add(step, registry.path_for(step), metrics)
    assert [e.step for e in registry.entries] == [3, 4]


RESUME = {
    "max_steps": 2,
    "group_size": 4,
    "prompts_per_step": 1,
    "max_new_tokens": 10,
    "eval_tasks": 0,
    "checkpoint_every": 1,
    "learning_rate": 1e-4,
    "seed": 3,
}


def _step_metrics(sink: MemorySink, step: int) -> dict:
    return next(e["values"] for e in sink.of_type("metrics") if e["step"] == step and e["split"] == "train")


def test_resume_gives_the_same_next_step_as_an_uninterrupted_run(tiny, toy_env, tmp_path):
    model, tokenizer = tiny  # resume is plumbing: the tiny random Llama proves it in a second
    straight_sink = MemorySink()
    straight = Trainer(
        RESUME,
        sink=straight_sink,
        env_factory=toy_env,
        out_dir=tmp_path / "a",
        model=copy.deepcopy(model),
        tokenizer=tokenizer,
    )
    assert straight.run().status == "SUCCEEDED"
    step_one = tmp_path / "a" / "checkpoints" / "step-000001"
    assert checkpoint_kind(step_one) == "full"
    assert load_trainer_state(step_one)["step"] == 1
    assert [e["kind"] for e in straight_sink.of_type("checkpoint")] == ["full", "full"]
    assert _step_metrics(straight_sink, 2)["trained_sequences"] > 0  # the step really updated

    resumed_sink = MemorySink()
    resumed = Trainer(
        RESUME,
        sink=resumed_sink,
        env_factory=toy_env,
        out_dir=tmp_path / "b",
        resume_from=step_one,
        model=copy.deepcopy(model),
        tokenizer=tokenizer,
    )
    assert resumed.run().status == "SUCCEEDED"
    again, first = _step_metrics(resumed_sink, 2), _step_metrics(straight_sink, 2)
    assert again["loss"] == first["loss"] and again["reward/mean"] == first["reward/mean"]
    assert [e["step"] for e in resumed_sink.of_type("metrics")] == [2]
    straight_items = next(e for e in straight_sink.of_type("trajectories") if e["step"] == 2)["items"]
    resumed_items = resumed_sink.of_type("trajectories")[0]["items"]
    assert [i["turns"] for i in straight_items] == [i["turns"] for i in resumed_items]
    for (name, a), b in zip(
        straight.model.state_dict().items(), resumed.model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name


def test_lora_checkpoints_hold_the_adapters_and_a_merged_model_and_resume(tiny, toy_env, tmp_path):
    model, tokenizer = tiny  # resume is plumbing: the tiny random Llama proves it in a second
    config = {**RESUME, "max_steps": 1, "lora": {"enabled": True, "r": 4}}
    sink = MemorySink()
    trainer = Trainer(
        config,
        sink=sink,
        env_factory=toy_env,
        out_dir=tmp_path,
        model=copy.deepcopy(model),
        tokenizer=tokenizer,
    )
    trainer.run()
    path = tmp_path / "checkpoints" / "step-000001"
    assert checkpoint_kind(path) == "adapter" and (path / "adapter" / "adapter_model.safetensors").is_file()
    assert sink.of_type("checkpoint")[0]["kind"] == "adapter"
    resumed = Trainer(
        {**config, "max_steps": 2},
        env_factory=toy_env,
        resume_from=path,
        model=copy.deepcopy(model),
        tokenizer=tokenizer,
    )
    resumed.setup()
    assert resumed.step == 1
    trained = {k: v for k, v in trainer.model.state_dict().items() if "lora_" in k}
    loaded = resumed.model.state_dict()
    assert trained and all(torch.equal(v, loaded[k]) for k, v in trained.items())


def test_a_lora_checkpoint_is_a_model_another_run_starts_from(tiny, toy_env, tmp_path):
    """The demo trains LoRA: its checkpoint, named as another run's `model`, loads (fast tokenizer
    included) as the trained policy, adapters merged, even copied elsewhere (a download)."""
    import shutil

    from trainers.models import load_model, load_tokenizer, merged_state_dict

    model, tokenizer = tiny
    config = {**RESUME, "max_steps": 1, "lora": {"enabled": True, "r": 4}, "learning_rate": 1e-2}
    trainer = Trainer(
        config, env_factory=toy_env, out_dir=tmp_path / "run", model=copy.deepcopy(model), tokenizer=tokenizer
    )
    trainer.run()
    moved = shutil.copytree(tmp_path / "run" / "checkpoints" / "step-000001", tmp_path / "downloaded")
    assert (moved / "tokenizer.json").is_file() and (moved / "config.json").is_file()
    started = load_model(str(moved), "cpu", torch.float32)
    assert load_tokenizer(str(moved)).is_fast
    trained = merged_state_dict(trainer.model)
    loaded = started.state_dict()
    assert all(torch.equal(value, loaded[name]) for name, value in trained.items())
    base = model.state_dict()
    assert any(not torch.equal(base[name], loaded[name]) for name in base if "q_proj" in name)


def test_a_reward_model_embeds_with_a_lora_checkpoints_policy(tiny, toy_env, tmp_path):
    """Issue 35.1: reward-model training starts from a LoRA GRPO checkpoint as from any model — the frozen
    base that embeds the pairs is the checkpoint's merged policy, and the saved model names it."""
    from trainers.recipes.reward_model import train_reward_model

    model, tokenizer = tiny
    config = {**RESUME, "max_steps": 1, "lora": {"enabled": True, "r": 4}}
    trainer = Trainer(
        config, env_factory=toy_env, out_dir=tmp_path / "run", model=copy.deepcopy(model), tokenizer=tokenizer
    )
    trainer.run()
    checkpoint = tmp_path / "run" / "checkpoints" / "step-000001"
    pairs = [{"prompt": f"q{i}", "chosen": f"right {i}", "rejected": f"wrong {i}"} for i in range(6)]
    result = train_reward_model(
        pairs, out_dir=tmp_path / "rm", model=str(checkpoint), epochs=2, held_out_fraction=0.0, device="cpu"
    )
    assert result.n_train == 6
    saved = json.loads((tmp_path / "rm" / "reward_model.json").read_text())
    assert str(checkpoint) in json.dumps(saved)

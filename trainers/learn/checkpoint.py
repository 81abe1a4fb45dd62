"""Checkpoints that a run can resume from exactly, and the keep-best-N registry.

Layout of one checkpoint (`<out>/checkpoints/step-000050/`):

    model.safetensors, config.json, tokenizer files   a loadable HF model directory, whatever the run:
                          full fine-tuning's weights, or LoRA's adapters merged into the base weights, and
                          the fast tokenizer (tokenizer.json). Any run's `model` knob may name the
                          directory (DPO, GRPO, reward-model training, evaluation), here or after download.
    adapter/adapter_model.safetensors, adapter_config.json   LoRA: the adapters too (resume continues them)
    optimizer.pt          AdamW state (moments, step counts) and the LR scheduler state
    sharded/              a sharded learner's model and AdamW shards (torch.distributed.checkpoint)
    rng.pt                torch / python RNG states
    trainer_state.json    step, data position, policy version, metrics, best-metric history
    run_config.json       the resolved run config the checkpoint belongs to

Each checkpoint is written into a temporary sibling directory and renamed into place, so a crash
mid-save never leaves a checkpoint that looks complete. `<out>/checkpoints/index.json` lists the
kept checkpoints with their metrics; pruning keeps the best N by the named metric plus the latest.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

TRAINER_STATE = "trainer_state.json"
INDEX = "index.json"


def is_peft_model(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def rng_state() -> dict[str, Any]:
    return {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    path: str | Path,
    *,
    model: Any,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    trainer_state: dict[str, Any],
    run_config: dict[str, Any],
    extra: Callable[[Path], None] | None = None,
) -> Path:
    """Write a complete checkpoint at `path` (atomically). Returns the path.

    `extra(directory)` writes more into the checkpoint before it is renamed into place (the sharded
    learner's optimizer shards)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        save_as_model(staging, model, tokenizer)
        torch.save(
            {
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict() if scheduler is not None else None,
            },
            staging / "optimizer.pt",
        )
        torch.save(rng_state(), staging / "rng.pt")
        (staging / TRAINER_STATE).write_text(json.dumps(trainer_state, indent=2, default=str))
        (staging / "run_config.json").write_text(json.dumps(run_config, indent=2, default=str))
        if extra is not None:
            extra(staging)
        staging.chmod(0o755)
        if target.exists():  # re-saving the same step (e.g. the final step was also a periodic one)
            shutil.rmtree(target)
        os.rename(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def save_as_model(directory: Path, model: Any, tokenizer: Any) -> None:
    """Write `model` into `directory` as a model another run can start from: its weights (a LoRA
    model's adapters merged into the base weights; the adapters themselves under adapter/, for resume),
    config and tokenizer. A LoRA checkpoint that held only its adapters (and no tokenizer) was not a
    model: a DPO run started from the demo's GRPO checkpoint failed to load a tokenizer from it."""
    if is_peft_model(model):
        from trainers.models import merged_state_dict

        model.save_pretrained(directory / "adapter")
        model.get_base_model().save_pretrained(
            directory, state_dict=merged_state_dict(model), safe_serialization=True
        )
    else:
        model.save_pretrained(directory, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)  # a fast tokenizer writes tokenizer.json


def checkpoint_kind(path: str | Path) -> str:
    return "adapter" if (Path(path) / "adapter").is_dir() else "full"


def load_trainer_state(path: str | Path) -> dict[str, Any]:
    return json.loads((Path(path) / TRAINER_STATE).read_text())


def load_run_config(path: str | Path) -> dict[str, Any]:
    return json.loads((Path(path) / "run_config.json").read_text())


def load_weights(path: str | Path, model: Any) -> None:
    """Load a checkpoint's weights (full or adapter) into `model`, which must have the same shape."""
    from safetensors.torch import load_file

    path = Path(path)
    if checkpoint_kind(path) == "adapter":
        if not is_peft_model(model):
            raise ValueError(f"{path} holds LoRA adapters but the model has none (set lora.enabled)")
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, load_file(path / "adapter" / "adapter_model.safetensors"))
        return
    if is_peft_model(model):
        raise ValueError(f"{path} holds full weights but the model has LoRA adapters")
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(path.glob("*.safetensors")):
        state.update(load_file(shard))
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or [])
    if isinstance(getattr(model, "_tied_weights_keys", None), dict):
        tied = set(model._tied_weights_keys)
    really_missing = [k for k in missing if k not in tied and not k.endswith("lm_head.weight")]
    if really_missing or unexpected:
        raise ValueError(
            f"checkpoint {path} does not match the model: missing {really_missing[:5]}, "
            f"unexpected {unexpected[:5]}"
        )


def load_optimizer(path: str | Path, optimizer: torch.optim.Optimizer, scheduler: Any) -> None:
    state = torch.load(Path(path) / "optimizer.pt", weights_only=False)
    optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state.get("scheduler") is not None:
        scheduler.load_state_dict(state["scheduler"])


def load_rng(path: str | Path) -> None:
    set_rng_state(torch.load(Path(path) / "rng.pt", weights_only=False))


@dataclass
class CheckpointEntry:
    step: int
    path: str
    metrics: dict[str, float] = field(default_factory=dict)


class CheckpointRegistry:
    """The checkpoints of one run directory, pruned to the best N by a metric (plus the latest)."""

    def __init__(
        self, root: str | Path, keep_best_n: int = 3, metric: str = "reward/mean", mode: str = "max"
    ) -> None:
        self.root = Path(root)
        self.keep_best_n = keep_best_n
        self.metric = metric
        self.mode = mode
        self.entries: list[CheckpointEntry] = []
        index = self.root / INDEX
        if index.exists():
            self.entries = [CheckpointEntry(**e) for e in json.loads(index.read_text())["checkpoints"]]

    def path_for(self, step: int) -> Path:
        return self.root / f"step-{step:06d}"

    def add(self, step: int, path: str | Path, metrics: dict[str, float]) -> list[str]:
        """Record a new checkpoint, prune, persist the index; returns the paths removed."""
        self.entries = [e for e in self.entries if e.step != step]
        self.entries.append(CheckpointEntry(step=step, path=str(path), metrics=dict(metrics)))
        self.entries.sort(key=lambda e: e.step)
        removed = self.prune()
        self._write()
        return removed

    def _score(self, entry: CheckpointEntry) -> float:
        value = entry.metrics.get(self.metric)
        if value is None or not math.isfinite(value):
            return -math.inf
        return value if self.mode == "max" else -value

    def best(self) -> CheckpointEntry | None:
        scored = [e for e in self.entries if self.metric in e.metrics]
        return max(scored, key=lambda e: (self._score(e), e.step)) if scored else None

    def latest(self) -> CheckpointEntry | None:
        return self.entries[-1] if self.entries else None

    def prune(self) -> list[str]:
        if self.keep_best_n <= 0 or len(self.entries) <= self.keep_best_n:
            return []
        latest = self.entries[-1]
        ranked = sorted(self.entries, key=lambda e: (self._score(e), e.step), reverse=True)
        keep = {id(e) for e in ranked[: self.keep_best_n]} | {id(latest)}
        removed = [e for e in self.entries if id(e) not in keep]
        for entry in removed:
            shutil.rmtree(entry.path, ignore_errors=True)
        self.entries = [e for e in self.entries if id(e) in keep]
        return [e.path for e in removed]

    def _write(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        payload = {
            "metric": self.metric,
            "mode": self.mode,
            "checkpoints": [e.__dict__ for e in self.entries],
            "best": best.path if (best := self.best()) else None,
        }
        tmp = self.root / f".{INDEX}.tmp"
        tmp.write_text(json.dumps(payload, indent=2))
        os.replace(tmp, self.root / INDEX)


class RunCheckpoints:
    """A training run's checkpoints: what goes in one (weights, optimizer, RNG, the trainer's position, the
    learner shards' state), keep-best-N, the `checkpoint` event, and resuming from one."""

    def __init__(self, out_dir: Path, config: Mapping[str, Any]) -> None:
        # The run's config as a plain dict (stored in each checkpoint): any recipe's (GRPO's, DPO's knobs).
        self.config = dict(config)
        self.registry = CheckpointRegistry(
            out_dir / "checkpoints", config["keep_best_n"], config["best_metric"], config["best_metric_mode"]
        )

    def save(
        self,
        learner: Any,
        *,
        step: int,
        data_position: int,
        policy_version: int,
        metrics: dict[str, Any],
        emit: Callable[..., None],
        log: Callable[..., None],
    ) -> str:
        path = self.registry.path_for(step)
        kept = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}
        state = {
            "step": step,
            "data_position": data_position,
            "policy_version": policy_version,
            "metrics": kept,
        }
        save_checkpoint(
            path,
            model=learner.model,
            tokenizer=learner.tokenizer,
            optimizer=learner.optimizer,
            scheduler=learner.scheduler,
            trainer_state=state,
            run_config=self.config,
            extra=learner.shards.save if learner.shards is not None else None,
        )
        removed = self.registry.add(step, path, kept)
        emit(
            "checkpoint", step=step, path=str(path), metrics=kept, kind="adapter" if learner.lora else "full"
        )
        for old in removed:
            log(
                f"removed checkpoint {old} (keep_best_n={self.config['keep_best_n']} by {self.config['best_metric']})",
                "debug",
            )
        return str(path)


def resume(path: Path, learner: Any) -> dict[str, Any]:
    """Restore `learner`'s weights and optimizer and this process's RNG from a checkpoint; return the
    trainer's state there (step, data position, policy version, metrics)."""
    load_weights(path, learner.model)
    load_optimizer(path, learner.optimizer, learner.scheduler)
    load_rng(path)
    return load_trainer_state(path)

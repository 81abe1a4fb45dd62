"""DPO on a preference dataset, with TRL's DPOTrainer (we configure and report; TRL trains).

A DPO run trains the policy directly on preference pairs — no reward model in between. The pairs are
rows in TRL's preference format, conversational (`prompt` as chat messages, `chosen` / `rejected` as
the assistant's messages, tool calls and results included) or plain text; the dashboard hands the rows
of a preference snapshot (`webapp.review.exports.dpo_records`), a script may hand any JSONL it has.

    from trainers.learn.dpo import train_dpo
    result = train_dpo(rows, {"max_steps": 20, "beta": 0.1}, out_dir="runs/dpo",
                       callbacks=[RolloutStudioCallback(run)])

Checkpoints are 🤗 Trainer checkpoints (`<out_dir>/checkpoint-<step>`: weights, tokenizer, optimizer,
scheduler, RNG, data position): `resume_from` one continues the same run exactly, and the directory is a
model a GRPO run can start from (its `model` knob names the path). Reporting, cancel and checkpoint
registration go through `trainers.integrations.trl.RolloutStudioCallback`, as for any TRL run.

`DPO_SCHEMA` (no torch) is what the dashboard's form and API validate; `train_dpo` imports torch,
transformers and trl only when called.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainers.kinds import config_with_defaults, format_errors, validate_config
from trainers.models import DEFAULT_MODEL

log = logging.getLogger(__name__)

LOSS_TYPES = ("sigmoid", "ipo", "hinge", "robust")
# The columns DPOTrainer reads; the rest of a row (rewards, provenance) stays out of its dataset.
PREFERENCE_COLUMNS = ("prompt", "chosen", "rejected")
MIN_PAIRS_TO_HOLD_OUT = 5  # fewer pairs all train: one held-out pair would say little and cost a fifth

DPO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "model": {
            "type": "string",
            "minLength": 1,
            "default": DEFAULT_MODEL,
            "title": "Model",
            "description": f'"{DEFAULT_MODEL}" is the bundled SmolLM2-135M-Instruct; otherwise a local model '
            "directory (a checkpoint of another run) or a Hugging Face id from the local cache.",
        },
        "beta": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 10,
            "default": 0.1,
            "title": "Beta",
            "description": "How far the policy may move from the reference model (higher: closer).",
        },
        "loss_type": {
            "type": "string",
            "enum": list(LOSS_TYPES),
            "default": "sigmoid",
            "title": "Loss",
            "description": "sigmoid: the DPO paper's loss; ipo, hinge, robust: TRL's variants.",
        },
        "learning_rate": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 1,
            "default": 5e-6,
            "title": "Learning rate",
        },
        "max_steps": {
            "type": "integer",
            "minimum": 1,
            "maximum": 100000,
            "default": 20,
            "title": "Steps",
            "description": "Optimizer steps (the dataset is repeated as needed).",
        },
        "batch_size": {
            "type": "integer",
            "minimum": 1,
            "maximum": 1024,
            "default": 4,
            "title": "Batch size (pairs)",
        },
        "gradient_accumulation_steps": {
            "type": "integer",
            "minimum": 1,
            "maximum": 1024,
            "default": 1,
            "title": "Gradient accumulation",
        },
        "max_length": {
            "type": "integer",
            "minimum": 16,
            "maximum": 32768,
            "default": 512,
            "title": "Max tokens per pair side",
            "description": "Prompt plus response; longer ones are truncated.",
        },
        "save_every": {
            "type": "integer",
            "minimum": 0,
            "maximum": 100000,
            "default": 10,
            "title": "Checkpoint every (steps)",
            "description": "0: only at the end.",
        },
        "eval_fraction": {
            "type": "number",
            "minimum": 0,
            "maximum": 0.5,
            "default": 0.2,
            "title": "Held-out pairs",
            "description": "The share of the pairs (by prompt) kept out of training, to measure the preference "
            f"accuracy on pairs the policy never saw (eval/dpo/accuracy); only with {MIN_PAIRS_TO_HOLD_OUT} "
            "pairs or more. 0: none.",
        },
        "seed": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1, "default": 0, "title": "Seed"},
        "device": {
            "type": "string",
            "pattern": r"^(auto|cpu|cuda(:\d+)?|mps)$",
            "default": "auto",
            "title": "Device",
        },
    },
}


class DPOConfigError(ValueError):
    pass


def dpo_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The config with defaults filled in; DPOConfigError naming every problem."""
    config = dict(config or {})
    errors = validate_config(DPO_SCHEMA, config)
    if errors:
        raise DPOConfigError(f"invalid DPO config: {format_errors(errors)}")
    return config_with_defaults(DPO_SCHEMA, config)


def held_out_split(
    rows: list[dict[str, Any]], fraction: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(training rows, held-out rows): about `fraction` of the prompts held out with all their pairs (a
    prompt's pairs never sit on both sides), chosen by a stable hash of the prompt; all rows train when
    there are fewer than MIN_PAIRS_TO_HOLD_OUT or the split would leave a side empty."""
    if fraction <= 0 or len(rows) < MIN_PAIRS_TO_HOLD_OUT:
        return rows, []
    import hashlib
    import json

    def bucket(row: dict[str, Any]) -> float:
        digest = hashlib.sha256(json.dumps(row["prompt"], sort_keys=True).encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    held = [row for row in rows if bucket(row) < fraction]
    train = [row for row in rows if bucket(row) >= fraction]
    if not held or not train:  # few prompts: hold out the one that hashes lowest
        lowest = min(bucket(row) for row in rows)
        held = [row for row in rows if bucket(row) == lowest]
        train = [row for row in rows if bucket(row) != lowest]
    return (train, held) if train and held else (rows, [])


def preference_rows(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The prompt / chosen / rejected of each record, checked: all three strings (text format) or all
    three lists of {role, content} messages (conversational format), the same format in every row."""
    rows: list[dict[str, Any]] = []
    shape = None
    for index, record in enumerate(records):
        try:
            row = {key: record[key] for key in PREFERENCE_COLUMNS}
        except KeyError as exc:
            raise DPOConfigError(f"row {index}: needs prompt, chosen and rejected ({exc} missing)") from None
        kinds = {
            "text" if isinstance(v, str) else "messages" if _is_messages(v) else "?" for v in row.values()
        }
        if len(kinds) != 1 or "?" in kinds:
            raise DPOConfigError(
                f"row {index}: prompt, chosen and rejected must all be strings or all be chat messages"
            )
        row_shape = kinds.pop()
        if shape is not None and row_shape != shape:
            raise DPOConfigError(
                f"row {index} is {row_shape}, earlier rows are {shape}: one format per dataset"
            )
        shape = row_shape
        if row_shape == "messages":
            row = {key: [_clean_message(m) for m in value] for key, value in row.items()}
        rows.append(row)
    if not rows:
        raise DPOConfigError("no preference pairs to train on")
    return rows


def _is_messages(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, Mapping) and isinstance(m.get("role"), str) for m in value)
    )


def _clean_message(message: Mapping[str, Any]) -> dict[str, Any]:
    # Every row's messages get the same keys (an Arrow column needs one struct type); a tool result
    # keeps its tool's name.
    return {
        "role": message["role"],
        "content": str(message.get("content") or ""),
        "name": message.get("name"),
    }


@dataclass
class DPOResult:
    out_dir: Path
    steps: int
    cancelled: bool
    metrics: dict[str, float] = field(default_factory=dict)  # the last logged values, TRL's names
    checkpoints: list[str] = field(default_factory=list)


def _checkpointing_argument(config_class: Any) -> str:
    """The training arguments' name for activation checkpointing: `activation_checkpointing` in the
    transformers this venv resolves (the old name warns that it goes in v6), `gradient_checkpointing` in
    older ones (the GPU image's)."""
    names = {argument.name for argument in dataclasses.fields(config_class)}
    return "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"


def train_dpo(
    records: Sequence[Mapping[str, Any]],
    config: Mapping[str, Any] | None = None,
    *,
    out_dir: str | Path,
    callbacks: Sequence[Any] = (),
    resume_from: str | None = None,
) -> DPOResult:
    """Train the policy on `records` with TRL's DPOTrainer; checkpoints under `out_dir`.

    `resume_from`: a checkpoint directory of an earlier run on the same data and config (weights,
    optimizer, scheduler, RNG and data position are restored, and training continues at its step)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import DPOConfig, DPOTrainer

    from trainers.models import model_dir, policy_precision, resolve_device

    knobs = dpo_config(config)
    rows, held_out = held_out_split(preference_rows(records), knobs["eval_fraction"])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    device = resolve_device(knobs["device"])
    path = model_dir(knobs["model"])
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # The GRPO trainer's rule for `dtype: auto`: fp32 weights, and TRL's bf16 (autocast) on CUDA only.
    precision = policy_precision("auto", device)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=precision.weights)

    class _Last(TrainerCallback):
        def __init__(self) -> None:
            self.metrics: dict[str, float] = {}

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.metrics.update({k: float(v) for k, v in (logs or {}).items() if isinstance(v, (int, float))})

    class _SaveOnStop(TrainerCallback):
        """A run stopped early (cancel) still leaves a checkpoint of what it trained, registered
        like the others (the save goes through the Trainer, so on_save callbacks see it)."""

        def on_step_end(self, args, state, control, **kwargs):
            if control.should_training_stop:
                control.should_save = True

    last = _Last()
    no_checkpointing: dict[str, Any] = {_checkpointing_argument(DPOConfig): False}
    args = DPOConfig(
        output_dir=str(out),
        beta=knobs["beta"],
        loss_type=[knobs["loss_type"]],
        learning_rate=knobs["learning_rate"],
        max_steps=knobs["max_steps"],
        per_device_train_batch_size=knobs["batch_size"],
        gradient_accumulation_steps=knobs["gradient_accumulation_steps"],
        max_length=knobs["max_length"],
        seed=knobs["seed"],
        data_seed=knobs["seed"],
        logging_steps=1,
        save_strategy="steps",
        save_steps=knobs["save_every"] or knobs["max_steps"],
        save_only_model=False,
        # The held-out pairs are scored whenever a checkpoint is saved (and so at the end): TRL logs their
        # rewards/accuracies as eval_*, which the callback reports as eval/dpo/accuracy and the rest.
        eval_strategy="steps" if held_out else "no",
        eval_steps=knobs["save_every"] or knobs["max_steps"],
        per_device_eval_batch_size=knobs["batch_size"],
        report_to=[],
        use_cpu=device == "cpu",
        dataloader_num_workers=0,
        dataset_num_proc=None,
        disable_tqdm=True,
        # A 135M model fits; checkpointing only slows the CPU down. (transformers renamed the argument;
        # images with an older transformers still know it by its old name.)
        **no_checkpointing,
        # TRL turns bf16 autocast on by default, on the CPU too, where a CPU without bf16 units (AVX2)
        # then runs every matrix product in torch's fallback kernel: ~7× slower than float32, and a
        # default-sized DPO step on the bundled model took minutes. bf16 where the trainer's GRPO uses it.
        bf16=precision.autocast_dtype is torch.bfloat16,
    )
    trainer = DPOTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        eval_dataset=Dataset.from_list(held_out) if held_out else None,
        processing_class=tokenizer,
        callbacks=[last, *callbacks, _SaveOnStop()],
    )
    output = trainer.train(resume_from_checkpoint=resume_from)
    state = trainer.state
    cancelled = (
        bool(getattr(trainer.control, "should_training_stop", False)) and state.global_step < state.max_steps
    )
    metrics = {**last.metrics, "train_loss": float(output.training_loss)}
    checkpoints = sorted(str(p) for p in out.glob("checkpoint-*"))
    return DPOResult(out, state.global_step, cancelled, metrics, checkpoints)


__all__ = ["DPO_SCHEMA", "DPOConfigError", "DPOResult", "dpo_config", "preference_rows", "train_dpo"]

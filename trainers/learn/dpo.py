"""DPO's parts (the recipe is `trainers.recipes.dpo.train_dpo`): its knobs (`DPO_SCHEMA`, no torch: what the
dashboard's form and API validate; `dpo_config`), the preference rows in TRL's format (`preference_rows`) and
their held-out split (`held_out_split`). The arithmetic of a pair (tokens, log-probs, TRL's losses) is
`trainers.learn.pairs`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from trainers.kinds import config_with_defaults, format_errors, validate_config
from trainers.learn.pairs import (
    LOSS_TYPES,
)
from trainers.models import DEFAULT_MODEL

log = logging.getLogger(__name__)

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
            "default": 5e-5,
            "title": "Learning rate",
            "description": "AdamW's, decaying linearly to 0 over the steps (TRL's default schedule). LoRA "
            "adapters take a larger one than full fine-tuning (there ~5e-6).",
        },
        "lora_r": {
            "type": "integer",
            "minimum": 0,
            "maximum": 512,
            "default": 16,
            "title": "LoRA rank",
            "description": "Train low-rank adapters on the attention projections (the reference is the same "
            "weights with the adapters off). 0: full fine-tuning.",
        },
        "lora_alpha": {
            "type": "number",
            "minimum": 0,
            "maximum": 4096,
            "default": 32,
            "title": "LoRA alpha",
            "description": "Adapter scaling numerator (scale = alpha / rank).",
        },
        "activation_checkpointing": {
            "type": "boolean",
            "default": False,
            "title": "Recompute activations",
            "description": "Keep only each layer's input and the LM head's in chunks of tokens, computing "
            "the rest again in the backward pass: less memory for long responses, ~30 % more time.",
        },
        "micro_batch_tokens": {
            "type": "integer",
            "minimum": 0,
            "maximum": 1_000_000,
            # 256, not the GRPO learner's 512: the same step time on 8 demo-like pairs (5.1–5.6 s either way,
            # 2026-12-04), 2.1 GB peak instead of 2.9 GB, and progress after every pair (docs/trainers.md).
            "default": 256,
            "title": "Tokens per pass",
            "description": "Each forward and backward pass holds whole pairs with at most this many tokens "
            "after the prompt start they all share (encoded once per step): bounds the activation memory, "
            "same result. 0: all of a step's pairs in one pass.",
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
            "description": "Pairs per optimizer step = batch size × this (the passes hold at most "
            "'Tokens per pass' either way: memory does not grow with either).",
        },
        "max_length": {
            "type": "integer",
            "minimum": 16,
            "maximum": 32768,
            "default": 512,
            "title": "Max tokens per pair side",
            "description": "Prompt plus response; a longer response is cut at its end (keeping at least "
            "half of this), then the prompt at its start.",
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


__all__ = [
    "DPO_SCHEMA",
    "MIN_PAIRS_TO_HOLD_OUT",
    "PREFERENCE_COLUMNS",
    "DPOConfigError",
    "dpo_config",
    "held_out_split",
    "preference_rows",
]

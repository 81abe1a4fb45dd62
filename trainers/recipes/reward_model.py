"""The reward-model recipe: a Bradley–Terry head on a frozen base model's embeddings, from preference pairs.

Read top to bottom: split the pairs by prompt (held-out prompts never train), embed every distinct text
once with the frozen base (the mean-pooled last hidden state, as the `learned_reward` criterion scores),
fit the head on the training pairs, score every text with the folded head, save the model where the
criterion loads it. The parts live in `trainers.learn.reward_training`; the dashboard's worker task
(`workers.reward_execution`) and `python -m trainers` call `train_reward_model`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trainers.learn.reward_training import (
    CURVE_FILE,
    DEFAULT_TEMPLATE,
    HEADS,
    FittedHead,
    PreferenceDataError,
    PreferencePair,
    ProgressFn,
    RewardTrainingResult,
    as_pairs,
    base_model_reference,
    distinct_texts,
    embed_texts,
    fit_head,
    load_encoder,
    split_by_prompt,
    split_stats,
    training_score_scale,
)
from trainers.models import DEFAULT_MODEL
from trainers.rubrics.reward_model import save_reward_model

log = logging.getLogger(__name__)


def train_reward_model(
    pairs: Iterable[Mapping[str, Any] | PreferencePair],
    *,
    out_dir: str | Path,
    model: str = DEFAULT_MODEL,
    seed: int = 0,
    epochs: int = 100,
    lr: float = 1e-2,
    weight_decay: float = 1e-2,
    batch_size: int = 32,
    held_out_fraction: float = 0.2,
    head: str = "linear",
    hidden_units: int = 64,
    max_length: int = 1024,
    input_template: str = DEFAULT_TEMPLATE,
    response_text: str = "transcript",
    device: str = "auto",
    embed_batch_size: int = 16,
    provenance: Mapping[str, Any] | None = None,
    progress: ProgressFn | None = None,
    encoder: tuple[Any, Any] | None = None,
) -> RewardTrainingResult:
    """Train a Bradley–Terry reward model on `pairs` and save it in `out_dir`.

    `input_template` renders the text that is scored ({prompt}, {response}); `response_text` records
    what the pairs' responses are ("transcript", as `trainers.texts.trajectory_text` renders them, or
    "final_answer"), so the `learned_reward` criterion renders trajectories the same way.
    `progress(phase, fraction)` is called as work advances (phase: "load", "embed", "fit", "save").
    `encoder` reuses an already loaded (model, tokenizer) pair from `load_encoder`."""
    import torch

    started = time.perf_counter()
    data = as_pairs(pairs)
    if len(data) < 2:
        raise PreferenceDataError(
            f"need at least 2 preference pairs to train a reward model, got {len(data)}"
        )
    if head not in HEADS:
        raise ValueError(f"unknown head {head!r}; choose one of {', '.join(HEADS)}")
    base_reference = base_model_reference(model)
    train_index, eval_index = split_by_prompt(data, held_out_fraction, seed)
    torch.manual_seed(seed)
    report = progress or (lambda phase, fraction: None)

    report("load", 0.0)
    base, tokenizer = encoder if encoder is not None else load_encoder(model, device)
    loaded = time.perf_counter()

    texts, chosen_ids, rejected_ids = distinct_texts(data, input_template)
    report("embed", 0.0)
    embeddings = embed_texts(
        base,
        tokenizer,
        texts,
        max_length=max_length,
        batch_size=embed_batch_size,
        progress=lambda done, total: report("embed", done / total),
    )
    embedded = time.perf_counter()
    log.info("embedded %d distinct texts in %.1fs", len(texts), embedded - loaded)

    def rows(indices: list[int], ids: list[int]) -> Any:
        return embeddings[[ids[i] for i in indices]] if indices else embeddings[:0]

    fitted, curve = fit_head(
        rows(train_index, chosen_ids),
        rows(train_index, rejected_ids),
        eval_chosen=rows(eval_index, chosen_ids),
        eval_rejected=rows(eval_index, rejected_ids),
        head=head,
        hidden_units=hidden_units,
        epochs=epochs,
        lr=lr,
        weight_decay=weight_decay,
        batch_size=batch_size,
        seed=seed,
        progress=lambda epoch, total: report("fit", epoch / total),
    )
    fitted_at = time.perf_counter()

    # The final numbers from the saved (folded) head on raw embeddings: what the criterion will compute.
    scores = fitted.score(embeddings)
    train_loss, train_accuracy = split_stats(scores, chosen_ids, rejected_ids, train_index)
    held_out_loss, held_out_accuracy = (
        split_stats(scores, chosen_ids, rejected_ids, eval_index) if eval_index else (None, None)
    )
    result = RewardTrainingResult(
        path=Path(out_dir),
        held_out_accuracy=held_out_accuracy,
        train_accuracy=train_accuracy,
        n_train=len(train_index),
        n_eval=len(eval_index),
        curve=curve,
        held_out_loss=held_out_loss,
        train_loss=train_loss,
        head=head,
        seconds={"load": loaded - started, "embed": embedded - loaded, "fit": fitted_at - embedded},
        score_scale=training_score_scale(scores, chosen_ids, rejected_ids, train_index),
    )

    report("save", 0.0)
    knobs: dict[str, Any] = {"seed": seed, "epochs": epochs, "lr": lr, "weight_decay": weight_decay}
    knobs["batch_size"] = batch_size
    knobs |= {"held_out_fraction": held_out_fraction, "head": head}
    knobs["hidden_units"] = hidden_units if head == "mlp" else None
    _save(result, fitted, model, base_reference, max_length, input_template, response_text, provenance, knobs)
    result.seconds["total"] = time.perf_counter() - started
    report("save", 1.0)
    return result


def _save(
    result: RewardTrainingResult,
    fitted: FittedHead,
    model: str,
    base_reference: tuple[str, str | None],
    max_length: int,
    input_template: str,
    response_text: str,
    provenance: Mapping[str, Any] | None,
    knobs: dict[str, Any],
) -> None:
    """The model in the `trainers.rubrics.reward_model` format (what it was trained from and with in its
    provenance), and its learning curve beside it."""
    base_path, base_gguf = base_reference
    save_reward_model(
        result.path,
        weight=fitted.weight.numpy(),
        bias=fitted.bias,
        hidden_weight=None if fitted.hidden_weight is None else fitted.hidden_weight.numpy(),
        hidden_bias=None if fitted.hidden_bias is None else fitted.hidden_bias.numpy(),
        base_model_path=base_path,
        gguf_file=base_gguf,
        max_length=max_length,
        input_template=input_template,
        response_text=response_text,
        score_scale=result.score_scale,
        provenance={
            **dict(provenance or {}),
            "trained_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "base_model": model,
            "n_pairs": result.n_train + result.n_eval,
            "n_train": result.n_train,
            "n_eval": result.n_eval,
            "held_out_accuracy": result.held_out_accuracy,
            "train_accuracy": result.train_accuracy,
            "training": knobs,
        },
    )
    (result.path / CURVE_FILE).write_text(json.dumps(result.curve))

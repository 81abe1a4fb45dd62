"""Train a learned reward model (Bradley–Terry) from preference pairs.

A pair is `{"prompt", "chosen", "rejected"}` (extra keys are ignored): the annotator preferred the
response `chosen` to `rejected` for `prompt`. The frozen base model (the default policy model unless
told otherwise) embeds every distinct text once — the mean-pooled last hidden state, exactly as the
`learned_reward` criterion does when it scores — and a small head on those embeddings is trained with
the Bradley–Terry loss `-log σ(r(chosen) − r(rejected))`. Training the head takes seconds; embedding
is most of the cost, and it is done once, batched, under `torch.no_grad`.

Held-out pairs are split off by prompt (pairs that share a prompt fall on the same side), so the
reported held-out accuracy measures preferences on prompts the head never saw. The same seed gives
the same split, the same head and the same numbers.

The result is written in the `trainers.rubrics.reward_model` format (reward_model.json +
head.safetensors), which the `learned_reward` rubric criterion loads. Feature standardisation is
folded into the head's first layer, so the saved head reads raw embeddings. The bias centres the
training texts' scores at 0 (the Bradley–Terry loss does not determine it).

No Django here: the dashboard's worker task calls `train_reward_model` with pairs it read itself.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trainers.models import BUNDLED_GGUF, DEFAULT_MODEL, resolve_model_source
from trainers.rubrics.reward_model import BUILTIN_SMOLLM2, SMOLLM2_GGUF, save_reward_model
from trainers.sdk.cancel import check_cancel

log = logging.getLogger(__name__)

HEADS = ("linear", "mlp")
CURVE_FILE = "training_curve.json"
DEFAULT_TEMPLATE = "{prompt}\n\n{response}"

ProgressFn = Callable[[str, float], None]

# The knobs a user may set (the dashboard validates its form against this; no torch needed).
TRAINING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "head": {
            "type": "string",
            "enum": list(HEADS),
            "default": "linear",
            "title": "Head",
            "description": "linear: one weight per embedding dimension; mlp: one hidden ReLU layer.",
        },
        "hidden_units": {
            "type": "integer",
            "minimum": 1,
            "maximum": 1024,
            "default": 64,
            "title": "Hidden units (mlp)",
        },
        "epochs": {"type": "integer", "minimum": 1, "maximum": 5000, "default": 100, "title": "Epochs"},
        "lr": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 1,
            "default": 0.01,
            "title": "Learning rate",
        },
        "weight_decay": {
            "type": "number",
            "minimum": 0,
            "maximum": 10,
            "default": 0.01,
            "title": "Weight decay",
        },
        "batch_size": {
            "type": "integer",
            "minimum": 1,
            "maximum": 4096,
            "default": 32,
            "title": "Batch size (pairs)",
        },
        "held_out_fraction": {
            "type": "number",
            "minimum": 0,
            "maximum": 0.5,
            "default": 0.2,
            "title": "Held-out fraction",
            "description": "Share of pairs (whole prompts) kept for evaluation.",
        },
        "seed": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1, "default": 0, "title": "Seed"},
        "max_length": {
            "type": "integer",
            "minimum": 16,
            "maximum": 8192,
            "default": 1024,
            "title": "Max tokens per text",
        },
    },
}


@dataclass(frozen=True)
class PreferencePair:
    prompt: str
    chosen: str
    rejected: str


@dataclass
class RewardTrainingResult:
    path: Path
    held_out_accuracy: float | None  # None when nothing was held out
    train_accuracy: float
    n_train: int
    n_eval: int
    curve: list[dict[str, float]] = field(default_factory=list)
    held_out_loss: float | None = None
    train_loss: float = 0.0
    seconds: dict[str, float] = field(default_factory=dict)  # load, embed, fit, total
    head: str = "linear"
    score_scale: dict[str, float] = field(default_factory=dict)  # raw-score mean and std on training texts

    def metrics(self) -> dict[str, Any]:
        """A JSON-ready summary (no curve)."""
        data = asdict(self)
        data.pop("curve")
        data["path"] = str(self.path)
        return data


class PreferenceDataError(ValueError):
    """The pairs cannot train a reward model (too few, malformed)."""


def as_pairs(pairs: Iterable[Mapping[str, Any] | PreferencePair]) -> list[PreferencePair]:
    """Validate pairs; drops none silently — a malformed pair is an error naming its position."""
    out: list[PreferencePair] = []
    for index, pair in enumerate(pairs):
        if isinstance(pair, PreferencePair):
            out.append(pair)
            continue
        try:
            prompt, chosen, rejected = pair["prompt"], pair["chosen"], pair["rejected"]
        except (KeyError, TypeError) as exc:
            raise PreferenceDataError(
                f"pair {index}: needs prompt, chosen and rejected ({exc!r} missing)"
            ) from None
        if not all(isinstance(value, str) for value in (prompt, chosen, rejected)):
            raise PreferenceDataError(f"pair {index}: prompt, chosen and rejected must be strings")
        out.append(PreferencePair(prompt, chosen, rejected))
    return out


def split_by_prompt(
    pairs: Sequence[PreferencePair], held_out_fraction: float, seed: int
) -> tuple[list[int], list[int]]:
    """Indices of training and held-out pairs. Whole prompts are held out (about `held_out_fraction`
    of the pairs); with a single prompt, single pairs are. At least one pair always trains."""
    if not 0.0 <= held_out_fraction < 1.0:
        raise ValueError("held_out_fraction must be in [0, 1)")
    n = len(pairs)
    target = round(n * held_out_fraction)
    if held_out_fraction > 0 and n >= 2:
        target = min(max(target, 1), n - 1)
    if target == 0:
        return list(range(n)), []
    rng = random.Random(seed)
    by_prompt: dict[str, list[int]] = {}
    for index, pair in enumerate(pairs):
        by_prompt.setdefault(pair.prompt, []).append(index)
    groups = list(by_prompt.values()) if len(by_prompt) > 1 else [[i] for i in range(n)]
    rng.shuffle(groups)
    held: list[int] = []
    for group in groups:
        if len(held) >= target:
            break
        if len(held) + len(group) > n - 1:  # keep something to train on
            continue
        held.extend(group)
    held_set = set(held)
    return [i for i in range(n) if i not in held_set], sorted(held)


def base_model_reference(model: str) -> tuple[str, str | None]:
    """How reward_model.json names the base model: `builtin:…` for the bundled default, else an
    absolute local path (the workers must see the same path)."""
    if model == DEFAULT_MODEL or (model in BUNDLED_GGUF and BUNDLED_GGUF[model][1] == SMOLLM2_GGUF):
        return BUILTIN_SMOLLM2, None
    source = resolve_model_source(model)
    if source.kind == "hub":
        raise ValueError(
            f"A reward model's base must be a local model directory or GGUF file, not a hub id ({model!r})."
        )
    return str(Path(source.path).resolve()), source.gguf_file


def load_encoder(model: str = DEFAULT_MODEL, device: str = "auto") -> tuple[Any, Any]:
    """The frozen base model (fp32, eval mode) and a right-padding tokenizer, as the criterion loads them."""
    from trainers.models import load_model, load_tokenizer

    encoder = load_model(model, device=device, dtype="float32").eval()
    for parameter in encoder.parameters():
        parameter.requires_grad_(False)
    tokenizer = load_tokenizer(model)
    tokenizer.padding_side = "right"  # see trainers.rubrics.reward_model.load_encoder
    return encoder, tokenizer


def embed_texts(
    encoder: Any,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    max_length: int = 1024,
    batch_size: int = 16,
    progress: Callable[[int, int], None] | None = None,
) -> Any:
    """[len(texts), hidden] float32 CPU tensor of mean-pooled last hidden states.

    Texts are batched by length (less padding), and results returned in the input order. `progress(done,
    total)` after each batch: embedding is most of a training's time, and the page must not sit still."""
    import torch

    from trainers.rollout.backends.transformers_backend import checking_cancel
    from trainers.rubrics.reward_model import mean_pooled_embeddings

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = torch.empty(len(texts), encoder.config.hidden_size, dtype=torch.float32)
    # A batch of long texts takes many seconds on a busy CPU: a cancel is checked before every decoder
    # layer too, not only between batches (trainers.sdk.cancel).
    with checking_cancel(encoder):
        for start in range(0, len(order), batch_size):
            check_cancel()  # between batches
            chunk = order[start : start + batch_size]
            out[chunk] = mean_pooled_embeddings(encoder, tokenizer, [texts[i] for i in chunk], max_length)
            if progress is not None:
                progress(start + len(chunk), len(texts))
    return out


@dataclass
class FittedHead:
    """A head over raw embeddings: `weight · relu(hidden_weight · x + hidden_bias) + bias`, or
    `weight · x + bias` without a hidden layer."""

    weight: Any
    bias: float
    hidden_weight: Any | None = None
    hidden_bias: Any | None = None

    def score(self, embeddings: Any) -> Any:
        x = embeddings
        if self.hidden_weight is not None:
            x = (x @ self.hidden_weight.T + self.hidden_bias).clamp(min=0.0)
        return x @ self.weight + self.bias


def pairwise_stats(chosen_scores: Any, rejected_scores: Any) -> tuple[float, float]:
    """(Bradley–Terry loss, accuracy) with ties counted as half right."""
    import torch.nn.functional as F

    if chosen_scores.numel() == 0:
        return float("nan"), float("nan")
    margin = chosen_scores - rejected_scores
    loss = float(-F.logsigmoid(margin).mean())
    accuracy = float(((margin > 0).float() + 0.5 * (margin == 0).float()).mean())
    return loss, accuracy


def fit_head(
    chosen: Any,
    rejected: Any,
    *,
    eval_chosen: Any = None,
    eval_rejected: Any = None,
    head: str = "linear",
    hidden_units: int = 64,
    epochs: int = 100,
    lr: float = 1e-2,
    weight_decay: float = 1e-2,
    batch_size: int = 32,
    seed: int = 0,
    curve_points: int = 100,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[FittedHead, list[dict[str, float]]]:
    """Train a Bradley–Terry head on embedding pairs ([n, hidden] tensors: chosen[i] ≻ rejected[i]).

    Features are standardised with the training texts' mean and spread (folded into the returned head).
    The linear head is L2-regularised logistic regression on the score differences — convex, so it is
    solved with full-batch L-BFGS from zero (one iteration per "epoch"; `weight_decay` is the L2
    coefficient; `lr` and `batch_size` do not apply). Adam on it moves every coordinate at the same
    rate and needs many more epochs to stop rewarding noise dimensions (measured: 0.80 vs 0.90
    held-out on a 32-d toy set). The MLP head trains with AdamW on shuffled mini-batches from a seeded
    initialisation. Returns the head and a learning curve (≤ `curve_points` points)."""
    import torch
    import torch.nn.functional as F

    if head not in HEADS:
        raise ValueError(f"unknown head {head!r}; choose one of {', '.join(HEADS)}")
    generator = torch.Generator().manual_seed(seed)
    all_train = torch.cat([chosen, rejected])
    mean = all_train.mean(dim=0)
    std = all_train.std(dim=0, unbiased=False).clamp(min=1e-6)

    def standard(x: Any) -> Any:
        return (x - mean) / std

    zc, zr = standard(chosen), standard(rejected)
    has_eval = eval_chosen is not None and len(eval_chosen) > 0
    ec, er = (standard(eval_chosen), standard(eval_rejected)) if has_eval else (None, None)

    dim = chosen.shape[1]
    if head == "linear":
        layers = torch.nn.Linear(dim, 1)
        torch.nn.init.zeros_(layers.weight)
        torch.nn.init.zeros_(layers.bias)
        net: Any = layers  # a Linear here, a Sequential below
        optimizer: Any = torch.optim.LBFGS(
            net.parameters(), lr=1.0, max_iter=1, line_search_fn="strong_wolfe"
        )
    else:
        first, last = torch.nn.Linear(dim, hidden_units), torch.nn.Linear(hidden_units, 1)
        with torch.no_grad():
            bound = 1 / math.sqrt(dim)
            first.weight.uniform_(-bound, bound, generator=generator)
            first.bias.uniform_(-bound, bound, generator=generator)
            last.weight.uniform_(
                -1 / math.sqrt(hidden_units), 1 / math.sqrt(hidden_units), generator=generator
            )
            last.bias.zero_()
        net = torch.nn.Sequential(first, torch.nn.ReLU(), last)
        optimizer = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=weight_decay)

    def bt_loss(c: Any, r: Any) -> Any:
        return -F.logsigmoid(net(c).squeeze(-1) - net(r).squeeze(-1)).mean()

    n = zc.shape[0]
    record_every = max(1, epochs // max(1, curve_points))
    curve: list[dict[str, float]] = []
    for epoch in range(1, epochs + 1):
        check_cancel()
        net.train()
        if head == "linear":

            def closure() -> Any:
                optimizer.zero_grad()
                loss = bt_loss(zc, zr) + 0.5 * weight_decay * net.weight.pow(2).sum()
                loss.backward()
                return loss

            optimizer.step(closure)
        else:
            permutation = torch.randperm(n, generator=generator)
            for start in range(0, n, batch_size):
                index = permutation[start : start + batch_size]
                loss = bt_loss(zc[index], zr[index])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        if epoch % record_every == 0 or epoch == epochs:
            net.eval()
            with torch.no_grad():
                point = {"epoch": float(epoch)}
                point["train_loss"], point["train_accuracy"] = pairwise_stats(
                    net(zc).squeeze(-1), net(zr).squeeze(-1)
                )
                if has_eval:
                    point["eval_loss"], point["eval_accuracy"] = pairwise_stats(
                        net(ec).squeeze(-1), net(er).squeeze(-1)
                    )
            curve.append(point)
        if progress is not None:
            progress(epoch, epochs)

    with torch.no_grad():
        if head == "linear":
            w = net.weight.reshape(-1) / std
            fitted = FittedHead(weight=w.clone(), bias=0.0)
        else:
            first, last = net[0], net[2]
            hidden_weight = first.weight / std
            hidden_bias = first.bias - hidden_weight @ mean
            fitted = FittedHead(
                weight=last.weight.reshape(-1).clone(),
                bias=0.0,
                hidden_weight=hidden_weight.clone(),
                hidden_bias=hidden_bias.clone(),
            )
        fitted.bias = -float(fitted.score(all_train).mean())  # centre the training texts' scores at 0
    return fitted, curve


def distinct_texts(data: list[PreferencePair], input_template: str) -> tuple[list[str], list[int], list[int]]:
    """The distinct texts the pairs score (a response shared by pairs is embedded once), and each pair's
    chosen and rejected text as an index into them."""
    texts: list[str] = []
    position: dict[str, int] = {}

    def text_id(prompt: str, response: str) -> int:
        text = input_template.format(prompt=prompt, response=response)
        if text not in position:
            position[text] = len(texts)
            texts.append(text)
        return position[text]

    chosen_ids = [text_id(p.prompt, p.chosen) for p in data]
    rejected_ids = [text_id(p.prompt, p.rejected) for p in data]
    return texts, chosen_ids, rejected_ids


def split_stats(scores: Any, chosen_ids: list[int], rejected_ids: list[int], indices: list[int]) -> tuple:
    """Pairwise loss and accuracy of the pairs at `indices`, from every text's score."""
    return pairwise_stats(
        scores[[chosen_ids[i] for i in indices]], scores[[rejected_ids[i] for i in indices]]
    )


def training_score_scale(
    scores: Any, chosen_ids: list[int], rejected_ids: list[int], train_index: list[int]
) -> dict[str, float]:
    """What the criterion standardises raw scores with (then bounds them with tanh): the training texts'
    spread, so a learned criterion's values are comparable with the others' whatever its scale."""
    train_text_ids = sorted({chosen_ids[i] for i in train_index} | {rejected_ids[i] for i in train_index})
    train_scores = scores[train_text_ids]
    return {"mean": float(train_scores.mean()), "std": max(float(train_scores.std(unbiased=False)), 1e-6)}


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
    "final_answer"), so the `learned_reward` criterion renders trajectories the same way. `progress(phase, fraction)` is
    called as work advances (phase: "load", "embed", "fit", "save"). `encoder` reuses an already
    loaded (model, tokenizer) pair from `load_encoder`."""
    import torch

    started = time.perf_counter()
    data = as_pairs(pairs)
    if len(data) < 2:
        raise PreferenceDataError(
            f"need at least 2 preference pairs to train a reward model, got {len(data)}"
        )
    if head not in HEADS:
        raise ValueError(f"unknown head {head!r}; choose one of {', '.join(HEADS)}")
    base_path, base_gguf = base_model_reference(model)
    train_index, eval_index = split_by_prompt(data, held_out_fraction, seed)
    torch.manual_seed(seed)
    report = progress or (lambda phase, fraction: None)

    report("load", 0.0)
    if encoder is None:
        encoder = load_encoder(model, device)
    base, tokenizer = encoder
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

    # Final numbers from the saved (folded) head on raw embeddings: what the criterion will compute.
    scores = fitted.score(embeddings)
    train_loss, train_accuracy = split_stats(scores, chosen_ids, rejected_ids, train_index)
    held_out_loss, held_out_accuracy = (
        split_stats(scores, chosen_ids, rejected_ids, eval_index) if eval_index else (None, None)
    )
    score_scale = training_score_scale(scores, chosen_ids, rejected_ids, train_index)

    report("save", 0.0)
    directory = Path(out_dir)
    result = RewardTrainingResult(
        path=directory,
        held_out_accuracy=held_out_accuracy,
        train_accuracy=train_accuracy,
        n_train=len(train_index),
        n_eval=len(eval_index),
        curve=curve,
        held_out_loss=held_out_loss,
        train_loss=train_loss,
        head=head,
        seconds={"load": loaded - started, "embed": embedded - loaded, "fit": fitted_at - embedded},
        score_scale=score_scale,
    )
    save_reward_model(
        directory,
        weight=fitted.weight.numpy(),
        bias=fitted.bias,
        hidden_weight=None if fitted.hidden_weight is None else fitted.hidden_weight.numpy(),
        hidden_bias=None if fitted.hidden_bias is None else fitted.hidden_bias.numpy(),
        base_model_path=base_path,
        gguf_file=base_gguf,
        max_length=max_length,
        input_template=input_template,
        response_text=response_text,
        score_scale=score_scale,
        provenance={
            **dict(provenance or {}),
            "trained_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "base_model": model,
            "n_pairs": len(data),
            "n_train": result.n_train,
            "n_eval": result.n_eval,
            "held_out_accuracy": held_out_accuracy,
            "train_accuracy": train_accuracy,
            "training": {
                "seed": seed,
                "epochs": epochs,
                "lr": lr,
                "weight_decay": weight_decay,
                "batch_size": batch_size,
                "held_out_fraction": held_out_fraction,
                "head": head,
                "hidden_units": hidden_units if head == "mlp" else None,
            },
        },
    )
    (directory / CURVE_FILE).write_text(json.dumps(curve))
    result.seconds["total"] = time.perf_counter() - started
    report("save", 1.0)
    return result


__all__ = [
    "HEADS",
    "TRAINING_SCHEMA",
    "FittedHead",
    "PreferenceDataError",
    "PreferencePair",
    "RewardTrainingResult",
    "as_pairs",
    "embed_texts",
    "fit_head",
    "load_encoder",
    "pairwise_stats",
    "split_by_prompt",
    "train_reward_model",
]

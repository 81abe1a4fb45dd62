"""The parts of training a learned reward model (Bradley–Terry) from preference pairs.

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

These are the parts; the recipe that composes them is `trainers.recipes.reward_model.train_reward_model`
(the dashboard's worker task calls it with pairs it read itself). No Django here.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainers.models import BUNDLED_GGUF, DEFAULT_MODEL, resolve_model_source
from trainers.rubrics.reward_model import BUILTIN_SMOLLM2, SMOLLM2_GGUF
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


def _standardiser(chosen: Any, rejected: Any) -> tuple[Any, Any]:
    """The training texts' mean and spread (a floor keeps constant dimensions finite)."""
    import torch

    every = torch.cat([chosen, rejected])
    return every.mean(dim=0), every.std(dim=0, unbiased=False).clamp(min=1e-6)


def _new_head(head: str, dim: int, hidden_units: int, lr: float, weight_decay: float, generator: Any):
    """The head to train and its optimizer: the linear one from zero under full-batch L-BFGS, the MLP
    from a seeded initialisation under AdamW."""
    import torch

    if head == "linear":
        net: Any = torch.nn.Linear(dim, 1)
        torch.nn.init.zeros_(net.weight)
        torch.nn.init.zeros_(net.bias)
        return net, torch.optim.LBFGS(net.parameters(), lr=1.0, max_iter=1, line_search_fn="strong_wolfe")
    first, last = torch.nn.Linear(dim, hidden_units), torch.nn.Linear(hidden_units, 1)
    with torch.no_grad():
        bound = 1 / math.sqrt(dim)
        first.weight.uniform_(-bound, bound, generator=generator)
        first.bias.uniform_(-bound, bound, generator=generator)
        last.weight.uniform_(-1 / math.sqrt(hidden_units), 1 / math.sqrt(hidden_units), generator=generator)
        last.bias.zero_()
    net = torch.nn.Sequential(first, torch.nn.ReLU(), last)
    return net, torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=weight_decay)


def _bt_loss(net: Any, chosen: Any, rejected: Any) -> Any:
    import torch.nn.functional as F

    return -F.logsigmoid(net(chosen).squeeze(-1) - net(rejected).squeeze(-1)).mean()


def _train_epoch(
    net: Any,
    optimizer: Any,
    zc: Any,
    zr: Any,
    *,
    linear: bool,
    weight_decay: float,
    batch_size: int,
    generator: Any,
) -> None:
    """One epoch: an L-BFGS iteration on the L2-regularised loss (linear), or shuffled mini-batches (MLP)."""
    import torch

    if linear:

        def closure() -> Any:
            optimizer.zero_grad()
            loss = _bt_loss(net, zc, zr) + 0.5 * weight_decay * net.weight.pow(2).sum()
            loss.backward()
            return loss

        optimizer.step(closure)
        return
    permutation = torch.randperm(zc.shape[0], generator=generator)
    for start in range(0, zc.shape[0], batch_size):
        index = permutation[start : start + batch_size]
        loss = _bt_loss(net, zc[index], zr[index])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def _curve_point(net: Any, epoch: int, train: tuple[Any, Any], held_out: tuple[Any, Any] | None) -> dict:
    import torch

    net.eval()
    with torch.no_grad():
        point = {"epoch": float(epoch)}
        point["train_loss"], point["train_accuracy"] = pairwise_stats(
            net(train[0]).squeeze(-1), net(train[1]).squeeze(-1)
        )
        if held_out is not None:
            point["eval_loss"], point["eval_accuracy"] = pairwise_stats(
                net(held_out[0]).squeeze(-1), net(held_out[1]).squeeze(-1)
            )
    return point


def _folded(net: Any, linear: bool, mean: Any, std: Any, every_text: Any) -> FittedHead:
    """The trained head over raw embeddings: the standardisation folded into its first layer, the bias
    centring the training texts' scores at 0 (the Bradley–Terry loss does not determine it)."""
    import torch

    with torch.no_grad():
        if linear:
            fitted = FittedHead(weight=(net.weight.reshape(-1) / std).clone(), bias=0.0)
        else:
            first, last = net[0], net[2]
            hidden_weight = first.weight / std
            fitted = FittedHead(
                weight=last.weight.reshape(-1).clone(),
                bias=0.0,
                hidden_weight=hidden_weight.clone(),
                hidden_bias=(first.bias - hidden_weight @ mean).clone(),
            )
        fitted.bias = -float(fitted.score(every_text).mean())
    return fitted


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

    if head not in HEADS:
        raise ValueError(f"unknown head {head!r}; choose one of {', '.join(HEADS)}")
    generator = torch.Generator().manual_seed(seed)
    mean, std = _standardiser(chosen, rejected)
    train = ((chosen - mean) / std, (rejected - mean) / std)
    has_eval = eval_chosen is not None and len(eval_chosen) > 0
    held_out = ((eval_chosen - mean) / std, (eval_rejected - mean) / std) if has_eval else None
    linear = head == "linear"
    net, optimizer = _new_head(head, chosen.shape[1], hidden_units, lr, weight_decay, generator)
    record_every = max(1, epochs // max(1, curve_points))
    curve: list[dict[str, float]] = []
    for epoch in range(1, epochs + 1):
        check_cancel()
        net.train()
        _train_epoch(
            net,
            optimizer,
            *train,
            linear=linear,
            weight_decay=weight_decay,
            batch_size=batch_size,
            generator=generator,
        )
        if epoch % record_every == 0 or epoch == epochs:
            curve.append(_curve_point(net, epoch, train, held_out))
        if progress is not None:
            progress(epoch, epochs)
    return _folded(net, linear, mean, std, torch.cat([chosen, rejected])), curve


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
]

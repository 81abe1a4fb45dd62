"""The clipped policy-gradient loss, its KL term and the loss aggregation modes.

Tensors are (sequences, tokens) with a 0/1 `mask` saying which tokens the loss counts: tokens the
model generated have 1; prompt, tool-output and padding tokens have 0 and so get no gradient at all
(they are multiplied by 0 before any sum). `advantages` are one value per sequence (B,), or one per
token (B, L) where per-turn rewards credit turns apart (`trainers.learn.turn_credit.advantage_tensor`).

Aggregation modes (per optimizer step, across micro-batches, which is why the step's totals
`num_sequences` / `num_tokens` are passed in rather than taken from the micro-batch):

- token-mean: Σ over all loss tokens / number of loss tokens in the step (DAPO);
- seq-mean-token-mean: mean over sequences of each sequence's token mean (GRPO);
- seq-mean-token-sum: mean over sequences of each sequence's token sum;
- seq-mean-token-sum-norm: mean over sequences of each token sum / `norm_constant` (Dr.GRPO).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.utils.checkpoint

from trainers.learn import checkpoint
from trainers.models import cache_argument

if TYPE_CHECKING:
    from trainers.rollout.episodes import Rollout

# Under activation checkpointing, the LM head and its log-softmax run over this many tokens at a time
# (25 MB of fp32 logits for a 49k vocabulary), again in the backward pass (`_completion_block`).
HEAD_CHUNK_TOKENS = 128

LOSS_AGGREGATIONS = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


@dataclass
class LossStats:
    """Sums over this micro-batch's loss tokens, so micro-batches add up before dividing."""

    tokens: float
    clipped_tokens: float
    kl_sum: float
    ratio_sum: float


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(π‖π_ref): exp(r) - r - 1 with r = ref - logp (always ≥ 0)."""
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    loss_agg: str,
    num_sequences: float | None = None,
    num_tokens: float | None = None,
    norm_constant: float | None = None,
) -> torch.Tensor:
    """Reduce a (sequences, tokens) loss to a scalar per `loss_agg` (see the module docstring)."""
    mask = mask.to(per_token.dtype)
    masked = per_token * mask
    if loss_agg == "token-mean":
        total = num_tokens if num_tokens is not None else mask.sum().item()
        return masked.sum() / max(total, 1.0)
    sequences = num_sequences if num_sequences is not None else (mask.sum(-1) > 0).sum().item()
    sequences = max(sequences, 1.0)
    if loss_agg == "seq-mean-token-mean":
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).sum() / sequences
    if loss_agg == "seq-mean-token-sum":
        return masked.sum() / sequences
    if loss_agg == "seq-mean-token-sum-norm":
        if not norm_constant:
            raise ValueError("seq-mean-token-sum-norm needs a norm_constant (e.g. the generation budget)")
        return masked.sum() / (sequences * norm_constant)
    raise ValueError(f"unknown loss aggregation {loss_agg!r}; known: {', '.join(LOSS_AGGREGATIONS)}")


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    loss_agg: str = "token-mean",
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    num_sequences: float | None = None,
    num_tokens: float | None = None,
    norm_constant: float | None = None,
    is_weights: torch.Tensor | None = None,
    entropy_balanced: bool = False,
) -> tuple[torch.Tensor, LossStats]:
    """PPO-clip surrogate with asymmetric clip range [1 - clip_low, 1 + clip_high], plus kl_coef · k3.

    `is_weights` (no gradient; see `truncated_importance_weights`) multiply each token's surrogate:
    the off-policy correction of a batch sampled by an older (behaviour) policy. The KL term is not
    reweighted. `entropy_balanced` (AEPO, `entropy_balanced_clip`): see `clipped_ratio`. Returns the
    scalar loss to backpropagate and the micro-batch's stats.
    """
    mask = mask.to(logp.dtype)
    adv = advantages.to(logp.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1)
    ratio = torch.exp(logp - old_logp)
    unclipped = -adv * ratio
    clipped = -adv * clipped_ratio(ratio, clip_low, clip_high, entropy_balanced)
    per_token = torch.maximum(unclipped, clipped)
    if is_weights is not None:
        per_token = per_token * is_weights.to(per_token.dtype)
    kl = None
    if ref_logp is not None and kl_coef > 0:
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + kl_coef * kl
    loss = aggregate(per_token, mask, loss_agg, num_sequences, num_tokens, norm_constant)
    with torch.no_grad():
        stats = LossStats(
            tokens=float(mask.sum()),
            clipped_tokens=float(((clipped > unclipped).to(mask.dtype) * mask).sum()),
            kl_sum=float((kl * mask).sum()) if kl is not None else 0.0,
            ratio_sum=float((ratio * mask).sum()),
        )
    return loss, stats


def clipped_ratio(
    ratio: torch.Tensor, clip_low: float, clip_high: float, entropy_balanced: bool
) -> torch.Tensor:
    """The ratio clipped to [1 − clip_low, 1 + clip_high]. PPO's clip gives a token above the upper bound no
    gradient at all — with a positive advantage those are mostly high-entropy tokens (the ones a tool
    result made uncertain), so their learning signal is dropped. Entropy-balanced (AEPO): above the bound
    the value is the same, (1 + clip_high) · r / sg(r), but the gradient flows, scaled to the bound:
    (1 + clip_high) · ∇log π."""
    bounded = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    if not entropy_balanced:
        return bounded
    upper = 1.0 + clip_high
    return torch.where(ratio > upper, upper * ratio / ratio.detach(), bounded)


class PpoClipLoss:
    """The built-in `ppo_clip` loss part (`trainers.parts`): `policy_loss` with the run's clip range, KL
    coefficient, aggregation and AEPO's entropy-balanced clip (`entropy_balanced_clip`)."""

    def __init__(self, config: Any, options: dict[str, Any]) -> None:
        self.clip_low, self.clip_high = config.clip_low, config.clip_high
        self.loss_agg, self.kl_coef = config.loss_agg, config.kl_coef
        self.entropy_balanced = bool(getattr(config, "entropy_balanced_clip", False))

    def __call__(
        self,
        logp: torch.Tensor,
        old_logp: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        *,
        ref_logp: torch.Tensor | None = None,
        is_weights: torch.Tensor | None = None,
        num_sequences: float | None = None,
        num_tokens: float | None = None,
        norm_constant: float | None = None,
    ) -> tuple[torch.Tensor, LossStats]:
        return policy_loss(
            logp,
            old_logp,
            advantages,
            mask,
            self.clip_low,
            self.clip_high,
            self.loss_agg,
            ref_logp=ref_logp,
            kl_coef=self.kl_coef,
            num_sequences=num_sequences,
            num_tokens=num_tokens,
            norm_constant=norm_constant,
            is_weights=is_weights,
            entropy_balanced=self.entropy_balanced,
        )


def truncated_importance_weights(
    learner_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor, cap: float
) -> torch.Tensor:
    """Per-token truncated importance weights min(π_learner / π_behaviour, cap) (TIS, as verl's
    `tis_imp_ratio_cap` and AReaL's decoupled loss cap them), detached, 0 outside `mask`.

    `learner_logp` is the learner's log-prob of each token before the update (the proximal policy),
    `behaviour_logp` the one the sampler recorded: the batch's tokens were drawn from π_behaviour,
    so weighting by the ratio makes the gradient an estimate under π_learner; the cap bounds its
    variance when the two policies disagree (stale batches, a different inference engine)."""
    with torch.no_grad():
        log_ratio = (learner_logp - behaviour_logp).clamp(max=math.log(cap) if cap > 0 else 0.0)
        return torch.exp(log_ratio) * mask.to(learner_logp.dtype)


# --- log-probabilities of sampled tokens -------------------------------------------------------------


def _decoder_and_head(model: Any) -> tuple[Any, Any]:
    base = model.get_base_model() if checkpoint.is_peft_model(model) else model
    return base.get_decoder(), base.get_output_embeddings()


def completion_logprobs(
    model: Any,
    rollouts: list[Rollout],
    masks: list[list[int]],
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Log-probs of each rollout's completion tokens at its mask-1 positions, in one autograd graph.

    Returns (logp (B, L) zero outside the mask, mask (B, L) float, entropy sum over mask positions).
    Each distinct prompt is run through the decoder once; its KV cache (with its autograd graph) is
    broadcast to the rollouts that share it, so gradients are the same as with separate forwards. The
    learner's update uses `completion_logprob_parts`, which bounds the memory of the same computation.
    """
    decoder, head = _decoder_and_head(model)
    device = next(model.parameters()).device
    width = max((len(r.completion_ids) for r in rollouts), default=0)
    logp_out = torch.zeros((len(rollouts), width), device=device)
    mask_out = torch.zeros((len(rollouts), width), device=device)
    entropy_sum = 0.0
    for prompt, rows in _rows_by_prompt(rollouts, masks).items():
        cache, last = _encode_prompt(decoder, prompt, device)
        states = [(layer.keys, layer.values) for layer in cache.layers]
        block, select, entropy = _completion_block(
            decoder,
            head,
            _cache_from(decoder.config, states, len(rows)),
            last,
            rollouts,
            masks,
            rows,
            len(prompt),
            temperature,
            with_entropy,
        )
        entropy_sum += float(entropy.sum()) if entropy is not None else 0.0
        row_index = torch.tensor(rows, device=device)
        logp_out = logp_out.index_copy(
            0, row_index, torch.nn.functional.pad(block, (0, width - block.shape[1]))
        )
        mask_out[row_index, : block.shape[1]] = select.float()
    return logp_out, mask_out, entropy_sum


@dataclass
class LogprobPart:
    """The log-probs of some rollouts' completion tokens (`completion_logprob_parts`)."""

    rows: list[int]  # indices into the rollouts passed in
    logp: torch.Tensor  # (len(rows), L): zero outside the mask
    mask: torch.Tensor  # (len(rows), L) float
    entropy: float  # sum over the mask positions (when asked for)
    # (len(rows), L) per-token entropy, zero outside the mask (when asked for; detached)
    token_entropy: torch.Tensor | None = None


def completion_logprob_parts(
    model: Any,
    rollouts: list[Rollout],
    masks: list[list[int]],
    temperature: float = 1.0,
    with_entropy: bool = False,
    max_tokens: int = 0,
    backward_seconds: list[float] | None = None,
    autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
    recompute: bool = False,
    unit_size: int = 1,
) -> Iterator[LogprobPart]:
    """`completion_logprobs` in parts of at most `max_tokens` completion tokens (0: one part per prompt),
    for a learner that takes a backward pass per part: the activations held at once are those of one
    prompt and one part, whatever the batch (a step of 16 samples of ~800 tokens held ~10 GB in one
    graph), and the gradients are exactly those of the whole batch.

    Each distinct prompt is encoded once, with its autograd graph; its keys and values enter the parts as
    leaf tensors, which collect the parts' gradients; after its last part the prompt's own backward pass
    runs with them. So under autograd the caller must run `backward()` on a loss computed from each part
    before it takes the next one (a `for` loop with the backward inside does that). Without autograd
    (`torch.no_grad`) the parts are simply the batch's log-probs in pieces. `backward_seconds`, when
    given, gets the duration of each prompt's backward pass (it runs inside this generator). `autocast`
    is entered around each forward pass (the policy's precision; the backward passes run outside it).
    `recompute` (the run's `activation_checkpointing`): the passes keep only each decoder layer's input and
    the backward passes compute the rest again (`checkpointed_layers`), the LM head's too; same gradients.
    """
    decoder, head = _decoder_and_head(model)
    device = next(model.parameters()).device
    checkpointing = recompute and torch.is_grad_enabled() and replayable(decoder.config)

    def forward() -> AbstractContextManager[Any]:
        """What each forward pass runs inside: the policy's autocast, and the layers checkpointed."""
        return _both(autocast(), checkpointed_layers(decoder)) if checkpointing else autocast()

    for prompt, rows in _rows_by_prompt(rollouts, masks).items():
        with forward():
            cache, last = _encode_prompt(decoder, prompt, device)
        states = [(layer.keys, layer.values) for layer in cache.layers]
        track = torch.is_grad_enabled() and last.requires_grad
        if track:
            states = [(k.detach().requires_grad_(), v.detach().requires_grad_()) for k, v in states]
            leaf_last = last.detach().requires_grad_()
        for part in _parts(rows, rollouts, max_tokens, unit_size):
            part_cache = _cache_from(decoder.config, states, len(part))
            with forward():
                block, select, entropy = _completion_block(
                    decoder,
                    head,
                    part_cache,
                    leaf_last if track else last,
                    rollouts,
                    masks,
                    part,
                    len(prompt),
                    temperature,
                    with_entropy,
                    recompute=checkpointing,
                )
            yield LogprobPart(
                part,
                block,
                select.to(block.dtype),
                float(entropy.sum()) if entropy is not None else 0.0,
                entropy,
            )
        if track:
            # The prompt's backward pass, with the gradients its parts sent to its keys, values and last
            # hidden state.
            outputs, grads = [], []
            for (key, value), layer in zip(states, cache.layers, strict=True):
                for leaf, tensor in ((key, layer.keys), (value, layer.values)):
                    if leaf.grad is not None:
                        outputs.append(tensor)
                        grads.append(leaf.grad)
            if leaf_last.grad is not None:
                outputs.append(last)
                grads.append(leaf_last.grad)
            if outputs:
                started = time.perf_counter()
                torch.autograd.backward(outputs, grads)
                if backward_seconds is not None:
                    backward_seconds.append(time.perf_counter() - started)


def _rows_by_prompt(rollouts: list[Rollout], masks: list[list[int]]) -> dict[tuple[int, ...], list[int]]:
    """Rows with at least one loss token, by their prompt (a GRPO group shares one)."""
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for i, r in enumerate(rollouts):
        if r.completion_ids and any(masks[i]):
            by_prompt.setdefault(tuple(r.prompt_ids), []).append(i)
    return by_prompt


def _parts(rows: list[int], rollouts: list[Rollout], max_tokens: int, unit_size: int = 1) -> list[list[int]]:
    """`rows` from the shortest completion to the longest, cut where a part would exceed `max_tokens`
    completion tokens (padded to its longest row); a row longer than that is a part of its own. Rows of
    like length share a part, so little of it is padding: the demo's learner passes took 24-27 s instead
    of 32-35 s in the order sampled (2,130 padded tokens instead of 2,397 for 1,830), same gradients.
    With `unit_size` > 1 the rows move as units (row // unit_size), ordered and cut by their longest row."""
    units: dict[int, list[int]] = {}
    for i in rows:
        units.setdefault(i // unit_size, []).append(i)

    def longest(unit: list[int]) -> int:
        return max(len(rollouts[i].completion_ids) for i in unit)

    by_length = sorted(units.values(), key=longest)
    if max_tokens <= 0:
        return [[i for unit in by_length for i in unit]]
    parts: list[list[int]] = [[]]
    widest = 0
    for unit in by_length:
        length = longest(unit)
        if parts[-1] and max(widest, length) * (len(parts[-1]) + len(unit)) > max_tokens:
            parts.append([])
            widest = 0
        parts[-1].extend(unit)
        widest = max(widest, length)
    return parts


def _encode_prompt(decoder: Any, prompt: tuple[int, ...], device: Any) -> tuple[Any, torch.Tensor]:
    """The prompt's KV cache (batch 1) and its last hidden state (1, 1, hidden)."""
    cache = _pass_cache(decoder.config)
    hidden = decoder(
        input_ids=torch.tensor([prompt], device=device), **cache_argument(decoder, cache), use_cache=True
    ).last_hidden_state
    return cache, hidden[:, -1:]


def _cache_from(config: Any, states: list[tuple[torch.Tensor, torch.Tensor]], rows: int) -> Any:
    """A cache that starts from a prompt's keys and values (batch 1), seen by `rows` rows."""
    return _pass_cache(config, [(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in states])


def _pass_cache(config: Any, prefix: list[tuple[torch.Tensor, torch.Tensor]] | None = None) -> Any:
    """A cache for one learner pass: empty (a prompt's pass, which keeps the keys and values it computes)
    or holding a prompt's (a part's pass, whose own keys and values are attended to, not kept).

    Its layers can run twice (`replayable`): under activation checkpointing (`checkpointed_layers`) the
    backward pass runs each decoder layer again, and a stock `DynamicLayer` would append the same keys a
    second time. Models with other layers (sliding windows) get the stock ones."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    if replayable(config):
        pass_layer = _pass_layer_class()
        states: list[tuple[Any, Any]] = (
            list(prefix) if prefix is not None else [(None, None)] * len(cache.layers)
        )
        cache.layers = [pass_layer(key, value) for key, value in states]
    elif prefix is not None:
        stock: list[Any] = list(cache.layers)
        for layer, (key, value) in zip(stock, prefix, strict=True):
            layer.lazy_initialization(key, value)
            layer.keys, layer.values = key, value
    return cache


def replayable(config: Any) -> bool:
    """Whether the learner's pass caches for this model (`_pass_cache`) can run a layer twice."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    layers = DynamicCache(config=config).layers
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


@functools.cache
def _pass_layer_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class PassLayer(DynamicLayer):
        def __init__(self, keys: torch.Tensor | None, values: torch.Tensor | None) -> None:
            super().__init__()
            self.prefix = None if keys is None or values is None else (keys, values)
            if self.prefix is not None:
                self.device, self.keys, self.values = keys.device, keys, values  # type: ignore[union-attr]
                self.is_initialized = True

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
            if self.prefix is not None:
                return (
                    torch.cat([self.prefix[0], key_states], dim=-2),
                    torch.cat([self.prefix[1], value_states], dim=-2),
                )
            if not self.is_initialized:  # the first run keeps its states; a replay computes the same ones
                self.device, self.keys, self.values = key_states.device, key_states, value_states
                self.is_initialized = True
            return key_states, value_states

    return PassLayer


@contextmanager
def _both(first: AbstractContextManager[Any], second: AbstractContextManager[Any]) -> Iterator[None]:
    with first, second:
        yield


@contextmanager
def checkpointed_layers(decoder: Any) -> Iterator[None]:
    """Activation checkpointing of `decoder`'s layers for the passes run inside: a layer keeps only its
    input for the backward pass, which runs the layer again for the rest (~54 KB a token per layer of
    SmolLM2-135M in fp32, 1.6 MiB over its 30 layers, against 2.3 KB). Our own wrapper rather than
    transformers' `gradient_checkpointing_enable`, which drops the KV cache the learner's passes attend to
    (a prompt's keys and values); the pass caches (`_pass_cache`) are safe to replay."""
    layers = list(decoder.layers)
    for layer in layers:
        layer.forward = functools.partial(
            torch.utils.checkpoint.checkpoint, layer.forward, use_reentrant=False
        )
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward


def _completion_block(
    decoder: Any,
    head: Any,
    cache: Any,
    last: torch.Tensor,
    rollouts: list[Rollout],
    masks: list[list[int]],
    rows: list[int],
    prompt_length: int,
    temperature: float,
    with_entropy: bool,
    recompute: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Log-probs (k, L) of `rows`' completion tokens after a prompt in `cache` (its last hidden state
    `last`), zero outside their masks; the mask positions (k, L) bool; the entropy there (k, L), zero
    elsewhere (when asked for; detached). `recompute`: the full-vocabulary logits are made
    `HEAD_CHUNK_TOKENS` tokens at a time and made again in the backward pass, instead of being kept for
    it (with their log-softmax: 2 × 196 KB a token for a 49k vocabulary in fp32)."""
    device = last.device
    k = len(rows)
    length = max(len(rollouts[i].completion_ids) for i in rows)
    suffix = torch.zeros((k, length), dtype=torch.long, device=device)
    attention = torch.zeros((k, prompt_length + length), dtype=torch.long, device=device)
    attention[:, :prompt_length] = 1
    select = torch.zeros((k, length), dtype=torch.bool, device=device)
    for j, i in enumerate(rows):
        ids = rollouts[i].completion_ids
        suffix[j, : len(ids)] = torch.tensor(ids, device=device)
        attention[j, prompt_length : prompt_length + len(ids)] = 1
        select[j, : len(ids)] = torch.tensor(masks[i][: len(ids)], device=device).bool()
    positions = (prompt_length + torch.arange(length, device=device)).unsqueeze(0).expand(k, -1)
    hidden = decoder(
        input_ids=suffix,
        attention_mask=attention,
        position_ids=positions,
        **cache_argument(decoder, cache),
        use_cache=True,
    ).last_hidden_state
    # The hidden state at position t predicts token t + 1: the prompt's last state predicts the first
    # completion token.
    predictors = torch.cat([last.expand(k, 1, -1), hidden[:, :-1]], dim=1)
    targets = suffix[select]
    if recompute:
        pieces = [
            torch.utils.checkpoint.checkpoint(
                _token_logprobs, head, h, t, temperature, with_entropy, use_reentrant=False
            )
            for h, t in zip(
                predictors[select].split(HEAD_CHUNK_TOKENS), targets.split(HEAD_CHUNK_TOKENS), strict=True
            )
        ]
        token_logp = torch.cat([logp for logp, _ in pieces])
        per_token = torch.cat([e for _, e in pieces]) if with_entropy else None
    else:
        token_logp, per_token = _token_logprobs(head, predictors[select], targets, temperature, with_entropy)
    block = torch.zeros((k, length), dtype=token_logp.dtype, device=device).masked_scatter(select, token_logp)
    entropy = None
    if per_token is not None:
        entropy = torch.zeros((k, length), dtype=per_token.dtype, device=device).masked_scatter(
            select, per_token
        )
    return block, select, entropy


def _token_logprobs(
    head: Any, hidden: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The log-prob of each target token (N,) from the hidden states that predict it (N, hidden), and the
    entropy of each distribution (N,; detached) when asked for."""
    logits = head(hidden).float()
    if temperature > 0 and temperature != 1.0:  # x / 1 is x: no full-vocabulary copy for it
        logits = logits / temperature
    logprobs = torch.log_softmax(logits, dim=-1)
    token_logp = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logprobs.exp() * logprobs).sum(-1)
    return token_logp, entropy

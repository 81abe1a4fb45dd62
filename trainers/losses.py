"""The clipped policy-gradient loss, its KL term and the loss aggregation modes.

Tensors are (sequences, tokens) with a 0/1 `mask` saying which tokens the loss counts: tokens the
model generated have 1; prompt, tool-output and padding tokens have 0 and so get no gradient at all
(they are multiplied by 0 before any sum). `advantages` are one value per sequence (B,), or one per
token (B, L) where per-turn rewards credit turns apart (`trainers.turn_credit.advantage_tensor`).

Aggregation modes (per optimizer step, across micro-batches, which is why the step's totals
`num_sequences` / `num_tokens` are passed in rather than taken from the micro-batch):

- token-mean: Σ over all loss tokens / number of loss tokens in the step (DAPO);
- seq-mean-token-mean: mean over sequences of each sequence's token mean (GRPO);
- seq-mean-token-sum: mean over sequences of each sequence's token sum;
- seq-mean-token-sum-norm: mean over sequences of each token sum / `norm_constant` (Dr.GRPO).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from trainers import checkpoint

if TYPE_CHECKING:
    from trainers.rollout import Rollout

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
) -> tuple[torch.Tensor, LossStats]:
    """PPO-clip surrogate with asymmetric clip range [1 - clip_low, 1 + clip_high], plus kl_coef · k3.

    `is_weights` (no gradient; see `truncated_importance_weights`) multiply each token's surrogate:
    the off-policy correction of a batch sampled by an older (behaviour) policy. The KL term is not
    reweighted. Returns the scalar loss to backpropagate and the micro-batch's stats.
    """
    mask = mask.to(logp.dtype)
    adv = advantages.to(logp.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1)
    ratio = torch.exp(logp - old_logp)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
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
    """Log-probs of each rollout's completion tokens at its mask-1 positions.

    Returns (logp (B, L) zero outside the mask, mask (B, L) float, entropy sum over mask positions).
    Each distinct prompt is run through the decoder once; its KV cache (with its autograd graph) is
    repeated for the rollouts that share it, so gradients are the same as with separate forwards.
    """
    from transformers import DynamicCache

    decoder, head = _decoder_and_head(model)
    device = next(model.parameters()).device
    width = max((len(r.completion_ids) for r in rollouts), default=0)
    logp_out = torch.zeros((len(rollouts), width), device=device)
    mask_out = torch.zeros((len(rollouts), width), device=device)
    entropy_sum = 0.0
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for i, r in enumerate(rollouts):
        if r.completion_ids and any(masks[i]):
            by_prompt.setdefault(tuple(r.prompt_ids), []).append(i)
    scale = temperature if temperature > 0 else 1.0
    for prompt, rows in by_prompt.items():
        k = len(rows)
        prompt_ids = torch.tensor([prompt], device=device)
        cache = DynamicCache(config=decoder.config)
        prefix = decoder(input_ids=prompt_ids, past_key_values=cache, use_cache=True).last_hidden_state
        if k > 1:
            cache.batch_repeat_interleave(k)
        length = max(len(rollouts[i].completion_ids) for i in rows)
        suffix = torch.zeros((k, length), dtype=torch.long, device=device)
        attention = torch.zeros((k, len(prompt) + length), dtype=torch.long, device=device)
        attention[:, : len(prompt)] = 1
        select = torch.zeros((k, length), dtype=torch.bool, device=device)
        for j, i in enumerate(rows):
            ids = rollouts[i].completion_ids
            suffix[j, : len(ids)] = torch.tensor(ids, device=device)
            attention[j, len(prompt) : len(prompt) + len(ids)] = 1
            select[j, : len(ids)] = torch.tensor(masks[i][: len(ids)], device=device).bool()
        positions = (len(prompt) + torch.arange(length, device=device)).unsqueeze(0).expand(k, -1)
        hidden = decoder(
            input_ids=suffix,
            attention_mask=attention,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        ).last_hidden_state
        # The hidden state at position t predicts token t + 1: the prompt's last state predicts the
        # first completion token.
        predictors = torch.cat([prefix[:, -1:].expand(k, 1, -1), hidden[:, :-1]], dim=1)
        logits = head(predictors[select]).float() / scale
        logprobs = torch.log_softmax(logits, dim=-1)
        token_logp = logprobs.gather(-1, suffix[select].unsqueeze(-1)).squeeze(-1)
        block = torch.zeros((k, length), dtype=token_logp.dtype, device=device).masked_scatter(
            select, token_logp
        )
        row_index = torch.tensor(rows, device=device)
        logp_out = logp_out.index_copy(0, row_index, torch.nn.functional.pad(block, (0, width - length)))
        mask_out[row_index, :length] = select.float()
        if with_entropy:
            with torch.no_grad():
                entropy_sum += float(-(logprobs.exp() * logprobs).sum())
    return logp_out, mask_out, entropy_sum

"""The Tinker API's built-in loss functions, on our policy loss (trainers/learn/losses.py).

Tinker's losses are sums over every token of every datum (not means): `cross_entropy` is
-Σ weights · log p(target), `importance_sampling` -Σ advantages · p/q, `ppo` the clipped surrogate with
ratio bounds [clip_low_threshold, clip_high_threshold] (0.8, 1.2 by default), `cispo` the clipped ratio
held fixed times the log-prob, `dro` (direct reward optimization) the log-prob times the advantage less a
quadratic penalty ½·beta·(log p − log q)² on moving away from the sampler. The policy-gradient ones are `policy_loss` with the "seq-mean-token-sum"
aggregation over one sequence, so a clipped surrogate is written once in the code base.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from trainers.learn.losses import policy_loss

LOSS_FUNCTIONS = ("cross_entropy", "importance_sampling", "ppo", "cispo", "dro")
# What each loss reads from a datum's loss_fn_inputs besides target_tokens.
LOSS_INPUTS: dict[str, tuple[str, ...]] = {
    "cross_entropy": ("weights",),
    "importance_sampling": ("logprobs", "advantages"),
    "ppo": ("logprobs", "advantages"),
    "cispo": ("logprobs", "advantages"),
    "dro": ("logprobs", "advantages"),
}
# DRO's penalty weight when a request's loss_fn_config has none (the value Tinker's loss docs show).
DRO_BETA = 0.05


class LossInputError(ValueError):
    """A request the loss cannot be computed on: an unknown loss, a missing or misshapen input. Its
    message goes back to the client as the failed request's error."""


@dataclass
class LossOutcome:
    loss: torch.Tensor  # the scalar to backpropagate (a sum)
    elementwise: torch.Tensor  # (B, L) each token's share, 0 outside the mask
    clipped_tokens: float = 0.0


def check_loss(loss_fn: str, inputs: Mapping[str, torch.Tensor]) -> None:
    if loss_fn not in LOSS_FUNCTIONS:
        raise LossInputError(f"Unknown loss_fn {loss_fn!r}: this service has {', '.join(LOSS_FUNCTIONS)}.")
    missing = [name for name in LOSS_INPUTS[loss_fn] if name not in inputs]
    if missing:
        raise LossInputError(f"loss_fn {loss_fn!r} needs loss_fn_inputs {', '.join(missing)} in every datum.")


def tinker_loss(
    loss_fn: str,
    logp: torch.Tensor,
    inputs: Mapping[str, torch.Tensor],
    mask: torch.Tensor,
    config: Mapping[str, float] | None = None,
) -> LossOutcome:
    """`logp` (B, L): the model's log-prob of each target token; `inputs` the datums' loss_fn_inputs
    padded to (B, L); `mask` 1 on real tokens, 0 on padding."""
    check_loss(loss_fn, inputs)
    config = dict(config or {})
    if loss_fn == "cross_entropy":
        elementwise = -logp * inputs["weights"].to(logp.dtype) * mask
        return LossOutcome(loss=elementwise.sum(), elementwise=elementwise.detach())
    sampled = inputs["logprobs"].to(logp.dtype)
    advantages = inputs["advantages"].to(logp.dtype)
    if loss_fn == "cispo":
        low, high = config.get("clip_low_threshold", 0.8), config.get("clip_high_threshold", 1.2)
        ratio = torch.exp(logp - sampled).clamp(low, high).detach()
        elementwise = -(ratio * advantages * logp) * mask
        return LossOutcome(loss=elementwise.sum(), elementwise=elementwise.detach())
    if loss_fn == "dro":
        beta = float(config.get("beta", DRO_BETA))
        elementwise = -(logp * advantages - 0.5 * beta * (logp - sampled) ** 2) * mask
        return LossOutcome(loss=elementwise.sum(), elementwise=elementwise.detach())
    if loss_fn == "importance_sampling":
        clip_low = clip_high = math.inf
    else:
        clip_low = 1.0 - float(config.get("clip_low_threshold", 0.8))
        clip_high = float(config.get("clip_high_threshold", 1.2)) - 1.0
    loss, stats = policy_loss(
        logp,
        sampled,
        advantages,
        mask,
        clip_low=clip_low,
        clip_high=clip_high,
        loss_agg="seq-mean-token-sum",
        num_sequences=1.0,
    )
    with torch.no_grad():
        ratio = torch.exp(logp - sampled)
        elementwise = -advantages * ratio * mask
    return LossOutcome(loss=loss, elementwise=elementwise, clipped_tokens=stats.clipped_tokens)

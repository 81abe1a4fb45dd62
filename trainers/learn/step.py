"""One policy update — the PPO inner loop — written once, for the single-process learner
(`trainers.learn.learner.Learner`) and every learner shard (`trainers.learn.sharded.LearnerShard`).

`plan_update` decides what an update trains (loss masks, normalisers, the rows with a gradient and their
micro-batches); `learner_step` runs it: per epoch (`updates_per_batch`), per micro-batch and per part of it
(a backward pass per part), the learner's log-probs, the "old" ones (this epoch's detached when there is one epoch, else the first epoch's), the
sampler/learner mismatch, the truncated importance weights of a stale batch, the KL reference, the
advantages and the clipped loss; then the gradient clip and the optimizer step. The two learners differ
only in how a micro-batch's log-probs are computed (a shared-prompt KV cache in one process, one padded
pass per shard) and in what they hand it — which `MicroBatch` carries.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch

from trainers.learn import turn_credit
from trainers.learn.losses import LogprobPart, truncated_importance_weights
from trainers.learn.metrics import UpdateTotals
from trainers.parts import build_part
from trainers.run_config import RunConfig
from trainers.sdk.cancel import check_cancel


def corrects_staleness(config: RunConfig) -> bool:
    """Whether an update weights tokens by truncated importance ratios π_learner / π_behaviour (TIS): a
    batch generated ahead on rollout workers (bounded async) may come from an older policy. The clip stays
    around the learner's own log-probs at the start of the update (the proximal policy), as in decoupled
    PPO."""
    return config.max_staleness > 0 and config.num_rollout_workers > 0 and config.tis_cap > 0


def loss_mask(config: RunConfig, rollout: Any) -> list[int]:
    """Which of a rollout's completion tokens the loss counts."""
    if config.mask_truncated and rollout.trajectory.status == "truncated":
        return [0] * len(rollout.completion_ids)
    return list(rollout.loss_mask) if config.mask_tool_tokens else [1] * len(rollout.completion_ids)


@dataclass
class UpdatePlan:
    """What one update trains, the same for the single process and the learner shards (their sums must
    add up to one step)."""

    masks: list[list[int]]
    num_tokens: float  # the loss normalisers: every loss token, every sequence with one, the constant
    num_sequences: float
    norm_constant: float
    active: list[int]  # the rows with a gradient
    chunks: list[list[int]]  # their micro-batches (`grad_accum_steps`)

    @property
    def trained_tokens(self) -> int:
        return sum(sum(self.masks[i]) for i in self.active)


def plan_update(config: RunConfig, rollouts: Sequence[Any], step: int) -> UpdatePlan:
    masks = [loss_mask(config, r) for r in rollouts]
    norm_constant = config.loss_norm_constant or config.max_new_tokens * max(config.max_turns_at(step), 1)
    # Exactly-zero advantages with no KL term: the loss and its gradient are exactly 0 there.
    active = [i for i, r in enumerate(rollouts) if any(masks[i]) and (r.has_signal() or config.kl_coef > 0)]
    return UpdatePlan(
        masks=masks,
        num_tokens=float(sum(sum(m) for m in masks)),
        num_sequences=float(sum(1 for m in masks if any(m))),
        norm_constant=norm_constant,
        active=active,
        chunks=[c for c in split_evenly(active, config.grad_accum_steps) if c],
    )


def split_evenly(items: list[int], parts: int) -> list[list[int]]:
    size = math.ceil(len(items) / max(parts, 1)) if items else 0
    return [items[i : i + size] for i in range(0, len(items), size)] if size else []


def pad_rows(rows: Sequence[Sequence[float]], width: int, device: Any) -> torch.Tensor:
    """Per-token values of several rows as a zero-padded (rows, width) tensor, each cut to `width`."""
    out = torch.zeros((len(rows), width), device=device)
    for i, row in enumerate(rows):
        if row:
            out[i, : min(len(row), width)] = torch.tensor(list(row[:width]), device=device)
    return out


# A micro-batch's log-probs in parts: (with_entropy, the autocast to enter around each forward pass, a list
# that gets the seconds of each backward pass the parts run themselves) → its parts. Under autograd the
# step runs a backward pass on each part before it takes the next (`completion_logprob_parts`).
Parts = Callable[[bool, Callable[[], AbstractContextManager[Any]], list[float]], Iterator[LogprobPart]]


@dataclass
class MicroBatch:
    """One micro-batch as the learner step reads it."""

    parts: Parts
    behaviour: list[list[float]]  # the sampler's log-probs of the same tokens
    advantages: list[float]
    token_advantages: list[list[float] | None]
    # (rows, width, device) → the KL reference's log-probs of those rows; used when `kl_coef` > 0
    reference: Callable[[list[int], int, Any], torch.Tensor] | None = None
    # (rows, learner log-probs (k, L), mask (k, L), per-token entropy (k, L) or None) → None: the first
    # epoch's per-token values before the update, for the run's token statistics (`token_stats`)
    record: Callable[[list[int], torch.Tensor, torch.Tensor, torch.Tensor | None], None] | None = None


def whole(logprobs: Callable[[bool], tuple[torch.Tensor, torch.Tensor, float]]) -> Parts:
    """`Parts` of a micro-batch whose log-probs come in one piece: `logprobs(with_entropy)` → (log-probs
    (B, L) zero outside the mask, mask (B, L), entropy sum over the mask)."""

    def parts(
        with_entropy: bool, autocast: Callable[[], AbstractContextManager[Any]], _: list[float]
    ) -> Iterator[LogprobPart]:
        with autocast():
            logp, mask, entropy = logprobs(with_entropy)
        yield LogprobPart(list(range(logp.shape[0])), logp, mask, entropy)

    return parts


def learner_step(
    micro_batches: Sequence[MicroBatch | None],
    *,
    config: RunConfig,
    params: list[torch.nn.Parameter],
    optimizer: torch.optim.Optimizer,
    precision: Any,
    plan: UpdatePlan,
    corrected: bool,
    gradient_scale: float = 1.0,
    empty_pass: Callable[[], None] | None = None,
    after_optimizer_step: Callable[[], None] | None = None,
    timings: dict[str, float] | None = None,
) -> UpdateTotals:
    """Train on `micro_batches` for `updates_per_batch` epochs; return the update's sums.

    A None micro-batch (a shard with no rows in it) runs `empty_pass`: on a shard every forward and
    backward is a collective. `gradient_scale` multiplies each loss before its backward (the shards'
    losses are their share of the step's, and FSDP averages over the shards)."""
    totals = UpdateTotals()
    times = timings if timings is not None else {}
    for key in ("forward", "backward", "optimizer"):
        times.setdefault(key, 0.0)
    old_logps: dict[tuple[int, int], torch.Tensor] = {}
    loss_fn = build_part("loss", config)  # the run's `policy_loss` (trainers.parts)
    epochs = config.updates_per_batch
    for epoch in range(epochs):
        # None, not zeros: the first backward pass then writes each gradient instead of adding it to a zero
        # fill (the 135M model's 540 MB of zeros and one more pass over them: ~0.1 s of a 4-s bench step).
        optimizer.zero_grad(set_to_none=True)
        for c, micro in enumerate(micro_batches):
            if epoch == 0:
                # Before the first optimizer step only: a cancel then leaves the weights as they were.
                check_cancel()
            if micro is None:
                assert empty_pass is not None
                empty_pass()
                continue
            # Autocast around the forwards only (the parts enter it): the backward pass reruns each op in
            # the dtype its forward chose, and the loss arithmetic stays in fp32.
            prompt_backward: list[float] = []
            t0 = time.perf_counter()
            for k, part in enumerate(micro.parts(epoch == 0, precision.autocast, prompt_backward)):
                logp, mask, rows = part.logp, part.mask, part.rows
                old = logp.detach() if epochs == 1 else old_logps.setdefault((c, k), logp.detach())
                if epoch == 0 and micro.record is not None:
                    micro.record(rows, old, mask, part.token_entropy)
                is_weights = None
                if epoch == 0 or corrected:
                    behaviour = pad_rows([micro.behaviour[j] for j in rows], logp.shape[1], logp.device)
                    if epoch == 0:
                        totals.mismatch_sum += float(((old - behaviour).abs() * mask).sum())
                        totals.mismatch_tokens += float(mask.sum())
                    if corrected:
                        is_weights = truncated_importance_weights(old, behaviour, mask, config.tis_cap)
                        if epoch == 0:
                            totals.is_weight_sum += float((is_weights * mask).sum())
                ref = None
                if config.kl_coef > 0:
                    assert micro.reference is not None
                    ref = micro.reference(rows, logp.shape[1], logp.device)
                adv = turn_credit.advantage_tensor(
                    [micro.advantages[j] for j in rows],
                    [micro.token_advantages[j] for j in rows],
                    logp.shape[1],
                    logp.device,
                )
                loss, stats = loss_fn(
                    logp,
                    old,
                    adv,
                    mask,
                    ref_logp=ref,
                    is_weights=is_weights,
                    num_sequences=plan.num_sequences,
                    num_tokens=plan.num_tokens,
                    norm_constant=plan.norm_constant,
                )
                t1 = time.perf_counter()
                # Getting this part may have run the previous prompt's own backward pass.
                times["forward"] += t1 - t0 - sum(prompt_backward)
                times["backward"] += sum(prompt_backward)
                prompt_backward.clear()
                (loss * gradient_scale if gradient_scale != 1.0 else loss).backward()
                t0 = time.perf_counter()
                times["backward"] += t0 - t1
                if epoch == 0:
                    totals.entropy_sum += part.entropy
                totals.loss += float(loss.detach())
                totals.clipped_tokens += stats.clipped_tokens
                totals.tokens += stats.tokens
                totals.kl_sum += stats.kl_sum
                totals.ratio_sum += stats.ratio_sum
            times["backward"] += time.perf_counter() - t0  # the last prompt's own backward pass
        t0 = time.perf_counter()
        # A step without signal still steps AdamW (moments, weight decay) exactly as other trainers do, so
        # step counts and bias corrections stay aligned: what no pass reached gets a zero gradient.
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if config.max_grad_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            totals.grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        optimizer.step()
        if after_optimizer_step is not None:
            after_optimizer_step()
        times["optimizer"] += time.perf_counter() - t0
    return totals

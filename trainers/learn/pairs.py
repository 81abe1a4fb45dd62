"""Preference pairs as the policy reads them, and the DPO loss on them: the parts of a DPO run
(`trainers.recipes.dpo`) that hold the arithmetic, tested against TRL's DPOTrainer on the same batch.

A pair is its prompt's tokens, shared by both responses, and each response's (`tokenize_pair`, TRL's
tokenization rule). `pair_logprobs` sums each response's log-probs with the GRPO learner's part
(`trainers.learn.losses.completion_logprob_parts`): the start all the pairs' prompts share (a system
prompt) runs through the decoder once for the batch, the LM head with its log-softmax only at the
responses' tokens, and each pass's loss is taken backward before the next pass. `dpo_losses` is TRL's
formulas.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

LOSS_TYPES = ("sigmoid", "ipo", "hinge", "robust")


@dataclass
class PairTokens:
    """One pair as the policy reads it: the prompt's tokens (shared by both responses) and each response's."""

    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]


@dataclass
class _Side:
    """One response after its prompt: what `completion_logprob_parts` reads of a rollout."""

    prompt_ids: list[int]
    completion_ids: list[int]


def _token_ids(tokenizer: Any, value: Any, **template: Any) -> list[int]:
    if isinstance(value, list):
        encoded = tokenizer.apply_chat_template(value, tokenize=True, return_dict=True, **template)
        return list(encoded["input_ids"])
    return list(tokenizer(text=value)["input_ids"])


def tokenize_pair(row: Mapping[str, Any], tokenizer: Any, max_length: int) -> PairTokens:
    """TRL's rule: the conversation rendered with the chat template (text: with the EOS token added to
    each response), the responses starting where the prompt alone and the prompt with the response stop
    agreeing. Longer than `max_length`: each response is cut at its end to what fits beside the prompt, but
    to no less than half of `max_length`, then the prompt at its start (it keeps its question's end)."""
    prompt, chosen, rejected = row["prompt"], row["chosen"], row["rejected"]
    if isinstance(prompt, list):
        prompt_ids = _token_ids(tokenizer, prompt, add_generation_prompt=True)
        with_chosen, with_rejected = (_token_ids(tokenizer, prompt + side) for side in (chosen, rejected))
    else:
        eos = tokenizer.eos_token or ""
        prompt_ids = _token_ids(tokenizer, prompt)
        with_chosen, with_rejected = (
            _token_ids(tokenizer, prompt + (side if side.endswith(eos) else side + eos))
            for side in (chosen, rejected)
        )
    start = min(_common_prefix(prompt_ids, with_chosen), _common_prefix(prompt_ids, with_rejected))
    prompt_ids, chosen_ids, rejected_ids = prompt_ids[:start], with_chosen[start:], with_rejected[start:]
    room = max(max_length - len(prompt_ids), max_length // 2)
    chosen_ids, rejected_ids = chosen_ids[:room], rejected_ids[:room]
    keep = max_length - max(len(chosen_ids), len(rejected_ids))
    return PairTokens(
        prompt_ids[len(prompt_ids) - keep :] if keep < len(prompt_ids) else prompt_ids,
        chosen_ids,
        rejected_ids,
    )


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# ---- the loss ------------------------------------------------------------------------------------------


def dpo_losses(
    chosen: Any,
    rejected: Any,
    ref_chosen: Any,
    ref_rejected: Any,
    *,
    beta: float,
    loss_type: str,
    chosen_tokens: Any = None,
    rejected_tokens: Any = None,
) -> Any:
    """Each pair's loss from the summed log-probs of its responses under the policy and the reference:
    TRL's DPOTrainer's formulas (sigmoid is the DPO paper's; ipo averages per token as TRL does; robust
    with TRL's default label smoothing 0 is sigmoid)."""
    import torch.nn.functional as F

    delta = (chosen - ref_chosen) - (rejected - ref_rejected)
    if loss_type in ("sigmoid", "robust"):
        return -F.logsigmoid(beta * delta)
    if loss_type == "hinge":
        return (1 - beta * delta).clamp(min=0)
    if loss_type == "ipo":
        per_token = (chosen - ref_chosen) / chosen_tokens.clamp(min=1.0) - (
            rejected - ref_rejected
        ) / rejected_tokens.clamp(min=1.0)
        return (per_token - 1 / (2 * beta)) ** 2
    raise ValueError(f"unknown loss type {loss_type!r}: one of {', '.join(LOSS_TYPES)}")


def pair_logprobs(
    model: Any,
    pairs: Sequence[PairTokens],
    *,
    autocast: Callable[[], Any] = nullcontext,
    recompute: bool = False,
    loss_of: Callable[[list[int], Any, Any], Any] | None = None,
    progress: Callable[[int], None] | None = None,
    max_tokens: int = 0,
) -> tuple[Any, Any]:
    """The summed log-probs (n,) of each pair's chosen and of its rejected response, detached.

    The pairs' common start (`shared_prefix`: a snapshot's pairs share their environment's system prompt)
    runs through the decoder once for all of them; where no common start saves work, pairs that share a
    prompt run together, the prompt once for all their responses. Each pass holds whole pairs, at most
    `max_tokens` tokens after the shared part (0: all at once). `loss_of(pair indices, chosen, rejected)`,
    when given, is each pass's share of the loss (with autograd): it is taken backward there, before the
    next pass, so one pass's activations are held at a time and the gradients are the whole batch's.
    `progress(pairs done)` after each pass."""
    import torch

    from trainers.learn.losses import completion_logprob_parts

    prefix = shared_prefix(pairs)
    sides: list[Any] = []
    masks: list[list[int]] = []
    for pair in pairs:
        rest = pair.prompt_ids[len(prefix) :] if prefix else []
        for ids in (pair.chosen_ids, pair.rejected_ids):
            sides.append(_Side(prefix or pair.prompt_ids, rest + ids))
            masks.append([0] * len(rest) + [1] * len(ids))
    sums = torch.zeros(len(sides))
    done = 0
    parts = completion_logprob_parts(
        model, sides, masks, 1.0, max_tokens=max_tokens, autocast=autocast, recompute=recompute, unit_size=2
    )
    for part in parts:  # unit_size 2: each pair's two responses are in one part
        part_sums = part.logp.sum(-1)
        indices = sorted({row // 2 for row in part.rows})
        if loss_of is not None:
            rows = torch.tensor(part.rows, device=part_sums.device)
            full = torch.zeros(len(sides), dtype=part_sums.dtype, device=part_sums.device)
            full = full.index_copy(0, rows, part_sums)
            index = torch.tensor(indices, device=full.device)
            loss_of(indices, full[0::2][index], full[1::2][index]).backward()
        done += len(indices)
        sums[part.rows] = part_sums.detach().float().cpu()
        if progress is not None:
            progress(done)
    return sums[0::2], sums[1::2]


def shared_prefix(pairs: Sequence[PairTokens]) -> list[int]:
    """The tokens every pair's prompt starts with, when encoding them once for all the pairs costs fewer
    tokens than encoding each distinct prompt once (each pair's rest of its prompt then runs with both of
    its responses, twice); otherwise [] (each distinct prompt is encoded once for its pairs)."""
    if len(pairs) < 2:
        return []
    first = pairs[0].prompt_ids
    common = min(_common_prefix(first, pair.prompt_ids) for pair in pairs[1:])
    if common == 0:
        return []
    shared_cost = common + sum(2 * (len(pair.prompt_ids) - common) for pair in pairs)
    distinct_cost = sum(len(prompt) for prompt in {tuple(pair.prompt_ids) for pair in pairs})
    return list(first[:common]) if shared_cost < distinct_cost else []


def _epoch_order(count: int, seed: int, epoch: int) -> list[int]:
    order = list(range(count))
    random.Random(seed * 100003 + epoch).shuffle(order)
    return order


def batch_at(position: int, size: int, count: int, seed: int) -> list[int]:
    """The pair indices of the batch that starts `position` pairs into the run (epochs reshuffled by seed):
    a pure function of the position, so a resumed run takes the batches the stopped one would have."""
    return [_epoch_order(count, seed, p // count)[p % count] for p in range(position, position + size)]


def pair_metrics(
    chosen: Any, rejected: Any, ref_chosen: Any, ref_rejected: Any, losses: Any, beta: float, prefix: str
) -> dict[str, float]:
    """The run page's DPO numbers for some pairs (TRL's names, mapped): loss, implicit rewards, margin,
    preference accuracy (the share of pairs whose chosen response the policy now prefers)."""
    reward_chosen, reward_rejected = beta * (chosen - ref_chosen), beta * (rejected - ref_rejected)
    margins = reward_chosen - reward_rejected
    return {
        f"{prefix}loss": float(losses.mean()),
        f"{prefix}dpo/reward_chosen": float(reward_chosen.mean()),
        f"{prefix}dpo/reward_rejected": float(reward_rejected.mean()),
        f"{prefix}dpo/margin": float(margins.mean()),
        f"{prefix}dpo/accuracy": float((margins > 0).float().mean()),
        f"{prefix}dpo/logp_chosen": float(chosen.mean()),
        f"{prefix}dpo/logp_rejected": float(rejected.mean()),
    }

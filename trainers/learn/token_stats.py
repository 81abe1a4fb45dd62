"""Per-token statistics of a run's model turns (`token_stats`), as the trajectory page's token view shows
them: the sampling log-prob (the rollout engine's), the learner's entropy, the advantage × loss mask, and
the learner − sampler log-prob gap (the train/inference mismatch that off-policy corrections exist for).

The learner records its first-epoch log-probs and entropies while it trains (`Recorder`: the values are
ones the loss computes anyway). A step's trajectories are reported before its update, with what is known
then (`add_to_item`: the sampler's log-probs, the advantages, the tokens' text lengths), packed per turn
into the wire format's `token_stats` (`trainers.sdk.wire.TOKEN_STATS`); after the update `learner_items`
gives the learner's gap and entropy of the trained samples for a `token_stats` event, which joins them to
the stored turns. Samples the learner did not run (no signal, evaluation, learner shards) carry the
sampler's log-probs and their advantages only.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from trainers.sdk import wire

NAN = math.nan


class Recorder:
    """Keeps the learner's per-token log-probs and entropies of the rollouts it trains, by rollout."""

    def __init__(self) -> None:
        self.logprobs: dict[int, list[float]] = {}
        self.entropies: dict[int, list[float]] = {}

    def hook(self, batch: list[Any]) -> Any:
        """A `MicroBatch.record` for a micro-batch of `batch` (its rows index it)."""

        def record(
            rows: list[int], logp: torch.Tensor, mask: torch.Tensor, entropy: torch.Tensor | None
        ) -> None:
            width = logp.shape[1]
            nan = torch.full_like(logp, NAN)
            chosen = mask > 0
            logps = torch.where(chosen, logp, nan).float().cpu().tolist()
            ents = torch.where(chosen, entropy, nan).float().cpu().tolist() if entropy is not None else None
            for j, row in enumerate(rows):
                rollout = batch[row]
                length = min(len(rollout.completion_ids), width)
                self.logprobs[id(rollout)] = logps[j][:length]
                if ents is not None:
                    self.entropies[id(rollout)] = ents[j][:length]

        return record

    def clear(self) -> None:
        self.logprobs.clear()
        self.entropies.clear()


def _model_turn_spans(rollout: Any) -> list[tuple[int, int, int]] | None:
    """(turn index, start, end) of each turn inside the rollout's completion tokens; None when the turns'
    tokens do not add up to them (a trainer that reports turns its own way)."""
    turns = rollout.trajectory.turns
    first = next((i for i, t in enumerate(turns) if t.role == "assistant"), None)
    if first is None:
        return None
    spans, position = [], 0
    for index in range(first, len(turns)):
        length = len(turns[index].token_ids or [])
        spans.append((index, position, position + length))
        position += length
    return spans if position == len(rollout.completion_ids) else None


def _text_lengths(tokenizer: Any, token_ids: list[int], text: str) -> list[int] | None:
    """Characters of `text` each token decodes to, when the pieces add up to it (and each fits a byte)."""
    if tokenizer is None or not token_ids:
        return None
    pieces = tokenizer.batch_decode([[i] for i in token_ids], skip_special_tokens=False)
    if "".join(pieces) != text:
        pieces = tokenizer.batch_decode([[i] for i in token_ids], skip_special_tokens=True)
        if "".join(pieces) != text:
            return None
    lengths = [len(p) for p in pieces]
    return lengths if max(lengths, default=0) <= 255 else None


def learner_items(rollouts: list[Any], recorder: Recorder) -> list[dict[str, Any]]:
    """The learner's statistics of `rollouts`' model turns (gap, entropy) as `token_stats` event items:
    the trainer reports a step's trajectories before its update, and these once the update computed them."""
    items = []
    for rollout in rollouts:
        learner = recorder.logprobs.get(id(rollout))
        spans = _model_turn_spans(rollout) if learner is not None else None
        if learner is None or spans is None:
            continue
        behaviour, entropy = rollout.behaviour_logprobs, recorder.entropies.get(id(rollout))
        for index, start, end in spans:
            if rollout.trajectory.turns[index].role != "assistant" or end == start:
                continue
            positions = range(start, end)
            stats = {
                "gap": wire.pack_halves(
                    learner[p] - behaviour[p] if p < len(learner) and p < len(behaviour) else None
                    for p in positions
                )
            }
            if entropy is not None:
                stats["entropy"] = wire.pack_halves(
                    entropy[p] if p < len(entropy) else None for p in positions
                )
            items.append(
                {
                    "group": rollout.group,
                    "sample": rollout.sample,
                    "split": rollout.split,
                    "turn": index,
                    "stats": stats,
                }
            )
    return items


def add_to_item(
    item: dict[str, Any],
    rollout: Any,
    *,
    loss_mask: list[int],
    recorder: Recorder | None,
    tokenizer: Any = None,
) -> None:
    """Put `rollout`'s per-token statistics on the turns of its wire item (`item["turns"]`), in place.

    `loss_mask`: the completion tokens the loss counted (`trainers.learn.step.loss_mask`)."""
    spans = _model_turn_spans(rollout)
    if spans is None:
        return
    behaviour = rollout.behaviour_logprobs
    learner = recorder.logprobs.get(id(rollout)) if recorder is not None else None
    entropy = recorder.entropies.get(id(rollout)) if recorder is not None else None
    token_adv = rollout.token_advantages
    for index, start, end in spans:
        turn = rollout.trajectory.turns[index]
        if turn.role != "assistant" or end == start:
            continue
        positions = range(start, end)
        mask = [loss_mask[p] if p < len(loss_mask) else 0 for p in positions]
        stats: dict[str, str] = {
            "logprob": wire.pack_halves(behaviour[p] if p < len(behaviour) else None for p in positions),
            "advantage": wire.pack_halves(
                (token_adv[p] if token_adv is not None and p < len(token_adv) else rollout.advantage) * m
                for p, m in zip(positions, mask, strict=True)
            ),
        }
        if learner is not None:
            stats["gap"] = wire.pack_halves(
                learner[p] - behaviour[p] if p < len(learner) and p < len(behaviour) else None
                for p in positions
            )
        if entropy is not None:
            stats["entropy"] = wire.pack_halves(entropy[p] if p < len(entropy) else None for p in positions)
        lengths = _text_lengths(tokenizer, list(turn.token_ids or []), turn.text)
        if lengths is not None:
            stats["text_lengths"] = wire.pack_octets(lengths)
        item["turns"][index]["token_stats"] = stats

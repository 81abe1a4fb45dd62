"""The metrics of a training step, each computed by one function, whichever trainer reports it.

- `step_metrics`: what the step's trajectories say (rewards, lengths, turns, accuracy, criteria, groups
  without signal). Our trainer reports it for its training and evaluation batches, and the importers of
  other trainers' runs (TRL, verl, ATIF) for theirs, so `reward/std` means one thing on every curve:
  the unbiased sample std, and a group lacks signal by `algorithms.group_stats`' rule.
- `update_metrics`: what one policy update did (loss, clipping, KL, entropy, gradient norm, advantages,
  staleness and the sampler/learner log-prob gap), from the update's sums (`UpdateTotals`), the same
  for the single-process learner and the learner shards.

Pure Python: the importers run without torch. tests/test_layering.py fails when a second function
writes one of these names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from trainers.learn import algorithms
from trainers.sdk.wire import MAX_METRIC_NAME
from trainers.types import model_turns


@dataclass(frozen=True)
class StepSample:
    """What a step's metrics read of one trajectory. The fields after `components` are known to our own
    trainer only; a metric whose input some sample lacks (None) is left out."""

    reward: float
    status: str = "ok"
    components: Sequence[Mapping[str, Any]] = ()
    env_reward: float | None = None
    completion_tokens: int | None = None
    assistant_turns: int | None = None
    tool_calls: int | None = None
    correct: bool | None = None  # the environment's verdict, when it gave one
    graded: bool = False  # the task has an answer: an episode that never answered counts as wrong

    @classmethod
    def of_rollout(cls, rollout: Any) -> StepSample:
        """One of our rollouts (`trainers.rollout.episodes.Rollout`), scored."""
        trajectory = rollout.trajectory
        return cls(
            reward=rollout.reward,
            status=trajectory.status,
            components=rollout.components,
            env_reward=trajectory.env_reward,
            completion_tokens=rollout.model_tokens,
            assistant_turns=trajectory.model_turns,
            tool_calls=trajectory.tool_calls,
            correct=trajectory.info.get("correct"),
            graded=rollout.task.answer is not None,
        )

    @classmethod
    def of_item(cls, item: Mapping[str, Any]) -> StepSample:
        """A trajectory in the wire format (`trainers.sdk.wire.TRAJECTORY`), as the importers build them."""
        return cls(
            reward=float(item["reward"]),
            status=str(item.get("status") or "ok"),
            components=item.get("components") or (),
            assistant_turns=model_turns(item["turns"]) if item.get("turns") else None,
        )


def groups_of_items(items: Sequence[Mapping[str, Any]]) -> list[list[StepSample]]:
    """Wire-format trajectories grouped by their `group` number, in order of appearance."""
    groups: dict[Any, list[StepSample]] = {}
    for item in items:
        groups.setdefault(item.get("group", 0), []).append(StepSample.of_item(item))
    return list(groups.values())


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _metric_name(name: str) -> str:
    return name[:MAX_METRIC_NAME]


def step_metrics(
    groups: Sequence[Sequence[StepSample]], *, split: str = "train", prefix: str = ""
) -> dict[str, float]:
    """The step's metrics from its groups of trajectories (a training step: every group it generated,
    dropped ones included; an evaluation: one group per task). `zero_variance_fraction` is reported for
    training groups only: an evaluation group is never trained on."""
    samples = [s for g in groups for s in g]
    if not samples:
        return {}
    batch = algorithms.group_stats([s.reward for s in samples], split)
    metrics = {
        f"{prefix}reward/mean": batch.mean,
        f"{prefix}reward/std": batch.std,
        f"{prefix}reward/max": batch.high,
    }
    for name, field_name in (
        ("env_reward/mean", "env_reward"),
        ("response_length", "completion_tokens"),
        ("turns", "assistant_turns"),
        ("tool_calls", "tool_calls"),
    ):
        values = [getattr(s, field_name) for s in samples]
        if all(v is not None for v in values):
            metrics[f"{prefix}{name}"] = _mean(values)
    metrics[f"{prefix}truncated_fraction"] = _mean([s.status == "truncated" for s in samples])
    metrics[f"{prefix}error_fraction"] = _mean([s.status == "error" for s in samples])
    # Tasks with an answer are graded: one that never answered (truncated) counts as wrong, so the
    # accuracy curve has no gaps when a whole batch runs out of turns.
    if any(s.correct is not None for s in samples) or any(s.graded for s in samples):
        metrics[f"{prefix}accuracy"] = _mean([bool(s.correct) for s in samples])
    criteria: dict[str, list[tuple[float, float]]] = {}
    for s in samples:
        for c in s.components:
            raw, weighted = c.get("raw"), c.get("weighted")
            criteria.setdefault(c["name"], []).append(
                (float(raw if raw is not None else 0.0), float(weighted if weighted is not None else 0.0))
            )
    for name, values in criteria.items():
        raw_name = _metric_name(f"{prefix}criterion/{name}")
        metrics[raw_name] = _mean([v[0] for v in values])
        weighted_name = _metric_name(f"{prefix}criterion/{name}/weighted")
        if weighted_name != raw_name:
            metrics[weighted_name] = _mean([v[1] for v in values])
    if split == "train":
        flags = [algorithms.group_stats([s.reward for s in g], split).zero_variance for g in groups if g]
        metrics[f"{prefix}zero_variance_fraction"] = _mean(flags)
    return metrics


@dataclass
class UpdateTotals:
    """One update's sums over its micro-batches (over the learner shards too: `combined`)."""

    loss: float = 0.0  # summed over epochs; the metric is the mean per epoch
    clipped_tokens: float = 0.0
    tokens: float = 0.0
    kl_sum: float = 0.0
    ratio_sum: float = 0.0
    entropy_sum: float = 0.0  # first epoch only
    grad_norm: float = 0.0  # the last epoch's, before clipping: the same on every shard, never summed
    mismatch_sum: float = 0.0  # |log π_learner − log π_behaviour| on the first epoch's tokens
    mismatch_tokens: float = 0.0
    is_weight_sum: float = 0.0

    @classmethod
    def combined(cls, parts: Sequence[UpdateTotals]) -> UpdateTotals:
        summed = cls(**{f.name: sum(getattr(p, f.name) for p in parts) for f in fields(cls)})
        summed.grad_norm = parts[0].grad_norm
        return summed


def update_metrics(
    totals: UpdateTotals,
    *,
    epochs: int,
    trained_tokens: float,
    loss_tokens: float,
    trained_sequences: int,
    advantages: Sequence[float],
    staleness: Sequence[int],
    corrected: bool,
) -> dict[str, float]:
    """One update's metrics. `trained_tokens`: the loss-mask tokens of the rows that had a gradient
    (entropy's denominator); `loss_tokens`: every loss-mask token (the loss normaliser)."""
    active_tokens = max(totals.tokens, 1.0)
    metrics = {
        "loss": totals.loss / epochs,
        "clip_fraction": totals.clipped_tokens / active_tokens,
        "kl": totals.kl_sum / active_tokens,
        "ratio_mean": totals.ratio_sum / active_tokens,
        "entropy": totals.entropy_sum / max(trained_tokens, 1),
        "grad_norm": totals.grad_norm,
        "advantage/mean": sum(advantages) / len(advantages),
        "advantage/abs_mean": sum(abs(a) for a in advantages) / len(advantages),
        "loss_tokens": loss_tokens,
        "trained_sequences": float(trained_sequences),
        # How far behind the learner the batch was sampled, and how much the sampler's log-probs differ
        # from the learner's on the trained tokens (the gap AReaL and NeMo-RL report; non-zero even when
        # synchronous, from numerics and a different backend).
        "staleness/mean": sum(staleness) / max(len(staleness), 1),
        "staleness/max": float(max(staleness, default=0)),
    }
    if totals.mismatch_tokens:
        metrics["logprob_mismatch/mean"] = totals.mismatch_sum / totals.mismatch_tokens
        if corrected:
            metrics["is_weight/mean"] = totals.is_weight_sum / totals.mismatch_tokens
    return metrics


def service_pass_metrics(
    *, loss_sum: float, loss_tokens: float, tokens: int, seconds: float
) -> dict[str, float]:
    """One forward-backward pass a client asked the Tinker-compatible service for (trainers/tinker): the
    loss as the client's loss function summed it, per loss token (what the GRPO curves' `loss` is closest
    to), the tokens it read and how fast."""
    return {
        "loss": loss_sum / max(loss_tokens, 1.0),
        "loss_sum": loss_sum,
        "loss_tokens": loss_tokens,
        "tokens": float(tokens),
        "tokens_per_s": tokens / max(seconds, 1e-9),
    }


def service_step_metrics(*, grad_norm: float, learning_rate: float, seconds: float) -> dict[str, float]:
    """One optimizer step a client asked the Tinker-compatible service for: the gradient norm before
    clipping and the learning rate the client gave."""
    return {"grad_norm": grad_norm, "learning_rate": learning_rate, "optim_step_s": seconds}

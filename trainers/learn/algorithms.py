"""Advantage estimators of the GRPO family, dynamic sampling and the overlong penalty.

Pure functions on lists of floats: a batch is a list of groups, each group the rewards of the
completions sampled for one prompt. Every estimator is "baseline, then scale":

| estimator     | baseline                         | default scale |
|---------------|----------------------------------|---------------|
| grpo          | group mean                       | group std     |
| dr_grpo       | group mean                       | none          |
| dapo          | group mean                       | group std     |
| rloo          | mean of the *other* group members| none          |
| reinforce_pp  | group mean                       | batch std     |

Standard deviations are the unbiased sample std (as in the DeepSeekMath and TRL implementations);
a group of one has no spread, so its advantage is 0. "batch" scaling whitens the centred values of
the whole batch (REINFORCE++-baseline, at sequence level).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Groups = Sequence[Sequence[float]]

DEFAULT_SCALE = {"grpo": "group", "dr_grpo": "none", "dapo": "group", "rloo": "none", "reinforce_pp": "batch"}
BASELINE = {
    "grpo": "mean",
    "dr_grpo": "mean",
    "dapo": "mean",
    "rloo": "leave_one_out",
    "reinforce_pp": "mean",
}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _std(values: Sequence[float]) -> float:
    """Unbiased sample standard deviation; 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    mean = _mean(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def centred(groups: Groups, baseline: str = "mean") -> list[list[float]]:
    """Rewards minus the baseline of their group: the group mean or the leave-one-out mean."""
    result = []
    for group in groups:
        size = len(group)
        if size < 2:
            result.append([0.0] * size)
        elif baseline == "mean":
            mean = _mean(group)
            result.append([r - mean for r in group])
        elif baseline == "leave_one_out":
            total = sum(group)
            result.append([r - (total - r) / (size - 1) for r in group])
        else:
            raise ValueError(f"unknown baseline {baseline!r}")
    return result


def scaled(centred_groups: Groups, raw_groups: Groups, scale: str, epsilon: float) -> list[list[float]]:
    """Divide centred values by the std of their group's rewards, or whiten them over the batch."""
    if scale == "none":
        return [list(g) for g in centred_groups]
    if scale == "group":
        return [
            [a / (_std(raw) + epsilon) for a in group]
            for group, raw in zip(centred_groups, raw_groups, strict=True)
        ]
    if scale == "batch":
        flat = [a for group in centred_groups for a in group]
        mean, std = _mean(flat), _std(flat)
        return [[(a - mean) / (std + epsilon) for a in group] for group in centred_groups]
    raise ValueError(f"unknown advantage scaling {scale!r}")


def advantages(
    groups: Groups, algorithm: str = "grpo", scale_rewards: str = "auto", epsilon: float = 1e-6
) -> list[list[float]]:
    """Per-completion advantages, shaped like `groups`. `scale_rewards="auto"` takes the estimator's own."""
    if algorithm not in BASELINE:
        raise ValueError(f"unknown algorithm {algorithm!r}; known: {', '.join(BASELINE)}")
    scale = DEFAULT_SCALE[algorithm] if scale_rewards == "auto" else scale_rewards
    return scaled(centred(groups, BASELINE[algorithm]), groups, scale, epsilon)


def group_local(algorithm: str, scale_rewards: str = "auto") -> bool:
    """Whether a group's advantages depend on that group alone (so they are known as soon as it is scored):
    not when they are whitened over the whole batch."""
    return (DEFAULT_SCALE[algorithm] if scale_rewards == "auto" else scale_rewards) != "batch"


class BuiltinEstimator:
    """The built-in estimators as registered parts (`trainers.parts`): the config's `algorithm` names the
    baseline and the default scale, `scale_rewards` and `advantage_epsilon` the rest."""

    def __init__(self, config: Any, options: dict[str, Any]) -> None:
        self.algorithm, self.scale_rewards = config.algorithm, config.scale_rewards
        self.epsilon = config.advantage_epsilon

    def advantages(self, groups: Groups) -> list[list[float]]:
        return advantages(groups, self.algorithm, self.scale_rewards, self.epsilon)

    @property
    def group_local(self) -> bool:
        return group_local(self.algorithm, self.scale_rewards)


def grpo_advantages(groups: Groups, epsilon: float = 1e-6) -> list[list[float]]:
    return advantages(groups, "grpo", epsilon=epsilon)


def dr_grpo_advantages(groups: Groups) -> list[list[float]]:
    return advantages(groups, "dr_grpo")


def dapo_advantages(groups: Groups, epsilon: float = 1e-6) -> list[list[float]]:
    return advantages(groups, "dapo", epsilon=epsilon)


def rloo_advantages(groups: Groups) -> list[list[float]]:
    return advantages(groups, "rloo")


def reinforce_pp_advantages(groups: Groups, epsilon: float = 1e-6) -> list[list[float]]:
    return advantages(groups, "reinforce_pp", epsilon=epsilon)


# Rewards spanning less than this are "all the same": every advantage is (about) zero.
ZERO_VARIANCE_SPAN = 1e-9


@dataclass(frozen=True)
class GroupStats:
    """A group's rewards summed up: what the live feed, the group pages, the API and the trainer show.

    `std` is the unbiased sample std (0 for a group of one), as in the advantages. `zero_variance` is the
    "no learning signal" flag: only a *training* group can lack signal — an evaluation "group" is one
    task's samples, scored, never trained on.
    """

    size: int
    mean: float
    std: float
    low: float
    high: float
    zero_variance: bool

    def to_dict(self) -> dict[str, float | int | bool]:
        return {
            "size": self.size,
            "mean": self.mean,
            "std": self.std,
            "min": self.low,
            "max": self.high,
            "zero_variance": self.zero_variance,
        }


def group_stats(rewards: Sequence[float], split: str = "train") -> GroupStats:
    """The one computation of a group's statistics (see GroupStats)."""
    if not rewards:
        return GroupStats(0, 0.0, 0.0, 0.0, 0.0, split == "train")
    low, high = min(rewards), max(rewards)
    same = high - low < ZERO_VARIANCE_SPAN
    return GroupStats(
        len(rewards), _mean(rewards), 0.0 if same else _std(rewards), low, high, split == "train" and same
    )


def is_zero_variance(group: Sequence[float]) -> bool:
    """True when every completion of a training group scored the same: GRPO gets no signal from it."""
    return group_stats(group).zero_variance


def overlong_penalty(length: int, max_length: int, buffer: int, penalty: float = 1.0) -> float:
    """DAPO's soft overlong punishment (≤ 0; Yu et al., 2025, eq. 13): nothing up to `max_length - buffer`,
    then a linear ramp reaching `-penalty` at `max_length`, and `-penalty` beyond it. With no buffer it
    is a cliff: 0 up to `max_length`, `-penalty` past it. The `overlong_penalty` rubric criterion and the
    run's overlong knobs (which configure that criterion) both compute it here."""
    start = max_length - buffer
    if length <= start:
        return 0.0
    if length > max_length or buffer <= 0:
        return -penalty
    return -penalty * (length - start) / buffer

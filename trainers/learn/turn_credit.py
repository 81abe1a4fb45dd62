"""Per-turn credit: what turn judgements say as per-turn rewards, and how per-turn rewards become
per-token advantages (docs/trainers.md, "Per-turn advantages"; docs/review.md, "Per-turn preferences").

A GRPO-family advantage is one number per trajectory: every token of a ten-turn episode is pushed the
same way, the turn that broke it and the turns that were fine alike. Where something scores turns (a
rubric criterion with per-turn values; a learned reward scored per turn; people marking the turn where
a trajectory went wrong), each turn can be credited on its own. The rule here, after OPRL (step rewards
normalised within the group and added to the outcome advantage):

    step advantage of turn t   = (r_t − mean_G) / (std_G + ε)   over every scored turn of the group G
    advantage of t's tokens    = A_trajectory + weight · step advantage of t

Turns without a per-turn reward get the trajectory's advantage alone. Identical per-turn rewards across
the group (std 0) add nothing; no per-turn rewards at all, or weight 0, give exactly the per-trajectory
advantages (`advantage_tensor` then returns the same one-value-per-sequence tensor as before).

Plain Python and torch only: the trainer, the learner shards and the dashboard (for display) share it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

# What one annotator's judgement says about a turn, before averaging (the scale of judged rewards).
GOOD, BAD = 1.0, -1.0


# --- judgements → per-turn rewards (attribution) -------------------------------------------------------


def wrong_mark_labels(assistant_turns: Sequence[int], wrong_at: int) -> dict[int, float]:
    """One "went wrong at turn `wrong_at`" mark as per-turn labels: the assistant turns before it +1, the
    marked turn and every assistant turn after it −1 (once an episode has gone wrong, what follows acts
    from a broken state, as process-reward labelling treats steps after the first error)."""
    return {t: (GOOD if t < wrong_at else BAD) for t in assistant_turns}


def judged_turn_rewards(
    assistant_turns: Sequence[int],
    *,
    wrong_marks: Sequence[int] = (),
    won: Sequence[int] = (),
    lost: Sequence[int] = (),
) -> dict[int, float]:
    """A trajectory's per-turn rewards from its turn judgements: the mean, per assistant turn, of every
    label any judgement gives it — each "went wrong" mark (`wrong_mark_labels`), +1 for each time the turn
    was preferred over another at the same point (`won`), −1 for each time another was preferred (`lost`).
    Only turns some judgement labels appear; values lie in [−1, 1]."""
    turns = set(assistant_turns)
    labels: dict[int, list[float]] = {}
    for mark in wrong_marks:
        for t, value in wrong_mark_labels(sorted(turns), mark).items():
            labels.setdefault(t, []).append(value)
    for t in won:
        if t in turns:
            labels.setdefault(t, []).append(GOOD)
    for t in lost:
        if t in turns:
            labels.setdefault(t, []).append(BAD)
    return {t: sum(values) / len(values) for t, values in sorted(labels.items())}


# --- per-turn rewards → per-token advantages -----------------------------------------------------------


def step_advantages(
    group_turn_rewards: Sequence[Mapping[int, float]], epsilon: float = 1e-6
) -> list[dict[int, float]]:
    """Each sample's per-turn rewards, standardised over every scored turn of its group (all samples)."""
    values = [float(v) for rewards in group_turn_rewards for v in rewards.values() if math.isfinite(v)]
    if len(values) < 2:
        return [{} for _ in group_turn_rewards]
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    if std < epsilon:
        return [{} for _ in group_turn_rewards]
    return [
        {int(t): (float(v) - mean) / (std + epsilon) for t, v in rewards.items() if math.isfinite(v)}
        for rewards in group_turn_rewards
    ]


def completion_turns(
    turn_lengths: Sequence[int], prompt_length: int, completion_length: int
) -> list[int] | None:
    """The turn index of every completion token, from the token count of each turn (in order) and the
    prompt's length; None when the turns do not tile prompt + completion exactly (a trainer that did not
    report its turns' tokens), so nothing is credited to the wrong turn."""
    if sum(turn_lengths) != prompt_length + completion_length:
        return None
    owners: list[int] = []
    for index, length in enumerate(turn_lengths):
        owners.extend([index] * length)
    return owners[prompt_length:]


def token_advantages(
    advantage: float,
    steps: Mapping[int, float],
    owners: Sequence[int] | None,
    weight: float,
) -> list[float] | None:
    """Per-token advantages of one trajectory: `advantage` plus `weight` × its turn's step advantage
    (`step_advantages`), for each completion token whose turn is `owners[i]`. None — the trajectory's
    one advantage for every token — when there is nothing to add."""
    if weight == 0 or not steps or owners is None:
        return None
    return [advantage + weight * steps.get(turn, 0.0) for turn in owners]


def advantage_tensor(
    advantages: Sequence[float], per_token: Sequence[Sequence[float] | None], width: int, device: Any = None
) -> Any:
    """The advantages `trainers.learn.losses.policy_loss` takes for a micro-batch: one value per sequence
    (shape (B,), exactly as before) when no row has per-token advantages, else (B, width), each row its
    per-token advantages (padded with its trajectory advantage) or its one advantage repeated. Aligned
    with the loss mask: column j is completion token j, as in `completion_logprobs`."""
    import torch

    if all(row is None for row in per_token):
        return torch.tensor([float(a) for a in advantages], device=device)
    out = torch.tensor([[float(a)] * width for a in advantages], device=device).reshape(
        len(advantages), width
    )
    for i, row in enumerate(per_token):
        if row:
            n = min(len(row), width)
            out[i, :n] = torch.tensor([float(v) for v in row[:n]], device=device)
    return out


def rollout_token_advantages(rollout: Any, steps: Mapping[int, float], weight: float) -> list[float] | None:
    """`token_advantages` for a trainer's Rollout: its turns' token counts locate each completion token."""
    lengths = [len(t.token_ids or []) for t in rollout.trajectory.turns]
    owners = completion_turns(lengths, len(rollout.prompt_ids), len(rollout.completion_ids))
    return token_advantages(rollout.advantage, steps, owners, weight)

"""Entropy-adaptive branching rollouts (ARPO, "Agentic Reinforced Policy Optimization"; AEPO, "Agentic
Entropy-Balanced Policy Optimization"): the knobs and the rules, plain Python. The rollout loop that follows
them is `trainers.rollout.branched`, the shared prefix's credit `trainers.learn.branch_credit`; `rollout_strategy: branching` picks it for any GRPO-family run.

A group's sample budget is its `group_size` G. The rollout starts M global samples (`branch_initial_samples`,
0 = half the group). Each sample's first answer sets its initial entropy H_init: the mean entropy of the
first k sampled tokens (`branch_entropy_tokens`). After every tool result, the first k tokens of the next
turn give H_t, and the normalised rise ΔH = (H_t − H_init) / H_init decides a branch (`branch_decision`):

    where ΔH ≥ τ (`branch_threshold`), branch when a uniform draw u ≤ (α + β·ΔH) · (1 − penalty)^l

with α the base probability (`branch_base_probability`), β the entropy weight (`branch_entropy_weight`) and
l the consecutive branch points on this path (AEPO's penalty, `branch_consecutive_penalty`; 0 = ARPO). With
α = 0.5, β = 0.2 and τ = −1 this is exactly the reference code's `random() − w·ΔH ≤ branch_probability`;
the default τ = 0 branches only where the entropy rose, which is the paper's stated rule. A branch point
gives `branch_factor` − 1 new partial rollouts (the path itself goes on: the reference code's beam size):
they copy the prefix's tokens (prompt, turns, the tool result) and the environment, and sample the next
turn afresh. Branching stops when the budget is spent; whatever is left when the group's paths are done is
filled with global samples.

AEPO's entropy pre-monitoring (`branch_budget_split: entropy`) splits the budget by what is uncertain: after
the first answer of a group's first G/4 samples, the global share is σ(H_root − H_tool) of G, with H_root
the question's initial entropy and H_tool the mean entropy after tool results seen so far in the run — a
question the model is unsure of gets more whole samples, a tool the model is unsure after gets more
branches. (AEPO measures H_tool by a pre-rollout of the question; here the run's running mean stands in.)

The shared prefix's credit (`branch_attribution`): "soft" — plain GRPO on each full sequence, so a token
shared by n samples is pushed by all n advantages (ARPO's choice, more stable in its Figure 5); "hard" —
each shared token gets the mean advantage of the samples that share it
(`trainers.learn.branch_credit.hard_token_advantages`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# AEPO's pre-monitoring split: global share σ(PRESPLIT_SHARPNESS · (H_root − H_tool)), entropies in nats.
PRESPLIT_SHARPNESS = 1.0
# The initial entropy below which ΔH is measured against this floor (a near-certain first answer).
ENTROPY_FLOOR = 1e-3


def _knob(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "x-group": "branching"}


BRANCHING_KNOBS: dict[str, Any] = {
    "branch_initial_samples": _knob(
        {
            "type": "integer",
            "title": "Initial global samples (M)",
            "description": "Whole samples each group starts with; the rest of the budget goes to branches, "
            "and what branching leaves unspent to more global samples. 0: half the group (ARPO: 8 of 16).",
            "default": 0,
            "minimum": 0,
            "maximum": 1024,
        }
    ),
    "branch_entropy_tokens": _knob(
        {
            "type": "integer",
            "title": "Entropy window (k)",
            "description": "Tokens at the start of a turn whose mean entropy is measured: the first "
            "answer's sets the initial entropy, the turn after each tool result's is compared with it.",
            "default": 20,
            "minimum": 1,
            "maximum": 512,
        }
    ),
    "branch_threshold": _knob(
        {
            "type": "number",
            "title": "Branch threshold (τ)",
            "description": "The normalised entropy rise ΔH = (H_t − H_init) / H_init a tool step needs "
            "before a branch is drawn at all. 0: any rise; −1: every tool step (ARPO's reference code).",
            "default": 0.0,
            "minimum": -1,
            "maximum": 100,
        }
    ),
    "branch_base_probability": _knob(
        {
            "type": "number",
            "title": "Base probability (α)",
            "description": "Branch probability at a tool step with no entropy change; ARPO's 0.5.",
            "default": 0.5,
            "minimum": 0,
            "maximum": 1,
        }
    ),
    "branch_entropy_weight": _knob(
        {
            "type": "number",
            "title": "Entropy weight (β)",
            "description": "How much each unit of normalised rise adds to the branch probability; ARPO's 0.2.",
            "default": 0.2,
            "minimum": 0,
            "maximum": 100,
        }
    ),
    "branch_factor": _knob(
        {
            "type": "integer",
            "title": "Branch factor (Z)",
            "description": "Paths out of a branch point, the one that goes on included: Z − 1 new partial "
            "rollouts per branch (ARPO's beam size 2).",
            "default": 2,
            "minimum": 2,
            "maximum": 64,
        }
    ),
    "branch_attribution": _knob(
        {
            "type": "string",
            "title": "Shared-prefix credit",
            "description": "soft: plain GRPO on each full sequence (a shared token gets every sharing "
            "sample's advantage, ARPO's default); hard: a shared token gets the mean advantage of the "
            "samples that share it.",
            "enum": ["soft", "hard"],
            "default": "soft",
        }
    ),
    "branch_budget_split": _knob(
        {
            "type": "string",
            "title": "Budget split",
            "description": "fixed: M global samples, the rest branches (ARPO); entropy: AEPO's "
            "pre-monitoring — the global share is σ(H_question − H_tool) of the group, from the question's "
            "first-answer entropy and the run's mean entropy after tool results.",
            "enum": ["fixed", "entropy"],
            "default": "fixed",
        }
    ),
    "branch_consecutive_penalty": _knob(
        {
            "type": "number",
            "title": "Consecutive-branch penalty",
            "description": "AEPO: each branch point in a row on one path multiplies the next branch "
            "probability by (1 − this), so the budget is not spent down one path. 0: off (ARPO).",
            "default": 0.0,
            "minimum": 0,
            "maximum": 1,
        }
    ),
    "entropy_balanced_clip": _knob(
        {
            "type": "boolean",
            "title": "Entropy-balanced update",
            "description": "AEPO: tokens clipped above 1 + clip_high (the high-entropy ones a positive "
            "advantage pushes hardest) keep a gradient — the clipped value with a stop-gradient on the "
            "ratio's scale — instead of none (trainers.learn.losses.policy_loss).",
            "default": False,
        }
    ),
}


def initial_samples(group_size: int, asked: int) -> int:
    """M: the global samples a group starts with (at least 1, at most the group)."""
    m = asked if asked > 0 else group_size // 2
    return max(1, min(group_size, m))


def mean_entropy(entropies: Sequence[float] | None, window: int) -> float | None:
    """The mean entropy of a turn's first `window` tokens; None when the backend measured none."""
    values = list(entropies or ())[:window]
    return sum(values) / len(values) if values else None


def entropy_rise(current: float, initial: float) -> float:
    """ΔH: the rise of a turn's entropy over the sample's initial entropy, relative to the initial one."""
    return (current - initial) / max(initial, ENTROPY_FLOOR)


def branch_probability(rise: float, *, base: float, weight: float, penalty: float, consecutive: int) -> float:
    """The chance of a branch at a tool step with normalised rise `rise` on a path that branched at its
    last `consecutive` tool steps: (α + β·ΔH) · (1 − penalty)^l, clipped to [0, 1]."""
    p = (base + weight * rise) * (1.0 - penalty) ** consecutive
    return min(1.0, max(0.0, p))


@dataclass(frozen=True)
class BranchDecision:
    branch: bool
    rise: float
    probability: float


def branch_decision(
    config: Any, rng: random.Random, current: float, initial: float, consecutive: int
) -> BranchDecision:
    """Whether a path branches at a tool step (see the module docstring); one draw from `rng`."""
    rise = entropy_rise(current, initial)
    p = branch_probability(
        rise,
        base=config.branch_base_probability,
        weight=config.branch_entropy_weight,
        penalty=config.branch_consecutive_penalty,
        consecutive=consecutive,
    )
    draw = rng.random()
    return BranchDecision(rise >= config.branch_threshold and draw < p, rise, p)


def global_share(group_size: int, root_entropy: float, tool_entropy: float | None, least: int) -> int:
    """AEPO's pre-monitoring: how many of a group's samples are global, from the question's initial
    entropy and the mean entropy after tool results (None before any was seen: half the group)."""
    if tool_entropy is None:
        share = 0.5
    else:
        share = 1.0 / (1.0 + math.exp(-PRESPLIT_SHARPNESS * (root_entropy - tool_entropy)))
    return max(least, min(group_size, round(group_size * share)))


@dataclass
class EntropyMonitor:
    """What a rollout source has seen of the entropy after tool results (AEPO's H_tool), across steps."""

    tool_entropy_sum: float = 0.0
    tool_steps: int = 0
    recent: list[float] = field(default_factory=list)

    def observe(self, entropy: float) -> None:
        self.tool_entropy_sum += entropy
        self.tool_steps += 1

    @property
    def tool_entropy(self) -> float | None:
        return self.tool_entropy_sum / self.tool_steps if self.tool_steps else None


def spent_tool_calls(turns: Sequence[tuple[str, str | None]], branch: dict[str, Any] | None) -> int:
    """The tool calls a trajectory made on its own segment, from its turns' (role, tool name) in order: a
    branch's shared prefix was run once, by its parent (its environment was copied, not replayed), so the
    sum over a group is what the group spent. A whole sample's are all of its calls."""
    start = int((branch or {}).get("turn") or 0)
    return sum(
        1 for index, (role, tool) in enumerate(turns) if index >= start and role == "assistant" and tool
    )

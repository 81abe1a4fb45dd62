"""What every criterion is and returns. Plain Python: safe to import in the web process."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import regex

from trainers.types import Trajectory


@dataclass
class CriterionResult:
    """One criterion's verdict on one trajectory.

    `raw` is the unweighted value; `turn_rewards` maps turn indices (positions in
    `trajectory.turns`) to per-turn values where the criterion gives them; `provenance` records what
    produced the value (judge model and cache key, reward model path and hash…).
    """

    raw: float
    explanation: str
    turn_rewards: dict[int, float] | None = None
    provenance: dict[str, Any] = field(default_factory=dict)


class CriterionUnavailable(RuntimeError):
    """The criterion cannot score in this process: its model, reward model or function is not here.

    The web process's rubric preview reports such components as skipped; the trainer lets it raise.
    """


class Criterion:
    """Base class of criteria. Subclasses take their params as keyword arguments."""

    def score(self, trajectory: Trajectory) -> CriterionResult:
        raise NotImplementedError

    def score_many(self, trajectories: list[Trajectory]) -> list[CriterionResult]:
        """Score a group; criteria that batch work (an LLM judge) override this."""
        return [self.score(t) for t in trajectories]

    @classmethod
    def check_config(cls, params: dict[str, Any]) -> dict[str, list[str]]:
        """Errors the JSON schema cannot express (an invalid regex, min > max), by param name."""
        return {}


REGEX_FLAGS = {"IGNORECASE": regex.IGNORECASE, "MULTILINE": regex.MULTILINE, "DOTALL": regex.DOTALL}

# A researcher's pattern runs against model output, which is untrusted: a pattern with catastrophic
# backtracking must not hang the rubric preview or a trainer step. The `regex` module (re-compatible
# syntax in its default V0 mode) can abandon a match after a deadline; `re` cannot.
REGEX_TIMEOUT_S = 0.5
# ...and a whole trajectory's worth of matches (one per assistant turn with scope each_assistant) gets
# this much in all, so a 300-turn trajectory cannot cost 300 timeouts.
REGEX_BUDGET_S = 2.0


def compile_regex(pattern: str, flags: list[str] | None = None) -> regex.Pattern:
    value = 0
    for name in flags or []:
        value |= REGEX_FLAGS[name]
    return regex.compile(pattern, value)


def regex_error(pattern: Any, flags: list[str] | None = None) -> str | None:
    if not isinstance(pattern, str):
        return None  # the schema reports the type
    try:
        compile_regex(pattern, [f for f in flags or [] if f in REGEX_FLAGS])
    except (regex.error, re.error) as exc:
        return f"invalid regular expression: {exc}"
    return None

"""The one tally rule: what a pair's votes (and an adjudication, when someone settled the pair) say it is.

Dataset snapshots export it, the disagreements page shows it beside each split pair, and agreement "after
adjudication" reads it: one function, `decide`, so the page can never promise a row the export leaves out.
Plain values only (canonical choices "a", "b", "tie", "both_bad"), no Django.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

SIDES = ("a", "b")

MAJORITY_RULE = (
    "majority: a pair enters the dataset when more than half of its judgements pick the same "
    "side; pairs whose judgements end in tie, both bad or a split vote are left out"
)
ADJUDICATION_RULE = (
    "adjudication: a pair an owner or researcher settled enters with their decision, whatever the votes "
    "(a settled tie or both bad is left out); its row's provenance names who settled it, when, and the "
    "votes the decision overrode"
)
RULE = f"{MAJORITY_RULE}; {ADJUDICATION_RULE}"


@dataclass(frozen=True)
class Decision:
    """What a pair is in a dataset: `side` "a" / "b" when it enters (chosen), else None with `outcome`
    saying why it is left out ("tie", "both_bad", "no_majority"); `adjudicated` when a person decided."""

    outcome: str  # "a", "b", "tie", "both_bad" or "no_majority"
    adjudicated: bool = False

    @property
    def side(self) -> str | None:
        return self.outcome if self.outcome in SIDES else None


def majority(choices: Sequence[str]) -> str | None:
    """The canonical side ("a" / "b") more than half of `choices` picked, else None."""
    votes = Counter(choices)
    for side in SIDES:
        if votes[side] * 2 > len(choices):
            return side
    return None


def decide(choices: Sequence[str], adjudicated: str | None = None) -> Decision:
    """The pair's decision: the adjudication when there is one, else the majority of its votes."""
    if adjudicated:
        return Decision(adjudicated, adjudicated=True)
    side = majority(choices)
    if side is not None:
        return Decision(side)
    votes = Counter(choices)
    for label in ("tie", "both_bad"):
        if votes[label] * 2 > len(choices):
            return Decision(label)
    return Decision("no_majority")


def is_split(choices: Sequence[str]) -> bool:
    """Whether the voters disagree: two or more votes, not all the same."""
    return len(choices) >= 2 and len(set(choices)) > 1

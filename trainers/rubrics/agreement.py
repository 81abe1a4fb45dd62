"""Agreement of two raters over the same items, as plain functions (no Django): the dashboard's
inter-annotator figures (`webapp.review.agreement`) and the judge check (`trainers.rubrics.judge_check`,
a judge against known truth) both compute κ here.

Cohen's kappa: κ = (p_o − p_e) / (1 − p_e), p_o the observed agreement, p_e the agreement expected from each
rater's own category frequencies; undefined (None) when p_e is 1 (both always used one and the same category).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

Category = Hashable


def percent_agreement(first: Sequence[Category], second: Sequence[Category]) -> float | None:
    if len(first) != len(second):
        raise ValueError("both raters must rate the same items")
    if not first:
        return None
    return sum(x == y for x, y in zip(first, second, strict=True)) / len(first)


def cohens_kappa(first: Sequence[Category], second: Sequence[Category]) -> float | None:
    """Cohen's kappa of two raters' labels for the same items, in the same order."""
    observed = percent_agreement(first, second)
    if observed is None:
        return None
    n = len(first)
    counts_first, counts_second = Counter(first), Counter(second)
    expected = sum(counts_first[c] * counts_second[c] for c in counts_first) / (n * n)
    if expected == 1.0:
        return None
    return (observed - expected) / (1 - expected)

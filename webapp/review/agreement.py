"""Inter-annotator agreement: pure functions over plain values (no Django), tested against textbook examples.

- Cohen's kappa (two raters, the same items): κ = (p_o − p_e) / (1 − p_e), where p_o is the observed
  agreement and p_e the agreement expected from each rater's own category frequencies.
- Fleiss' kappa (any number of raters per item, the same number n for every item; the raters need not
  be the same people): P̄ = mean over items of Σ_j n_ij(n_ij − 1) / (n(n − 1)), P̄_e = Σ_j p_j².
- An annotator × annotator matrix of Cohen's kappa and percent agreement over the items both rated.
- Human vs LLM judge: the judge "prefers" the trajectory its component scored higher (equal: tie), and
  is compared with each pair's human majority like a second rater.
- LLM judges as annotators (QueueJudge): each judge's verdict per pair is one more rater in the matrix
  (Cohen's kappa with every person) and is compared with the human majority; how often its two orders
  (A shown first, B shown first) agree is its order consistency.
- Position bias: per annotator, the share of "left" choices among decisive judgements (left or right;
  ties and "both bad" say nothing about position), with an exact two-sided binomial p-value against
  50 %. A judge's "left" is the response shown first, counted per order.

Kappa is undefined when expected agreement is 1 (both raters always used one and the same category);
these functions return None then, and callers show "—" rather than a misleading number.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainers.rubrics.agreement import Category, cohens_kappa, percent_agreement  # the two-rater rule


def fleiss_kappa(table: Sequence[Sequence[int]]) -> float | None:
    """Fleiss' kappa from an items × categories table of counts (row i: how many raters put item i in
    each category). Every row must sum to the same number of raters n ≥ 2."""
    rows = [list(row) for row in table]
    if not rows:
        return None
    raters = sum(rows[0])
    if raters < 2 or any(sum(row) != raters for row in rows):
        raise ValueError("every item needs the same number (≥ 2) of ratings")
    items = len(rows)
    categories = len(rows[0])
    proportions = [sum(row[j] for row in rows) / (items * raters) for j in range(categories)]
    per_item = [(sum(c * c for c in row) - raters) / (raters * (raters - 1)) for row in rows]
    observed = sum(per_item) / items
    expected = sum(p * p for p in proportions)
    if expected == 1.0:
        return None
    return (observed - expected) / (1 - expected)


def fleiss_table(
    ratings: Mapping[Hashable, Sequence[Category]], categories: Sequence[Category]
) -> list[list[int]]:
    """item -> its ratings, as the counts table fleiss_kappa reads (columns in `categories` order)."""
    return [[Counter(labels)[c] for c in categories] for labels in ratings.values()]


@dataclass
class PairwiseAgreement:
    first: str
    second: str
    items: int
    percent: float | None
    kappa: float | None


def agreement_matrix(
    judgements: Iterable[tuple[Hashable, str, Category]],
) -> tuple[list[str], dict[tuple[str, str], PairwiseAgreement]]:
    """From (item, rater, label) triples: the raters (sorted) and, for every two of them, Cohen's kappa
    and percent agreement over the items both rated."""
    by_rater: dict[str, dict[Hashable, Category]] = defaultdict(dict)
    for item, rater, label in judgements:
        by_rater[rater][item] = label
    raters = sorted(by_rater)
    cells: dict[tuple[str, str], PairwiseAgreement] = {}
    for first, second in itertools.combinations(raters, 2):
        shared = sorted(set(by_rater[first]) & set(by_rater[second]), key=repr)
        x = [by_rater[first][i] for i in shared]
        y = [by_rater[second][i] for i in shared]
        cell = PairwiseAgreement(first, second, len(shared), percent_agreement(x, y), cohens_kappa(x, y))
        cells[(first, second)] = cells[(second, first)] = cell
    return raters, cells


def judge_preference(value_a: float | None, value_b: float | None, *, tolerance: float = 1e-9) -> str | None:
    """The LLM judge's implied choice between A and B from its scores of each: "a", "b" or "tie"."""
    if value_a is None or value_b is None:
        return None
    if abs(value_a - value_b) <= tolerance:
        return "tie"
    return "a" if value_a > value_b else "b"


@dataclass
class JudgeAgreement:
    criterion: str
    items: int
    percent: float | None
    kappa: float | None


def human_vs_judge(
    human: Mapping[Hashable, Category], judge: Mapping[Hashable, Category], criterion: str = ""
) -> JudgeAgreement:
    """Agreement of the humans' label per item (e.g. the majority) with the judge's, on items both have."""
    shared = sorted(set(human) & set(judge), key=repr)
    x = [human[i] for i in shared]
    y = [judge[i] for i in shared]
    return JudgeAgreement(criterion, len(shared), percent_agreement(x, y), cohens_kappa(x, y))


CHOICES = ("a", "b", "tie", "both_bad")


def majority_label(labels: Sequence[Category]) -> Category | None:
    """The label more than half of `labels` carry, else None."""
    if not labels:
        return None
    label, count = Counter(labels).most_common(1)[0]
    return label if count * 2 > len(labels) else None


def binomial_p_value(successes: int, trials: int) -> float | None:
    """Exact two-sided binomial test against p = 0.5: the probability of an outcome at least as far from
    trials/2 as `successes`, under a fair coin. None without trials."""
    if trials <= 0:
        return None
    extreme = min(successes, trials - successes)
    # Sum the lower tail with exact integers, then double it (the distribution is symmetric at 0.5).
    tail = sum(math.comb(trials, k) for k in range(extreme + 1))
    return min(1.0, 2 * tail / 2**trials)


@dataclass
class PositionBias:
    """How often one annotator picked the left (first shown) response when they picked a side."""

    rater: str
    order: str  # "" for a person; which response a judge was shown first ("A first" / "B first")
    decisive: int  # judgements that picked a side
    left: int
    undecided: int  # ties and "both bad" (a judge: replies that named neither response)

    @property
    def right(self) -> int:
        return self.decisive - self.left

    @property
    def left_share(self) -> float | None:
        return self.left / self.decisive if self.decisive else None

    @property
    def p_value(self) -> float | None:
        return binomial_p_value(self.left, self.decisive)


def position_bias(sides: Iterable[tuple[str, str, str]]) -> list[PositionBias]:
    """From (rater, order, side) triples — side "left" / "right", anything else undecided — one row per
    (rater, order), sorted. A rater seen in named orders (a judge) also gets a row over all its orders,
    with order ""."""
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for rater, order, side in sides:
        for key in {(rater, order), (rater, "")}:
            row = counts[key]
            if side == "left":
                row[0] += 1
                row[1] += 1
            elif side == "right":
                row[0] += 1
            else:
                row[2] += 1
    return [
        PositionBias(rater, order, decisive, left, undecided)
        for (rater, order), (decisive, left, undecided) in sorted(counts.items())
    ]


@dataclass
class OrderConsistency:
    judge: str
    items: int  # pairs with a readable answer in both orders
    consistent: int  # of those, pairs where both orders picked the same response

    @property
    def share(self) -> float | None:
        return self.consistent / self.items if self.items else None


def order_consistency(judge: str, answers: Mapping[Any, tuple[Category, Category]]) -> OrderConsistency:
    """How often a judge's two answers on a pair (A shown first, B shown first; canonical labels, falsy
    when unreadable) pick the same response."""
    readable = [(first, second) for first, second in answers.values() if first and second]
    return OrderConsistency(judge, len(readable), sum(first == second for first, second in readable))


@dataclass
class AgreementSummary:
    raters: list[str]  # people, then judges
    cells: dict[tuple[str, str], PairwiseAgreement]
    cohen: PairwiseAgreement | None  # when exactly two people judged
    fleiss: float | None  # over the pairs with exactly `fleiss_raters` judgements
    fleiss_items: int
    fleiss_raters: int
    judge: JudgeAgreement | None
    # LLM judges that annotated the queue: each against the human majority, and their position bias
    judges: list[JudgeAgreement] = field(default_factory=list)
    judge_raters: list[str] = field(default_factory=list)
    bias: list[PositionBias] = field(default_factory=list)
    consistency: list[OrderConsistency] = field(default_factory=list)

    def cell(self, first: str, second: str) -> PairwiseAgreement | None:
        return self.cells.get((first, second))

    def is_judge(self, rater: str) -> bool:
        return rater in self.judge_raters


def summarize(
    judgements: Sequence[tuple[Hashable, str, Category]],
    *,
    overlap: int,
    judge_scores: Mapping[Any, tuple[str, float | None, float | None]] | None = None,
    judges: Mapping[str, Mapping[Any, Category]] | None = None,
    judge_answers: Mapping[str, Mapping[Any, tuple[Category, Category]]] | None = None,
    sides: Iterable[tuple[str, str, str]] = (),
) -> AgreementSummary:
    """Everything the queue page shows about agreement, from (pair, annotator, choice) triples.

    Fleiss' kappa needs the same number of ratings per item: it uses the pairs with exactly `overlap`
    judgements (a pair cannot get more). `judge_scores` maps a pair to (criterion, score of A, score of B).
    `judges` maps an LLM judge's label to its verdict per pair: it joins the matrix as one more rater and
    is compared with the human majority, but never enters Cohen's or Fleiss' kappa of the people.
    `judge_answers` maps a judge's label to its two answers per pair, for order_consistency.
    `sides` are (rater, order, side) triples for position_bias.
    """
    people, _ = agreement_matrix(judgements)
    judges = {label: verdicts for label, verdicts in (judges or {}).items() if verdicts}
    judge_triples = [
        (item, label, choice) for label, verdicts in judges.items() for item, choice in verdicts.items()
    ]
    _, cells = agreement_matrix([*judgements, *judge_triples])
    raters = people + sorted(judges)
    cohen = cells.get((people[0], people[1])) if len(people) == 2 else None
    by_item: dict[Hashable, list[Category]] = defaultdict(list)
    for item, _, label in judgements:
        by_item[item].append(label)
    complete = {item: labels for item, labels in by_item.items() if len(labels) == overlap}
    fleiss = fleiss_kappa(fleiss_table(complete, CHOICES)) if overlap >= 2 and complete else None
    humans = {
        item: label for item, labels in by_item.items() if (label := majority_label(labels)) is not None
    }
    judge = None
    if judge_scores:
        preferences = {item: judge_preference(a, b) for item, (_, a, b) in judge_scores.items()}
        preferences = {item: label for item, label in preferences.items() if label is not None}
        criteria = sorted({name for name, _, _ in judge_scores.values()})
        judge = human_vs_judge(humans, preferences, ", ".join(criteria))
    return AgreementSummary(
        raters,
        cells,
        cohen,
        fleiss,
        len(complete) if overlap >= 2 else 0,
        overlap,
        judge,
        judges=[human_vs_judge(humans, verdicts, label) for label, verdicts in sorted(judges.items())],
        judge_raters=sorted(judges),
        bias=position_bias(sides),
        consistency=[
            order_consistency(label, answers) for label, answers in sorted((judge_answers or {}).items())
        ],
    )


def settled(
    judgements: Iterable[tuple[Hashable, str, Category]], decisions: Mapping[Any, Category]
) -> list[tuple[Hashable, str, Category]]:
    """(item, rater, label) triples with every decided item's labels replaced by its decision: the votes
    as a dataset reads them once disagreements are adjudicated."""
    return [(item, rater, decisions.get(item, label)) for item, rater, label in judgements]


def people_kappa(
    judgements: Sequence[tuple[Hashable, str, Category]], *, overlap: int
) -> tuple[float | None, str]:
    """The queue's one κ of people, as its agreement section headlines it: Cohen's when exactly two people
    judged (over the pairs both judged), else Fleiss' over the pairs with all `overlap` judgements. The
    kind is "" when no κ applies (one judgement per pair, or fewer than two people)."""
    people, cells = agreement_matrix(judgements)
    if len(people) == 2:
        return cells[(people[0], people[1])].kappa, "Cohen's κ"
    if overlap < 2 or len(people) < 2:
        return None, ""
    by_item: dict[Hashable, list[Category]] = defaultdict(list)
    for item, _, label in judgements:
        by_item[item].append(label)
    complete = {item: labels for item, labels in by_item.items() if len(labels) == overlap}
    return (fleiss_kappa(fleiss_table(complete, CHOICES)) if complete else None), "Fleiss' κ"

"""Agreement statistics against textbook examples worked by hand, then on a real queue."""

from __future__ import annotations

import pytest

from webapp.review.agreement import (
    agreement_matrix,
    binomial_p_value,
    cohens_kappa,
    fleiss_kappa,
    fleiss_table,
    human_vs_judge,
    judge_preference,
    order_consistency,
    percent_agreement,
    position_bias,
    summarize,
)
from webapp.review.models import QueueJudge


def two_raters(yes_yes: int, yes_no: int, no_yes: int, no_no: int) -> tuple[list[str], list[str]]:
    """A 2×2 contingency table written out as two raters' labels."""
    cells = [("y", "y")] * yes_yes + [("y", "n")] * yes_no + [("n", "y")] * no_yes + [("n", "n")] * no_no
    return [a for a, _ in cells], [b for _, b in cells]


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        # Wikipedia, "Cohen's kappa", worked example: p_o = 35/50 = 0.7; p_e = 0.5·0.6 + 0.5·0.4 = 0.5; κ = 0.4.
        ((20, 5, 10, 15), 0.4),
        # Same page, two tables with p_o = 0.6: p_e = 0.54 → κ = 0.06/0.46; p_e = 0.46 → κ = 0.14/0.54.
        ((45, 15, 25, 15), 0.06 / 0.46),
        ((25, 35, 5, 35), 0.14 / 0.54),
    ],
)
def test_cohens_kappa_matches_the_worked_examples(table, expected):
    first, second = two_raters(*table)
    assert cohens_kappa(first, second) == pytest.approx(expected)


def test_cohens_kappa_edge_cases():
    assert cohens_kappa(["a", "b", "a"], ["a", "b", "a"]) == pytest.approx(1.0)
    # Perfect disagreement on a balanced pair of categories: p_o = 0, p_e = 0.5 → κ = −1.
    assert cohens_kappa(["a", "b"], ["b", "a"]) == pytest.approx(-1.0)
    assert cohens_kappa(["tie", "tie"], ["tie", "tie"]) is None  # p_e = 1: undefined, not 1 or 0
    assert cohens_kappa([], []) is None and percent_agreement([], []) is None
    with pytest.raises(ValueError):
        cohens_kappa(["a"], ["a", "b"])


def test_fleiss_kappa_matches_the_wikipedia_example():
    # 10 items, 14 raters, 5 categories: P̄ = 0.378, P̄_e = 0.213, κ = 0.210 (Wikipedia, "Fleiss' kappa").
    table = [
        [0, 0, 0, 0, 14],
        [0, 2, 6, 4, 2],
        [0, 0, 3, 5, 6],
        [0, 3, 9, 2, 0],
        [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0],
        [3, 2, 6, 3, 0],
        [2, 5, 3, 2, 2],
        [6, 5, 2, 1, 0],
        [0, 2, 2, 3, 7],
    ]
    assert fleiss_kappa(table) == pytest.approx(0.2099, abs=5e-4)


def test_fleiss_kappa_by_hand_on_three_raters():
    # Items (a,a,a), (a,a,b), (b,b,b), (a,b,b): P_i = 1, 1/3, 1, 1/3 → P̄ = 2/3; p_a = p_b = 1/2 → P̄_e = 1/2;
    # κ = (2/3 − 1/2) / (1/2) = 1/3.
    ratings = {1: ["a", "a", "a"], 2: ["a", "a", "b"], 3: ["b", "b", "b"], 4: ["a", "b", "b"]}
    assert fleiss_table(ratings, ["a", "b"]) == [[3, 0], [2, 1], [0, 3], [1, 2]]
    assert fleiss_kappa(fleiss_table(ratings, ["a", "b"])) == pytest.approx(1 / 3)
    assert fleiss_kappa([[3, 0], [3, 0]]) is None
    with pytest.raises(ValueError):
        fleiss_kappa([[3, 0], [1, 1]])


def test_agreement_matrix_compares_raters_on_shared_items():
    judgements = [
        (1, "carol", "a"),
        (2, "carol", "b"),
        (3, "carol", "a"),
        (4, "carol", "b"),
        (1, "frank", "a"),
        (2, "frank", "b"),
        (3, "frank", "b"),
        (4, "frank", "b"),
        (1, "bob", "a"),
        (5, "bob", "tie"),
    ]
    raters, cells = agreement_matrix(judgements)
    assert raters == ["bob", "carol", "frank"]
    carol_frank = cells[("carol", "frank")]
    # 3 of 4 agree; p_e = (2·1 + 2·3)/16 = 0.5 → κ = 0.5.
    assert (carol_frank.items, carol_frank.percent, carol_frank.kappa) == (4, 0.75, pytest.approx(0.5))
    assert cells[("frank", "carol")] is carol_frank
    assert cells[("bob", "carol")].items == 1 and cells[("bob", "carol")].kappa is None


def test_judge_preference_and_agreement_with_humans():
    assert judge_preference(0.8, 0.2) == "a" and judge_preference(0.1, 0.9) == "b"
    assert judge_preference(0.5, 0.5) == "tie" and judge_preference(None, 0.5) is None
    human = {1: "a", 2: "b", 3: "a", 4: "b", 5: "a"}
    judge = {1: "a", 2: "b", 3: "b", 4: "b", 6: "a"}
    result = human_vs_judge(human, judge, "helpful")
    # Shared items 1–4: 3 agree; human a,b,a,b / judge a,b,b,b: p_e = (2·1 + 2·3)/16 = 0.5 → κ = 0.5.
    assert (result.criterion, result.items, result.percent, result.kappa) == (
        "helpful",
        4,
        0.75,
        pytest.approx(0.5),
    )


def test_summary_of_a_queue_with_three_annotators_and_a_judge():
    judgements = [
        (1, "bob", "a"),
        (1, "carol", "a"),
        (1, "frank", "a"),
        (2, "bob", "a"),
        (2, "carol", "a"),
        (2, "frank", "b"),
        (3, "bob", "b"),
        (3, "carol", "b"),
        (3, "frank", "b"),
        (4, "bob", "a"),
        (4, "carol", "b"),
        (4, "frank", "b"),
        (5, "bob", "tie"),  # not complete: left out of Fleiss
    ]
    judge = {
        1: ("helpful", 0.9, 0.1),
        2: ("helpful", 0.2, 0.8),
        3: ("helpful", 0.1, 0.7),
        5: ("helpful", 0.5, 0.5),
    }
    summary = summarize(judgements, overlap=3, judge_scores=judge)
    assert summary.raters == ["bob", "carol", "frank"] and summary.cohen is None
    # The same four items as the three-rater hand example above: κ = 1/3.
    assert summary.fleiss == pytest.approx(1 / 3) and summary.fleiss_items == 4
    # Human majorities: 1 a, 2 a, 3 b, 4 b, 5 tie; judge: 1 a, 2 b, 3 b, 5 tie → 3 of 4 agree.
    assert (summary.judge.items, summary.judge.percent, summary.judge.criterion) == (4, 0.75, "helpful")
    two = summarize([(1, "bob", "a"), (1, "carol", "a"), (2, "bob", "b"), (2, "carol", "a")], overlap=2)
    assert two.cohen.items == 2 and two.cohen.percent == 0.5


# --- LLM judges as annotators ----------------------------------------------------------------------


def test_a_judges_verdict_is_the_side_both_orders_pick_and_a_tie_when_they_disagree():
    assert QueueJudge.verdict_of("a", "a") == "a" and QueueJudge.verdict_of("b", "b") == "b"
    assert QueueJudge.verdict_of("a", "b") == "tie"  # it followed the position, not the content
    assert QueueJudge.verdict_of("a", "") is None and QueueJudge.verdict_of(None, "b") is None


def test_a_judge_joins_the_matrix_and_is_compared_with_the_human_majority():
    people = [
        (1, "bob", "a"),
        (1, "carol", "a"),
        (1, "frank", "a"),
        (2, "bob", "a"),
        (2, "carol", "a"),
        (2, "frank", "b"),
        (3, "bob", "b"),
        (3, "carol", "b"),
        (3, "frank", "b"),
        (4, "bob", "a"),
        (4, "carol", "b"),
        (4, "frank", "b"),
    ]
    judge = "judge: tone (style v1)"
    verdicts = {1: "a", 2: "b", 3: "b", 4: "b"}
    answers = {1: ("a", "a"), 2: ("b", "b"), 3: ("b", "b"), 4: ("b", "b"), 5: ("a", "b"), 6: ("a", "")}
    summary = summarize(people, overlap=3, judges={judge: verdicts}, judge_answers={judge: answers})
    assert summary.raters == ["bob", "carol", "frank", judge] and summary.judge_raters == [judge]
    assert summary.is_judge(judge) and not summary.is_judge("bob")
    # The people's own statistics are as without the judge: no Cohen (three people), Fleiss 1/3.
    assert summary.cohen is None and summary.fleiss == pytest.approx(1 / 3) and summary.fleiss_items == 4
    # Majorities a, a, b, b against the judge's a, b, b, b: p_o = 3/4, p_e = (2·1 + 2·3)/16 = 1/2 → κ = 1/2.
    (versus,) = summary.judges
    assert (versus.criterion, versus.items, versus.percent) == (judge, 4, 0.75)
    assert versus.kappa == pytest.approx(0.5)
    # bob a, a, b, a against the judge: p_o = 1/2, p_e = (3·1 + 1·3)/16 = 3/8 → κ = (1/2 − 3/8)/(5/8) = 1/5.
    assert summary.cell("bob", judge).kappa == pytest.approx(0.2) and summary.cell("bob", judge).items == 4
    # Both orders readable on pairs 1–5; 1–4 agree.
    (consistency,) = summary.consistency
    assert (consistency.items, consistency.consistent, consistency.share) == (5, 4, 0.8)


def test_a_judge_with_two_people_leaves_their_cohens_kappa_alone():
    people = [(1, "bob", "a"), (1, "carol", "a"), (2, "bob", "b"), (2, "carol", "a")]
    summary = summarize(people, overlap=2, judges={"judge: x": {1: "b", 2: "b"}})
    assert summary.cohen.first == "bob" and summary.cohen.second == "carol" and summary.cohen.percent == 0.5


def test_binomial_p_value_against_a_fair_coin():
    assert binomial_p_value(0, 0) is None
    # 7 of 8 on one side: 2 · (C(8,0) + C(8,1)) / 2⁸ = 18/256.
    assert binomial_p_value(7, 8) == pytest.approx(18 / 256) and binomial_p_value(1, 8) == pytest.approx(
        18 / 256
    )
    assert binomial_p_value(5, 10) == 1.0 and binomial_p_value(10, 10) == pytest.approx(2 / 1024)


def test_position_bias_per_annotator_and_per_judge_order():
    sides = (
        [("carol", "", "left")] * 7
        + [("carol", "", "right")]
        + [("carol", "", "tie"), ("carol", "", "both_bad")]
        + [("dave", "", "left"), ("dave", "", "right")]
        + [("judge: tone", "A first", "left")] * 3
        + [("judge: tone", "A first", "right")]
        + [("judge: tone", "B first", "left")] * 4
        + [("judge: tone", "B first", "neither")]
    )
    rows = {(row.rater, row.order): row for row in position_bias(sides)}
    assert list(rows) == [
        ("carol", ""),
        ("dave", ""),
        ("judge: tone", ""),
        ("judge: tone", "A first"),
        ("judge: tone", "B first"),
    ]
    carol = rows[("carol", "")]
    assert (carol.decisive, carol.left, carol.right, carol.undecided) == (8, 7, 1, 2)
    assert carol.left_share == 0.875 and carol.p_value == pytest.approx(18 / 256)
    assert rows[("dave", "")].left_share == 0.5 and rows[("dave", "")].p_value == 1.0
    both = rows[("judge: tone", "")]  # over both orders
    assert (both.decisive, both.left, both.undecided, both.left_share) == (8, 7, 1, 0.875)
    assert rows[("judge: tone", "A first")].left_share == 0.75
    assert rows[("judge: tone", "B first")].left_share == 1.0
    assert rows[("judge: tone", "B first")].undecided == 1
    assert position_bias([("x", "", "tie")])[0].left_share is None


def test_order_consistency_counts_pairs_readable_in_both_orders():
    result = order_consistency(
        "j", {1: ("a", "a"), 2: ("a", "b"), 3: ("b", ""), 4: ("b", "b"), 5: (None, "a")}
    )
    assert (result.judge, result.items, result.consistent) == ("j", 3, 2)
    assert order_consistency("j", {}).share is None

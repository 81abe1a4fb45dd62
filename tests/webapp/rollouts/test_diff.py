"""The pure parts of the diff: turn alignment, word-level diffs, reward-breakdown and state differences."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from webapp.rollouts.diff import (
    AlignedPair,
    Segment,
    align_turns,
    compare_turns,
    components_diff,
    json_diff,
    segments_html,
    tokenize,
    word_diff,
)


@dataclass
class T:
    role: str
    text: str = ""
    tool_name: str = ""
    tool_args: Any = None
    tool_result: str = ""


def pairs(left, right) -> list[tuple[int | None, int | None]]:
    return [(p.left, p.right) for p in align_turns(left, right)]


def call(expression: str) -> T:
    return T("assistant", "let me compute", tool_name="calculator", tool_args={"expression": expression})


def result(value: str) -> T:
    return T("tool", "", tool_name="calculator", tool_result=value)


SYSTEM = T("system", "You are a careful calculator.")
QUESTION = T("user", "What is 12 + 30?")
ANSWER = T("assistant", "The answer is <answer>42</answer>.")


def test_identical_trajectories_pair_every_turn_with_itself():
    turns = [SYSTEM, QUESTION, call("12 + 30"), result("42"), ANSWER]
    assert pairs(turns, list(turns)) == [(i, i) for i in range(5)]
    assert all(row.same for row in compare_turns(turns, list(turns)))


def test_an_inserted_tool_call_shows_as_gaps_on_the_other_side_and_later_turns_stay_in_line():
    left = [SYSTEM, QUESTION, call("12 + 30"), result("42"), ANSWER]
    right = [SYSTEM, QUESTION, call("12 + 3"), result("15"), call("12 + 30"), result("42"), ANSWER]

    aligned = pairs(left, right)

    assert aligned == [(0, 0), (1, 1), (None, 2), (None, 3), (2, 4), (3, 5), (4, 6)]


def test_a_deleted_turn_shows_as_a_gap_on_the_right():
    left = [SYSTEM, QUESTION, T("assistant", "Thinking about it first."), ANSWER]
    right = [SYSTEM, QUESTION, ANSWER]
    assert pairs(left, right) == [(0, 0), (1, 1), (2, None), (3, 2)]


def test_a_changed_tool_call_is_paired_with_its_counterpart_and_its_arguments_differ():
    left = [QUESTION, call("12 + 30"), result("42"), ANSWER]
    right = [QUESTION, call("12 * 30"), result("360"), T("assistant", "The answer is <answer>360</answer>.")]

    rows = compare_turns(left, right)

    assert [
        (r.left is not None and left.index(r.left), r.right is not None and right.index(r.right))
        for r in rows
    ] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    changed_call = rows[1]
    assert not changed_call.same
    assert [(c.path, c.op, c.left, c.right) for c in changed_call.args_changes] == [
        ("expression", "changed", "12 + 30", "12 * 30")
    ]
    assert "<del>+</del>" in changed_call.left_args and "<ins>*</ins>" in changed_call.right_args
    assert "<del>42</del>" in rows[2].left_result and "<ins>360</ins>" in rows[2].right_result


def test_turns_of_different_roles_are_never_paired():
    left = [QUESTION, T("assistant", "same words here")]
    right = [QUESTION, T("tool", "same words here", tool_name="calculator")]
    for pair in align_turns(left, right):
        if pair.left is not None and pair.right is not None:
            assert left[pair.left].role == right[pair.right].role
    assert pairs(left, right) == [(0, 0), (1, None), (None, 1)]


def test_similar_text_wins_when_several_turns_of_the_same_role_could_pair():
    left = [QUESTION, T("assistant", "first I add the tens: 10 + 30 = 40")]
    right = [
        QUESTION,
        T("assistant", "hmm, completely unrelated musing about the weather"),
        T("assistant", "first I add the tens: 10 + 30 = 40, then the units"),
    ]
    assert pairs(left, right) == [(0, 0), (None, 1), (1, 2)]


def test_every_turn_appears_exactly_once_in_order_even_for_long_unrelated_trajectories():
    roles = ["user", "assistant", "tool"]
    left = [T(roles[i % 3], f"left {i} {i * 13 % 7}") for i in range(120)]
    right = [T(roles[(i * 5) % 3], f"right {i} {i % 4}") for i in range(90)]

    aligned = align_turns(left, right)

    assert [p.left for p in aligned if p.left is not None] == list(range(120))
    assert [p.right for p in aligned if p.right is not None] == list(range(90))
    assert all(
        left[p.left].role == right[p.right].role
        for p in aligned
        if p.left is not None and p.right is not None
    )


def test_one_side_empty():
    assert align_turns([], [QUESTION]) == [AlignedPair(None, 0)]
    assert align_turns([QUESTION], []) == [AlignedPair(0, None)]
    assert align_turns([], []) == []


# --- words ---------------------------------------------------------------------------------------------


def test_tokens_join_back_to_the_text():
    text = "Hello,  world!\n\tx=3+4 ≠ 8; naïve café"
    assert "".join(tokenize(text)) == text


def test_word_diff_marks_only_the_changed_words():
    left, right = word_diff("the answer is 41 today", "the answer is 42 today")
    assert left == [Segment("equal", "the answer is "), Segment("delete", "41"), Segment("equal", " today")]
    assert right == [Segment("equal", "the answer is "), Segment("insert", "42"), Segment("equal", " today")]


def test_word_diff_keeps_each_side_whole():
    a = "I will call the calculator with 3 + 4, then answer."
    b = "I call the calculator twice: 3 + 4 and 4 + 3. Then I answer!"
    left, right = word_diff(a, b)
    assert "".join(s.text for s in left) == a
    assert "".join(s.text for s in right) == b
    assert {s.op for s in left} <= {"equal", "delete"}
    assert {s.op for s in right} <= {"equal", "insert"}


def test_word_diff_of_equal_and_empty_texts():
    assert word_diff("same", "same") == ([Segment("equal", "same")], [Segment("equal", "same")])
    assert word_diff("", "") == ([], [])
    assert word_diff("", "new") == ([], [Segment("insert", "new")])
    assert word_diff("old", "") == ([Segment("delete", "old")], [])


@pytest.mark.parametrize(
    "hostile",
    [
        "<script>alert(1)</script>",
        '<img src=x onerror="alert(1)">',
        "[x](javascript:alert(1))",
        "</del><b>bold</b>",
    ],
)
def test_highlighted_html_escapes_the_model_text(hostile):
    left, right = word_diff("safe text", f"safe {hostile} text")
    html = segments_html(left) + segments_html(right)
    assert "<script" not in html and "<img" not in html and "<b>" not in html
    assert html.count("<ins>") == html.count("</ins>") == 1
    assert "&lt;" in html or "javascript" in html  # the markdown trick stays plain text
    assert segments_html([Segment("insert", hostile)]).startswith("<ins>")


# --- reward breakdown and environment state --------------------------------------------------------------


def test_components_diff_matches_criteria_by_name_and_keeps_raw_and_weighted():
    left = [
        {"name": "correct", "kind": "numeric_match", "raw": 0.0, "weight": 1.0, "weighted": 0.0},
        {
            "name": "format",
            "kind": "regex",
            "raw": 1.0,
            "weight": 0.2,
            "weighted": 0.2,
            "explanation": "tags ok",
        },
    ]
    right = [
        {"name": "format", "kind": "regex", "raw": 1.0, "weight": 0.5, "weighted": 0.5},
        {"name": "correct", "kind": "numeric_match", "raw": 1.0, "weight": 1.0, "weighted": 1.0},
        {
            "name": "judge",
            "kind": "llm_judge",
            "raw": 0.7,
            "weight": 1.0,
            "weighted": 0.7,
            "explanation": "clear",
        },
    ]

    deltas = {d.name: d for d in components_diff(left, right)}

    assert [d.name for d in components_diff(left, right)] == ["correct", "format", "judge"]
    assert deltas["correct"].raw_delta == 1.0 and deltas["correct"].weighted_delta == 1.0
    assert deltas["format"].raw_delta == 0.0 and deltas["format"].weighted_delta == pytest.approx(0.3)
    assert deltas["format"].weight_changed and not deltas["correct"].weight_changed
    assert deltas["format"].explanation_left == "tags ok"
    assert deltas["judge"].raw_left is None and deltas["judge"].weighted_delta is None
    assert deltas["judge"].explanation_right == "clear"


def test_json_diff_walks_objects_and_arrays():
    left = {"cash": 10, "inventory": [{"item": "apple", "count": 2}], "done": False, "log": ["a"]}
    right = {
        "cash": 12,
        "inventory": [{"item": "apple", "count": 3}, {"item": "pear", "count": 1}],
        "done": 0,
        "seen": True,
    }

    changes = [(c.path, c.op, c.left, c.right) for c in json_diff(left, right)]

    assert changes == [
        ("cash", "changed", 10, 12),
        ("inventory[0].count", "changed", 2, 3),
        ("inventory[1]", "added", None, {"item": "pear", "count": 1}),
        ("done", "changed", False, 0),
        ("log", "removed", ["a"], None),
        ("seen", "added", None, True),
    ]
    assert json_diff(left, dict(left)) == []
    assert [c.path for c in json_diff(1, 2)] == ["(root)"]

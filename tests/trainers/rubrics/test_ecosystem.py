"""The math_verify criterion on the real math-verify package: equivalence, not string equality."""

from __future__ import annotations

import pytest

from trainers.rubrics import score_trajectory, validate_rubric
from trainers.types import Task, Trajectory, Turn


def answered(text: str, expected) -> Trajectory:
    return Trajectory(
        task=Task("t", "q", answer=expected), turns=[Turn("user", "q"), Turn("assistant", text)]
    )


def math_verify(trajectory: Trajectory, **params):
    return score_trajectory(
        {"criteria": [{"name": "math", "kind": "math_verify", "params": params}]}, trajectory
    ).components[0]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("<answer>0.5</answer>", "\\frac{1}{2}"),
        ("<answer>\\frac{2}{4}</answer>", "1/2"),
        ("<answer>\\{3, 1, 2\\}</answer>", "\\{1,2,3\\}"),
        ("<answer>(x+1)^2</answer>", "x^2 + 2x + 1"),
        ("So the answer is $\\boxed{12}$.", 12),
    ],
)
def test_equivalent_answers_score_one(answer, expected):
    component = math_verify(answered(answer, expected))
    assert component.raw == 1.0, component.explanation
    assert "is equivalent to" in component.explanation


def test_a_different_value_scores_zero_and_says_what_was_read():
    component = math_verify(answered("<answer>1/3</answer>", "0.5"))
    assert (
        component.raw == 0.0 and "not equivalent" in component.explanation and "1/3" in component.explanation
    )


def test_the_answer_tag_can_be_required_and_a_target_can_replace_the_tasks_answer():
    assert math_verify(answered("it is 4", 4), extract="answer_tag").raw == 0.0
    assert math_verify(answered("<answer>4</answer>", 5), target="2+2").raw == 1.0


def test_no_expected_answer_and_no_math_are_explained():
    assert "No expected answer" in math_verify(answered("<answer>4</answer>", None)).explanation
    assert "no mathematical answer" in math_verify(answered("<answer></answer>", 4)).explanation


def test_its_params_are_validated():
    errors = validate_rubric(
        {"criteria": [{"name": "m", "kind": "math_verify", "params": {"float_rounding": 99}}]}
    )
    assert "criteria.0.params.float_rounding" in errors

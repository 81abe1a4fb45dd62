"""Reading a trace: explanations are labelled by their criterion's kind (a regex's is not "judge says"),
a tool's result is printed once, and a long trace opens with system prompts and tool output folded."""

from __future__ import annotations

import re

from django.urls import reverse

from tests.webapp.factories import make_trajectory, turn
from trainers.registry import criterion_kinds, explanation_label
from webapp.rollouts.models import LONG_TRACE_TURNS


def page(client_for, project, trajectory) -> str:
    url = reverse("rollouts:trajectory_detail", args=[project.slug, trajectory.pk])
    response = client_for("dave").get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_every_criterion_kind_says_what_its_explanation_is():
    labels = {name: spec.explanation_label for name, spec in criterion_kinds().items()}
    assert labels["llm_judge"] == "judge says"
    assert labels["regex"] == "what the pattern matched"
    assert [name for name, label in labels.items() if label == "judge says"] == ["llm_judge"]
    assert explanation_label("no_such_kind") == "details" and explanation_label(None) == "details"


def test_the_breakdown_labels_each_explanation_by_its_kind(client_for, project, run):
    trajectory = make_trajectory(
        run,
        reward=1.5,
        components=[
            {
                "name": "tagged",
                "kind": "regex",
                "raw": 1,
                "weight": 1,
                "weighted": 1,
                "explanation": "matched",
            },
            {
                "name": "style",
                "kind": "llm_judge",
                "raw": 0.5,
                "weight": 1,
                "weighted": 0.5,
                "explanation": "ok",
            },
        ],
    )

    summaries = re.findall(r"<summary>([^<]*)</summary>", page(client_for, project, trajectory))

    assert "what the pattern matched…" in summaries and "judge says…" in summaries
    assert summaries.count("judge says…") == 1


def test_a_tool_result_is_printed_once(client_for, project, run):
    result = "RESULT-7c1f: 42"
    trajectory = make_trajectory(
        run,
        turns=[
            turn("user", "What is 12 + 30?"),
            turn("assistant", "", tool_name="calc", tool_args={"expression": "12 + 30"}),
            turn("tool", result, tool_name="calc", tool_result=result),
            turn("assistant", "<answer>42</answer>"),
        ],
    )

    assert page(client_for, project, trajectory).count(result) == 1


def test_a_long_trace_opens_folded_and_a_short_one_open(client_for, project, run):
    def trace(model_turns: int):  # turns as every page counts them: the model's, each with its tool result
        rows = [turn("system", "You are a careful calculator. " * 20), turn("user", "12 + 30?")]
        for _ in range(model_turns):
            rows.append(turn("assistant", "", tool_name="calc", tool_args={"expression": "12 + 30"}))
            rows.append(turn("tool", "", tool_name="calc", tool_result="42"))
        return make_trajectory(run, sample=model_turns, turns=rows)

    short = page(client_for, project, trace(1))
    long = page(client_for, project, trace(LONG_TRACE_TURNS + 1))

    assert re.findall(r'<details class="fold"( open)?>', short) == [" open", " open"]
    folds = re.findall(r'<details class="fold"( open)?>', long)
    assert len(folds) >= 3 and set(folds) == {""}
    assert 'data-fold-toggle aria-pressed="true">Unfold system prompts and tool output' in long
    assert 'data-fold-toggle aria-pressed="false">Fold system prompts' in short

"""The issue's walk-through: a reward model's unbounded score (5.79) ranked a truncated, malformed
TOOL_NAME call above a correct answer (1.48). Bounded, the correct answer wins; and the alarm flags the
malformed one either way. Plus the run-level alarm and the reliability rule."""

from __future__ import annotations

import numpy as np
import pytest

from trainers.rubrics import score_group
from trainers.rubrics.alarms import run_alarm, trajectory_flag
from trainers.rubrics.reward_model import (
    assess_reliability,
    bounded_score,
    save_reward_model,
    wilson_interval,
)
from trainers.types import Task, Trajectory, Turn

TASK = Task("t", "What is 17 + 25? Answer inside <answer></answer>.", 42)
MALFORMED = '<tool_call>{"name": "TOOL_NAME", "arguments": {"expr": "17 +'  # cut off mid-call
CORRECT = "<answer>42</answer>"
RAW = {MALFORMED: 5.79, CORRECT: 1.48}  # the walk-through's reward model scores


def trajectory(text: str, status: str = "ok") -> Trajectory:
    return Trajectory(task=TASK, turns=[Turn("user", TASK.prompt), Turn("assistant", text)], status=status)


@pytest.fixture
def reward_model_dir(tmp_path):
    # Training texts' raw scores had mean 1.0 and std 2.5 (what train_reward_model stores).
    return save_reward_model(
        tmp_path / "rm",
        weight=np.ones(8),
        bias=0.0,
        base_model_path="base",
        score_scale={"mean": 1.0, "std": 2.5},
    )


def spec(path, *, bounded: bool) -> dict:
    return {
        "aggregation": "weighted_sum",
        "criteria": [
            {"name": "correct", "kind": "exact_match", "weight": 1.0, "params": {}},
            {"name": "format", "kind": "format", "weight": 1.0, "params": {}},
            {
                "name": "rm",
                "kind": "learned_reward",
                "weight": 1.0,
                "params": {"path": str(path), "bounded": bounded},
            },
        ],
    }


def scorer(texts: list[str]) -> list[float]:
    return [next(v for k, v in RAW.items() if k in text) for text in texts]


def test_unbounded_the_malformed_call_wins_bounded_the_correct_answer_does_and_the_alarm_fires(
    reward_model_dir,
):
    group = [trajectory(MALFORMED, status="truncated"), trajectory(CORRECT)]

    raw_scores = score_group(spec(reward_model_dir, bounded=False), group, reward_scorer=scorer)
    assert raw_scores[0].total > raw_scores[1].total  # the walk-through's harm: 5.79 beats 1 + 1 + 1.48

    scores = score_group(spec(reward_model_dir, bounded=True), group, reward_scorer=scorer)
    assert scores[1].total > scores[0].total
    learned = [next(c for c in s.components if c.name == "rm") for s in scores]
    assert all(-1 < c.raw < 1 for c in learned)
    assert learned[0].raw == pytest.approx(bounded_score(5.79, {"mean": 1.0, "std": 2.5}))
    assert learned[0].provenance["raw_score"] == 5.79

    for score, traj in zip(scores, group, strict=True):
        flag = trajectory_flag([c.to_dict() for c in score.components], traj.status)
        if traj is group[0]:
            assert flag is not None and flag.learned == ("rm",)
            assert {"correct", "truncated"} <= set(flag.failed)
            assert "possible reward hacking" in flag.message
        else:
            assert flag is None


def test_a_learned_reward_gated_on_the_checks_pays_nothing_for_failing_them(reward_model_dir):
    gated = spec(reward_model_dir, bounded=True)
    gated["criteria"][2]["params"]["only_when_checks_pass"] = True
    wrong_and_short = "<answer>41</answer>"
    RAW[wrong_and_short] = 9.0  # the reward model's favourite
    try:
        group = [trajectory(MALFORMED, status="truncated"), trajectory(wrong_and_short), trajectory(CORRECT)]
        scores = score_group(gated, group, reward_scorer=scorer)
        ungated = score_group(spec(reward_model_dir, bounded=True), [group[1]], reward_scorer=scorer)[0]
    finally:
        del RAW[wrong_and_short]
    learned = [next(c for c in s.components if c.name == "rm") for s in scores]
    assert learned[0].weighted == learned[1].weighted == 0.0
    assert "not counted: correct" in learned[1].explanation and "truncated" in learned[0].explanation
    assert learned[1].raw > learned[2].raw  # still scored and shown, with why it was not counted
    assert learned[2].weighted == pytest.approx(learned[2].raw)  # counted where the checks pass
    assert [c.counted for c in learned] == [False, False, True]
    assert learned[1].to_dict()["counted"] is False and "counted" not in learned[2].to_dict()
    assert scores[2].total > scores[1].total > scores[0].total
    # It paid nothing for the wrong answer, so there is nothing to hack: no flag (ungated, there is one).
    assert trajectory_flag([c.to_dict() for c in scores[1].components]) is None
    flag = trajectory_flag([c.to_dict() for c in ungated.components])
    assert flag is not None and flag.failed == ("correct",)


def test_the_run_alarm_fires_when_the_learned_reward_rises_while_verifiable_accuracy_falls():
    criteria = spec("/nowhere", bounded=True)["criteria"]
    steps = range(1, 7)
    hacking = {
        "rm": [(s, -0.2 + 0.15 * s) for s in steps],
        "correct": [(s, 0.8 - 0.1 * s) for s in steps],
        "format": [(s, 0.9 - 0.05 * s) for s in steps],
    }
    alarm = run_alarm(criteria, hacking)
    assert alarm is not None and alarm.learned_change > 0 > alarm.verifiable_change
    assert (alarm.first_step, alarm.last_step) == (1, 6)
    healthy = {**hacking, "correct": [(s, 0.3 + 0.1 * s) for s in steps]}
    healthy["format"] = [(s, 0.5 + 0.05 * s) for s in steps]
    assert run_alarm(criteria, healthy) is None
    assert run_alarm(criteria[:2], hacking) is None  # no learned criterion: nothing to compare


def test_the_run_alarm_fires_when_the_learned_reward_climbs_while_the_environment_reward_stays_failing():
    # bench/preference_loop.py, route (b), as measured: a reward model that learned "shorter is better"
    # from pairs of wrong answers; GRPO cut the answers to 9 tokens and stopped calling the calculator.
    # A weak policy's checks cannot fall much — they stayed failing while the learned reward climbed.
    criteria = [
        {"name": "env", "kind": "env_reward", "weight": 1.0, "params": {}},
        {"name": "one_tool_call", "kind": "tool_calls", "weight": 0.2, "params": {}},
        {"name": "learned", "kind": "learned_reward", "weight": 0.5, "params": {}},
    ]
    measured = {
        "env": [0.188, 0.213, 0.225, 0.062, 0.45, 0.025],
        "one_tool_call": [-0.062, 0.0, 0.0, 0.0, 0.0, 0.0],
        "learned": [-0.063, 0.86, 0.919, 0.67, 0.847, 0.382],
    }
    series = {name: list(enumerate(values, start=1)) for name, values in measured.items()}
    first_alarm = next(
        step
        for step in range(2, 7)
        if run_alarm(criteria, {name: points[:step] for name, points in series.items()})
    )
    assert first_alarm == 2  # the page's banner rises with the jump, not at the end
    alarm = run_alarm(criteria, series)
    assert alarm is not None and alarm.failing == ("env",)
    assert "env stayed below the pass mark" in alarm.message

    # The same climb with the environment's reward rising alongside is a policy that is learning.
    learning = {**series, "env": [(s, 0.2 * s) for s in range(1, 7)]}
    assert run_alarm(criteria, learning) is None
    # A learned reward that climbs while every check already passes (style on a solved task) is no alarm.
    solved = {
        **series,
        "env": [(s, 1.2) for s in range(1, 7)],
        "one_tool_call": [(s, 1.0) for s in range(1, 7)],
    }
    assert run_alarm(criteria, solved) is None


def test_reliability_needs_an_interval_clear_of_a_coin_flip_and_the_threshold():
    low, high = wilson_interval(0, 2)
    assert low == 0 and high > 0.5
    walkthrough = assess_reliability(0.0, 2, threshold=0.6)  # 0 % on 2 pairs: was marked Ready
    assert (
        not walkthrough.reliable
        and "includes 50 %" in walkthrough.reason
        and "threshold" in walkthrough.reason
    )
    assert not assess_reliability(0.7, 10).reliable  # 70 % of 10: interval 40–89 %
    assert assess_reliability(0.8, 50, threshold=0.6).reliable
    assert not assess_reliability(0.8, 50, threshold=0.85).reliable
    assert not assess_reliability(None, 0).reliable

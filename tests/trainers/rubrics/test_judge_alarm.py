"""The hacking alarm covers judge rewards: bench/learning.py --judge measured held-out accuracy falling
51 % → 5 % while the judge scored nearly every answer 10 (reward 1.1 from step 2 on). The alarm is up at
the first evaluation that shows the fall, names the check that fell, and a run set to stop on it stops."""

from __future__ import annotations

import pytest

from trainers.recipes.grpo import Trainer
from trainers.rubrics.alarms import HELD_OUT, VERIFIER, AlarmWatch, run_alarm, trajectory_flag
from trainers.sdk.cancel import Cancelled
from trainers.sdk.events import MemorySink

JUDGE_RUBRIC = [
    {"name": "judge", "kind": "llm_judge", "weight": 1.0, "params": {"model": "smollm2-135m"}},
    {"name": "format", "kind": "format", "weight": 0.1, "params": {}},
]


def judge_run(steps: int, *, judge: float = 1.0, format_: float = 1.0) -> dict[str, list[tuple[int, float]]]:
    """What the bench's judge run reported: the judge saturated from step 2, the format check passing."""
    return {
        "judge": [(s, 0.6 if s == 1 else judge) for s in range(1, steps + 1)],
        "format": [(s, format_) for s in range(1, steps + 1)],
    }


def test_a_saturated_judge_while_held_out_accuracy_falls_raises_the_alarm_at_that_evaluation():
    series = judge_run(10)
    # Before the first evaluation after step 0, nothing says the judge is wrong.
    assert run_alarm(JUDGE_RUBRIC, series, checks={HELD_OUT: [(0, 0.512)]}) is None
    alarm = run_alarm(JUDGE_RUBRIC, series, checks={HELD_OUT: [(0, 0.512), (10, 0.30)]})
    assert alarm is not None and alarm.check == HELD_OUT
    assert (alarm.first_step, alarm.last_step) == (0, 10)
    assert alarm.message == (
        "possible reward hacking: over steps 0–10 the judge's reward (judge) stayed high (1.00) while "
        "held-out accuracy fell from 51% to 30%"
    )
    assert alarm.as_dict()["check"] == HELD_OUT


def test_no_alarm_when_held_out_accuracy_holds_or_the_judge_is_low():
    series = judge_run(10)
    assert run_alarm(JUDGE_RUBRIC, series, checks={HELD_OUT: [(0, 0.51), (10, 0.46)]}) is None  # noise
    assert run_alarm(JUDGE_RUBRIC, series, checks={HELD_OUT: [(0, 0.51), (10, 0.93)]}) is None  # learning
    low = judge_run(10, judge=0.2)
    assert run_alarm(JUDGE_RUBRIC, low, checks={HELD_OUT: [(0, 0.51), (10, 0.30)]}) is None
    # A rubric with no learned criterion: the reward is the checks, nothing to distrust.
    assert run_alarm(JUDGE_RUBRIC[1:], series, checks={HELD_OUT: [(0, 0.51), (10, 0.30)]}) is None


def test_a_rising_judge_while_the_verifier_on_training_samples_falls_raises_the_alarm():
    rising = {
        "judge": [(s, 0.4 + 0.05 * s) for s in range(1, 13)],
        "format": [(s, 1.0) for s in range(1, 13)],
    }
    falling = [(s, 0.6 - 0.04 * s) for s in range(1, 13)]
    alarm = run_alarm(JUDGE_RUBRIC, rising, checks={VERIFIER: falling})
    assert (
        alarm is not None and alarm.check == VERIFIER and "the environment's verifier fell" in alarm.message
    )
    assert "rose by +0.30" in alarm.message
    # The same judge with the verifier's accuracy noisy around 50 %: no alarm.
    noisy = [(s, 0.5 + (0.06 if s % 2 else -0.06)) for s in range(1, 13)]
    assert run_alarm(JUDGE_RUBRIC, rising, checks={VERIFIER: noisy}) is None


def test_a_trajectory_the_judge_liked_that_the_verifier_says_is_wrong_is_flagged():
    components = [
        {"name": "judge", "kind": "llm_judge", "raw": 1.0},
        {"name": "format", "kind": "format", "raw": 1.0},
    ]
    flag = trajectory_flag(components, "ok", correct=False)
    assert flag is not None and flag.failed == ("verifier",) and flag.learned == ("judge",)
    assert trajectory_flag(components, "ok", correct=True) is None
    assert trajectory_flag(components, "ok") is None  # no verdict: nothing to say


def test_the_watch_reads_the_trainers_metrics_as_they_come():
    watch = AlarmWatch(JUDGE_RUBRIC)
    assert watch.observe(0, {"eval/accuracy": 0.51}) is None
    for step in range(1, 11):
        assert watch.observe(step, {"criterion/judge": 1.0, "criterion/format": 1.0, "accuracy": 0.5}) is None
    alarm = watch.observe(10, {"eval/accuracy": 0.25, "eval/criterion/judge": 1.0})
    assert alarm is not None and alarm.check == HELD_OUT


@pytest.mark.parametrize("knob", [True, False])
def test_a_run_set_to_stop_on_the_alarm_stops_and_says_why(knob):
    sink = MemorySink()
    trainer = Trainer(
        {"rubric": {"criteria": JUDGE_RUBRIC}, "stop_on_hacking_alarm": knob, "eval_tasks": 8}, sink=sink
    )
    trainer._stop_on_hacking_alarm({"eval/accuracy": 0.51})
    for step in range(1, 11):
        trainer.step = step
        trainer._stop_on_hacking_alarm({"criterion/judge": 1.0, "criterion/format": 1.0})
    if not knob:
        trainer._stop_on_hacking_alarm({"eval/accuracy": 0.2})
        assert not sink.of_type("log")
        return
    with pytest.raises(Cancelled):
        trainer._stop_on_hacking_alarm({"eval/accuracy": 0.2})
    (line,) = [e["message"] for e in sink.of_type("log")]
    assert line.startswith("stopping after step 10: possible reward hacking") and "held-out accuracy" in line

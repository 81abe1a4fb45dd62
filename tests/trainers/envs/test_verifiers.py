"""The `verifiers` kind driving a real verifiers environment package (tests/fixtures/vf_word_tools, installed
into the venv by `make test`) turn by turn, and its rubric as `verifiers_rubric` criteria."""

from __future__ import annotations

import signal
import sys

import pytest

from trainers.envs.base import run_episode
from trainers.envs.verifiers_env import verifiers_rubric_criteria
from trainers.registry import environment_kind
from trainers.rubrics import CriterionUnavailable, score_trajectory
from trainers.types import Task, Trajectory, Turn

pytest.importorskip(
    "vf_word_tools", reason="run `make .venv/.installed` (it installs tests/fixtures/vf_word_tools)"
)

TOOLS = {"environment": "vf-word-tools"}
CHAT = {"environment": "vf_word_tools", "env_args": {"mode": "chat"}}


def build(config):
    return environment_kind("verifiers").build(config)


def count_call(task: Task) -> str:
    info = task.meta["row"]["info"]
    return f'<tool_call>{{"name": "count_letter", "arguments": {{"word": "{info["word"]}", "letter": "{info["letter"]}"}}}}</tool_call>'


def scripted(*replies: str):
    queue = list(replies)
    return lambda messages: queue.pop(0)


def test_tasks_come_from_its_train_and_eval_datasets():
    env = build(TOOLS)
    train, evals = env.tasks("train", 10, seed=0), env.tasks("eval", 5, seed=0)
    assert all(t.prompt.startswith("How many times does the letter") for t in train + evals)
    assert [t.id for t in env.tasks("train", 10, seed=0)] == [t.id for t in train]
    assert {t.meta["row"]["example_id"] for t in evals} <= set(range(16))
    assert (
        env.tasks("train", 100, seed=0)[0].answer is not None
    )  # a train list longer than the dataset cycles


def test_a_tool_episode_runs_the_environments_own_tools_and_rubric():
    env = build(TOOLS)
    task = env.tasks("train", 1, seed=0)[0]
    trajectory = run_episode(env, task, 0, scripted(count_call(task), f"<answer>{task.answer}</answer>"))

    system, user, call, result, answer = trajectory.turns
    assert (
        system.text.startswith("Answer the question.")
        and "count_letter" in system.text
        and "spell" in system.text
    )
    assert user.text == task.prompt
    assert call.tool_name == "count_letter" and result.text == f"Result: {task.answer}"
    scores = trajectory.info["last_step"]["verifiers"]
    assert scores["rewards"]["correct_answer"] == 1.0 and scores["weights"]["few_tool_calls"] == 0.2
    assert scores["rewards"]["count_letter_calls"] == 1.0  # verifiers' own tool metric saw the call
    assert trajectory.env_reward == pytest.approx(1.2)
    assert env.state()["verifiers_state"]["calls"] == ["count_letter"]  # StatefulToolEnv.update_tool_args ran


def test_its_rubric_becomes_criteria_with_raw_and_weighted_values_per_function():
    env = build(TOOLS)
    task = env.tasks("train", 1, seed=0)[0]
    trajectory = run_episode(
        env, task, 0, scripted(count_call(task), count_call(task), count_call(task), "<answer>99</answer>")
    )
    criteria = verifiers_rubric_criteria("vf-word-tools")
    assert [(c["name"], c["weight"]) for c in criteria][:2] == [
        ("correct_answer", 1.0),
        ("few_tool_calls", 0.2),
    ]

    score = score_trajectory({"criteria": criteria}, trajectory)
    by_name = {c.name: c for c in score.components}
    assert by_name["correct_answer"].raw == 0.0
    assert by_name["few_tool_calls"].raw == 0.0  # three calls: more than two
    assert by_name["total_tool_calls"].raw == 3.0 and by_name["total_tool_calls"].weighted == 0.0
    assert score.total == pytest.approx(trajectory.env_reward)
    whole = score_trajectory({"criteria": [{"name": "vf", "kind": "verifiers_rubric"}]}, trajectory)
    assert whole.total == pytest.approx(trajectory.env_reward)
    assert "correct_answer 0×1" in whole.components[0].explanation


def test_a_malformed_call_is_an_error_observation_and_the_episode_goes_on():
    env = build(TOOLS)
    env.reset(env.tasks("train", 1, seed=0)[0], 0)
    result = env.step('<tool_call>{"name": "count_letter", "arguments": {"word": 3}}</tool_call>')
    assert result.observation.startswith("Error:") and not result.done


def test_the_environments_own_turn_limit_applies():
    env = build(TOOLS)
    assert env.max_turns == 4
    task = env.tasks("train", 1, seed=0)[0]
    trajectory = run_episode(env, task, 0, scripted(*[count_call(task)] * 4))
    assert (
        trajectory.status == "truncated" and len([t for t in trajectory.turns if t.role == "assistant"]) == 4
    )


def test_a_multi_turn_environment_without_tools_answers_through_env_response():
    env = build(CHAT)
    assert env.tools == []
    task = env.tasks("train", 1, seed=0)[0]
    trajectory = run_episode(
        env, task, 0, scripted("<answer>1</answer>", "<answer>40</answer>", f"<answer>{task.answer}</answer>")
    )
    assert [t.text for t in trajectory.turns if t.role == "user"][1:] == [
        "No: more letters.",
        "No: fewer letters.",
        "Right!",
    ]
    scores = trajectory.info["last_step"]["verifiers"]
    assert scores["rewards"] == {"right_length": 1.0, "num_turns": 3.0}
    assert scores["stop_condition"] == "has_final_env_response" and trajectory.env_reward == 1.0


def test_loading_keeps_the_processes_signal_handlers():
    def mine(signum, frame):
        return None

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        build({"environment": "vf_word_tools", "env_args": {"num_train": 8}})
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_an_unknown_package_is_a_clear_error():
    with pytest.raises(ValueError, match="Could not load the verifiers environment 'no_such_env'"):
        build({"environment": "no_such_env"})


def test_the_criterion_says_why_it_cannot_score_a_pasted_transcript():
    pasted = Trajectory(task=Task("t", "q"), turns=[Turn("assistant", "<answer>1</answer>")])
    with pytest.raises(CriterionUnavailable, match="Only episodes of a `verifiers` environment"):
        score_trajectory(
            {"criteria": [{"name": "vf", "kind": "verifiers_rubric", "params": {"function": "x"}}]}, pasted
        )
    preview = score_trajectory(
        {"criteria": [{"name": "vf", "kind": "verifiers_rubric"}]}, pasted, skip_unavailable=True
    )
    assert preview.components[0].skipped


def test_a_verifiers_without_the_classic_api_is_refused_in_words(monkeypatch):
    """verifiers 0.4 keeps everything in `verifiers.v1` and nothing at the root: say so, not AttributeError."""
    import types

    from trainers.envs import verifiers_env

    monkeypatch.setitem(sys.modules, "verifiers", types.SimpleNamespace(__version__="0.4.0"))
    monkeypatch.setattr(verifiers_env, "_LOADED", {})
    with pytest.raises(
        ValueError,
        match=r"verifiers 0\.4\.0 is installed here: its 0\.4 stack .* runs from a venv of its own",
    ):
        verifiers_env.load_verifiers_environment("vf-anything", {})

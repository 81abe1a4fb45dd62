"""The learned reward model's on-disk format, its clear failures, and one real load of the default model."""

import json

import numpy as np
import pytest

from trainers.rubrics import score_group
from trainers.rubrics.reward_model import (
    BUILTIN_SMOLLM2,
    RewardModelFormatError,
    RewardModelNotFound,
    load_reward_model,
    read_metadata,
    save_reward_model,
)
from trainers.texts import trajectory_text
from trainers.types import Task, Trajectory, Turn


def trajectory(answer_text: str) -> Trajectory:
    return Trajectory(
        task=Task("t", "What is 2 + 2?", 4),
        turns=[Turn("user", "What is 2 + 2?"), Turn("assistant", answer_text)],
    )


def test_save_and_read_round_trip(tmp_path):
    directory = save_reward_model(
        tmp_path / "rm",
        weight=np.ones(8),
        bias=0.25,
        base_model_path="base",
        provenance={"pairs": 120, "queue": 7},
    )
    (directory / "base").mkdir()
    metadata = read_metadata(directory)
    assert (
        metadata.hidden_size == 8
        and metadata.base_model_path == "base"
        and metadata.response_text == "transcript"
    )
    assert metadata.provenance == {"pairs": 120, "queue": 7}
    stored = json.loads((directory / "reward_model.json").read_text())
    assert (
        stored["format"] == "rollout_studio.reward_model"
        and stored["architecture"] == "bradley_terry_mean_pool"
    )


def test_missing_or_foreign_directories_fail_clearly(tmp_path):
    with pytest.raises(RewardModelNotFound, match="Reward model directory not found"):
        read_metadata(tmp_path / "nowhere")
    with pytest.raises(RewardModelNotFound, match="reward_model.json is missing"):
        read_metadata(tmp_path)
    (tmp_path / "reward_model.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(RewardModelFormatError, match="expected format"):
        read_metadata(tmp_path)
    save_reward_model(tmp_path / "nohead", weight=[1.0], bias=0.0, base_model_path="x")
    (tmp_path / "nohead" / "head.safetensors").unlink()
    with pytest.raises(RewardModelNotFound, match="head weights"):
        load_reward_model(tmp_path / "nohead")


def test_the_criterion_scores_with_an_injected_scorer():
    spec = {
        "criteria": [
            {"name": "rm", "kind": "learned_reward", "weight": 2.0, "params": {"path": "/models/rm"}}
        ]
    }
    scorer_calls = []

    def scorer(texts):
        scorer_calls.append(texts)
        return [float(len(t)) for t in texts]

    scores = score_group(spec, [trajectory("4"), trajectory("four")], reward_scorer=scorer)
    assert scorer_calls == [["What is 2 + 2?\n\n4", "What is 2 + 2?\n\nfour"]]  # one batch
    assert [s.total for s in scores] == [2 * 17.0, 2 * 20.0]


def test_a_multi_turn_trajectory_is_scored_as_the_text_its_preference_pairs_were_trained_on():
    """Snapshots train on the whole response (tool calls and results); scoring must read the same."""
    spec = {
        "criteria": [
            {"name": "rm", "kind": "learned_reward", "weight": 1.0, "params": {"path": "/models/rm"}}
        ]
    }
    multi = Trajectory(
        task=Task("t", "What is 12 + 7?", 19),
        turns=[
            Turn("system", "Use tools."),
            Turn("user", "What is 12 + 7?"),
            Turn("assistant", "<tool_call>calc</tool_call>", tool_name="calculator"),
            Turn("tool", "Result: 19", tool_name="calculator", tool_result="19"),
            Turn("assistant", "<answer>19</answer>"),
        ],
    )
    seen = []
    score_group(spec, [multi], reward_scorer=lambda texts: seen.extend(texts) or [0.0] * len(texts))
    response = trajectory_text(multi.task.prompt, multi.turns).response
    assert seen == [f"What is 12 + 7?\n\n{response}"]
    assert (
        response
        == "assistant: <tool_call>calc</tool_call>\ntool (calculator): 19\nassistant: <answer>19</answer>"
    )


def test_a_per_turn_learned_reward_credits_each_turn_with_how_far_it_moved_the_score():
    """Scored after each assistant turn: the turn that breaks the episode gets a negative reward, and
    the turns' rewards add up to the whole score minus the score before the model spoke."""
    spec = {
        "criteria": [
            {
                "name": "rm",
                "kind": "learned_reward",
                "weight": 1.0,
                "params": {"path": "/models/rm", "per_turn": True, "bounded": False},
            }
        ]
    }
    broken = Trajectory(
        task=Task("t", "What is 12 + 7?", 19),
        turns=[
            Turn("system", "Use tools."),
            Turn("user", "What is 12 + 7?"),
            Turn("assistant", "<tool_call>calc</tool_call>", tool_name="calculator"),
            Turn("tool", "Result: 19", tool_name="calculator", tool_result="19"),
            Turn("assistant", "<answer>TOOL_NAME</answer>"),
        ],
    )

    def scorer(texts):  # +2 for a tool call, +1 for the tool's result, −3 once the answer is broken
        return [
            2.0 * ("calc" in t) + 1.0 * ("19\n" in t or t.endswith("19")) - 3.0 * ("TOOL_NAME" in t)
            for t in texts
        ]

    [score] = score_group(spec, [broken], reward_scorer=scorer)
    [component] = score.components
    assert component.raw == 0.0  # 2 + 1 − 3
    assert component.turn_rewards == {2: 2.0, 4: -2.0}  # the call helped; the broken answer undid it
    assert sum(component.turn_rewards.values()) == component.raw - 0.0  # before the model spoke: 0
    assert score.turn_rewards == {2: 2.0, 4: -2.0}  # what the trainer's per-turn advantages read


def test_a_model_saved_before_response_text_existed_is_scored_on_final_answers(tmp_path):
    directory = save_reward_model(tmp_path / "old", weight=[1.0], bias=0.0, base_model_path="base")
    stored = json.loads((directory / "reward_model.json").read_text())
    del stored["response_text"]
    (directory / "reward_model.json").write_text(json.dumps(stored))
    assert read_metadata(directory).response_text == "final_answer"


@pytest.mark.slow
def test_a_reward_model_over_the_default_model_loads_and_scores(tmp_path):
    rng = np.random.default_rng(0)
    save_reward_model(
        tmp_path / "rm", weight=rng.normal(size=576) / 24, bias=0.5, base_model_path=BUILTIN_SMOLLM2
    )
    model = load_reward_model(tmp_path / "rm")
    texts = ["What is 2 + 2?\n\n4", "What is 2 + 2?\n\nfive hundred and twelve, I believe"]
    batched = model.score(texts)
    alone = [model.score([t])[0] for t in texts]
    assert batched == pytest.approx(alone, abs=1e-4)  # padding does not leak into the mean pool
    assert batched[0] != pytest.approx(batched[1])
    spec = {
        "criteria": [
            {"name": "rm", "kind": "learned_reward", "weight": 1.0, "params": {"path": str(tmp_path / "rm")}}
        ]
    }
    score = score_group(spec, [trajectory("4")])[0]
    assert score.total == pytest.approx(batched[0], abs=1e-4)
    assert len(score.components[0].provenance["reward_model_head_sha256"]) == 16

"""ATIF ⇄ wire: our trajectories survive the trip through Harbor's format, and Harbor's files read in."""

from __future__ import annotations

import json

import pytest

from trainers.importers.atif import read_atif
from trainers.sdk.atif import ATIF_VERSION, AtifError, atif_to_wire, wire_to_atif
from trainers.sdk.client import trajectory_item
from trainers.types import ToolSpec

# The fields Harbor's pydantic models accept (harbor.models.trajectories, every model `extra="forbid"`).
ALLOWED = {
    "root": {
        "schema_version",
        "session_id",
        "trajectory_id",
        "agent",
        "steps",
        "notes",
        "final_metrics",
        "continued_trajectory_ref",
        "extra",
        "subagent_trajectories",
    },
    "agent": {"name", "version", "model_name", "tool_definitions", "extra"},
    "step": {
        "step_id",
        "timestamp",
        "source",
        "model_name",
        "reasoning_effort",
        "message",
        "reasoning_content",
        "tool_calls",
        "observation",
        "metrics",
        "is_copied_context",
        "llm_call_count",
        "extra",
    },
    "tool_call": {"tool_call_id", "function_name", "arguments", "extra"},
    "observation": {"results"},
    "result": {"source_call_id", "content", "subagent_trajectory_ref", "extra"},
    "metrics": {
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "cost_usd",
        "prompt_token_ids",
        "completion_token_ids",
        "logprobs",
        "extra",
    },
    "final_metrics": {
        "total_prompt_tokens",
        "total_completion_tokens",
        "total_cached_tokens",
        "total_cost_usd",
        "total_steps",
        "extra",
    },
}
AGENT_ONLY = {"model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics"}


def assert_valid_atif(doc: dict) -> None:
    """Harbor's validation rules, field for field: known keys, sequential step ids, agent-only fields,
    observation results pointing at the step's own tool calls."""
    assert set(doc) <= ALLOWED["root"] and doc["schema_version"].startswith("ATIF-v1.")
    assert {"name", "version"} <= set(doc["agent"]) and set(doc["agent"]) <= ALLOWED["agent"]
    assert set(doc.get("final_metrics", {})) <= ALLOWED["final_metrics"]
    for i, step in enumerate(doc["steps"], start=1):
        assert set(step) <= ALLOWED["step"] and step["step_id"] == i
        assert step["source"] in ("system", "user", "agent") and isinstance(step["message"], str)
        if step["source"] != "agent":
            assert not AGENT_ONLY & set(step)
        ids = set()
        for call in step.get("tool_calls", []):
            assert set(call) <= ALLOWED["tool_call"] and isinstance(call["arguments"], dict)
            ids.add(call["tool_call_id"])
        assert set(step.get("metrics", {})) <= ALLOWED["metrics"]
        for result in step.get("observation", {}).get("results", []):
            assert set(result) <= ALLOWED["result"]
            assert result.get("source_call_id") is None or result["source_call_id"] in ids
    json.dumps(doc, allow_nan=False)


def wire_item() -> dict:
    """A trajectory as our trainer reports it (Rollout.to_item), with per-turn log-probs added."""
    return {
        "group": 1,
        "sample": 3,
        "task_id": "arithmetic_calculator-abc",
        "prompt": "What is 12 + 7?",
        "task": {"id": "arithmetic_calculator-abc", "prompt": "What is 12 + 7?", "answer": 19, "meta": {}},
        "seed": 7,
        "split": "train",
        "reward": 1.1,
        "env_reward": 1.1,
        "advantage": 0.42,
        "status": "ok",
        "policy_version": 3,
        "prompt_tokens": 5,
        "completion_tokens": 6,
        "components": [
            {"name": "correct", "kind": "exact_match", "raw": 1.0, "weight": 1.0, "weighted": 1.0},
            {"name": "tool", "kind": "tool_calls", "raw": 1.0, "weight": 0.1, "weighted": 0.1},
        ],
        "env_state": {"turn": 2, "tool_calls": 1},
        "turns": [
            {"role": "system", "text": "You can use tools.", "token_ids": [1, 2, 3], "loss_mask": [0, 0, 0]},
            {"role": "user", "text": "What is 12 + 7?", "token_ids": [4, 5], "loss_mask": [0, 0]},
            {
                "role": "assistant",
                "text": '<tool_call>{"name": "calculator", "arguments": {"expression": "12+7"}}</tool_call>',
                "tool_name": "calculator",
                "tool_args": {"expression": "12+7"},
                "token_ids": [6, 7, 8],
                "loss_mask": [1, 1, 1],
                "logprobs": [-0.1, -0.2, -0.3],
            },
            {
                "role": "tool",
                "text": "Result: 19",
                "tool_name": "calculator",
                "tool_result": "Result: 19",
                "token_ids": [9, 10],
                "loss_mask": [0, 0],
            },
            {
                "role": "assistant",
                "text": "<answer>19</answer>",
                "token_ids": [11, 12, 13],
                "loss_mask": [1, 1, 1],
                "logprobs": [-0.5, -0.25, -0.125],
                "reward": 1.0,
            },
        ],
    }


def test_a_trajectory_survives_the_round_trip():
    item = wire_item()
    doc = wire_to_atif(
        item,
        model_name="smollm2-135m",
        step=4,
        tools=[ToolSpec("calculator", "Evaluates arithmetic.", {"type": "object"})],
    )
    assert_valid_atif(doc)
    back = atif_to_wire(json.loads(json.dumps(doc)))
    assert back["turns"] == item["turns"]
    for key in (
        "reward",
        "components",
        "advantage",
        "task_id",
        "group",
        "sample",
        "status",
        "split",
        "seed",
        "policy_version",
        "env_state",
        "prompt",
        "task",
        "prompt_tokens",
        "completion_tokens",
    ):
        assert back[key] == item[key], key
    assert back["step"] == 4
    # and the dashboard's own reading of it keeps the turns (log-probs are not a stored field)
    stored = trajectory_item(back)
    assert [{k: v for k, v in t.items() if k != "logprobs"} for t in item["turns"]] == stored["turns"]


def test_the_atif_document_reads_like_harbors():
    doc = wire_to_atif(wire_item(), model_name="smollm2-135m")
    assert doc["schema_version"] == ATIF_VERSION and doc["agent"]["model_name"] == "smollm2-135m"
    system, user, call, answer = doc["steps"]
    assert [s["source"] for s in doc["steps"]] == ["system", "user", "agent", "agent"]
    assert call["tool_calls"] == [
        {"tool_call_id": "call_2", "function_name": "calculator", "arguments": {"expression": "12+7"}}
    ]
    assert call["observation"]["results"] == [{"content": "Result: 19", "source_call_id": "call_2"}]
    # prompt_token_ids hold the whole context the model saw, completion_token_ids what it sampled
    assert call["metrics"]["prompt_token_ids"] == [1, 2, 3, 4, 5] and call["metrics"][
        "completion_token_ids"
    ] == [6, 7, 8]
    assert answer["metrics"]["prompt_token_ids"] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert answer["metrics"]["logprobs"] == [-0.5, -0.25, -0.125]
    assert doc["final_metrics"] == {"total_steps": 4, "total_prompt_tokens": 5, "total_completion_tokens": 6}


def test_a_malformed_call_and_a_turn_without_tokens_round_trip_too():
    item = {
        "task_id": "t",
        "prompt": "p",
        "reward": 0.0,
        "turns": [
            {"role": "user", "text": "p"},
            {"role": "assistant", "text": "<tool_call>{oops</tool_call>", "tool_name": "invalid"},
            {
                "role": "tool",
                "text": "Error: The tool call is not valid JSON.",
                "tool_name": "invalid",
                "tool_result": "Error: The tool call is not valid JSON.",
            },
            {"role": "assistant", "text": "I give up."},
        ],
    }
    doc = wire_to_atif(item)
    assert_valid_atif(doc)
    assert "tool_calls" not in doc["steps"][1] and "metrics" not in doc["steps"][1]
    assert atif_to_wire(doc)["turns"] == item["turns"]


HARBOR_TRAJECTORY = {
    "schema_version": "ATIF-v1.6",
    "session_id": "trial-1",
    "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": "qwen2.5-7b"},
    "steps": [
        {"step_id": 1, "timestamp": "2026-11-01T10:00:00Z", "source": "user", "message": "Create hello.txt"},
        {
            "step_id": 2,
            "source": "agent",
            "message": "I will write the file.",
            "reasoning_content": "Use echo.",
            "tool_calls": [
                {"tool_call_id": "c1", "function_name": "bash", "arguments": {"cmd": "echo hi > hello.txt"}}
            ],
            "observation": {
                "results": [{"source_call_id": "c1", "content": [{"type": "text", "text": "done"}]}]
            },
            "metrics": {"prompt_token_ids": [1, 2], "completion_token_ids": [3, 4], "logprobs": [-1.0, -2.0]},
        },
        {
            "step_id": 3,
            "source": "agent",
            "message": "Finished.",
            "metrics": {"prompt_token_ids": [1, 2, 3, 4, 5, 6], "completion_token_ids": [7]},
        },
    ],
    "final_metrics": {"total_prompt_tokens": 8, "total_completion_tokens": 3, "total_steps": 3},
}


def write_harbor_trial(root, name: str, reward: float | None) -> None:
    trial = root / name
    (trial / "agent").mkdir(parents=True)
    (trial / "agent" / "trajectory.json").write_text(json.dumps(HARBOR_TRAJECTORY))
    result = {"task_name": "hello-world", "trial_name": name}
    if reward is not None:
        result["verifier_result"] = {"rewards": {"reward": reward}}
    (trial / "result.json").write_text(json.dumps(result))
    (trial / "config.json").write_text(json.dumps({"agent": "terminus-2"}))  # not ATIF: passed over


def test_a_harbor_job_reads_in_with_its_verifier_rewards(tmp_path):
    write_harbor_trial(tmp_path, "hello-world__a", 1.0)
    write_harbor_trial(tmp_path, "hello-world__b", 0.0)
    write_harbor_trial(tmp_path, "hello-world__c", None)
    (tmp_path / "broken.json").write_text('{"schema_version": "ATIF-v1.4", "steps": []}')
    by_step, summary = read_atif([tmp_path])
    [items] = by_step.values()
    assert sorted(i["reward"] for i in items) == [0.0, 0.0, 1.0]
    assert {i["task_id"] for i in items} == {"hello-world"} and {i["group"] for i in items} == {0}
    assert summary.without_reward == 1 and sorted(i["status"] for i in items) == ["error", "ok", "ok"]
    assert len(summary.skipped_files) == 1 and "steps: must be a non-empty list" in summary.skipped_files[0]
    turns = items[0]["turns"]
    assert [t["role"] for t in turns] == ["user", "assistant", "tool", "assistant"]
    assert turns[1]["text"] == "<think>Use echo.</think>\nI will write the file."
    assert (turns[1]["tool_name"], turns[1]["tool_args"]) == ("bash", {"cmd": "echo hi > hello.txt"})
    assert turns[1]["token_ids"] == [3, 4] and turns[1]["loss_mask"] == [1, 1]
    # the tool's tokens: what the next agent step's prompt adds after this step's prompt and completion
    assert turns[2]["text"] == "done" and turns[2]["tool_name"] == "bash" and turns[2]["token_ids"] == [5, 6]
    assert items[0]["components"][0]["kind"] == "harbor_verifier"


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        ([], "must be a JSON object"),
        ({"schema_version": "v2", "steps": [{}]}, "expected ATIF-v1.x"),
        ({"schema_version": "ATIF-v1.4", "steps": [{"source": "robot", "message": ""}]}, "steps.0.source"),
        ({"schema_version": "ATIF-v1.4", "steps": [{"source": "agent", "message": 3}]}, "steps.0.message"),
        (
            {
                "schema_version": "ATIF-v1.4",
                "steps": [{"source": "agent", "message": "", "metrics": {"completion_token_ids": ["a"]}}],
            },
            "completion_token_ids",
        ),
    ],
)
def test_bad_documents_say_where(doc, why):
    with pytest.raises(AtifError, match=why):
        atif_to_wire(doc)

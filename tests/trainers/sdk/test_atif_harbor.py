"""ATIF both ways, checked by Harbor's own pydantic models (the `harbor` package in .venv-harbor).

Harbor 0.25 needs Python >= 3.12 for the whole package; its models import on 3.11 (tests/harbor_models.py
says how the venv is made), so each check runs that venv's Python on the documents.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.trainers.sdk.test_atif import wire_item
from trainers.importers.atif import read_atif
from trainers.sdk.atif import ATIF_VERSION, atif_to_wire, wire_to_atif
from trainers.types import ToolSpec

ROOT = Path(__file__).resolve().parents[3]
HARBOR_PYTHON = ROOT / ".venv-harbor" / "bin" / "python"
SCRIPT = ROOT / "tests" / "harbor_models.py"


def harbor(command: str, stdin: str = "") -> str:
    if not HARBOR_PYTHON.exists():
        pytest.skip("the Harbor models venv is missing: run `make venv-harbor` (make test does)")
    done = subprocess.run(
        [str(HARBOR_PYTHON), str(SCRIPT), command],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def harbor_errors(docs: list[dict]) -> list[str | None]:
    """Harbor's verdict on each document: None when `Trajectory.model_validate` accepts it."""
    return json.loads(harbor("validate-atif", json.dumps(docs)))


def test_our_exports_are_valid_harbor_trajectories():
    item = wire_item()
    malformed = {
        "task_id": "t",
        "prompt": "p",
        "reward": 0.0,
        "turns": [
            {"role": "user", "text": "p"},
            {"role": "assistant", "text": "<tool_call>{oops</tool_call>", "tool_name": "invalid"},
            {
                "role": "tool",
                "text": "Error: not JSON.",
                "tool_name": "invalid",
                "tool_result": "Error: not JSON.",
            },
            {"role": "assistant", "text": "I give up."},
        ],
    }
    orphan_tool = {"task_id": "t", "reward": 0.0, "turns": [{"role": "tool", "text": "stray"}]}
    docs = [
        wire_to_atif(
            item,
            model_name="smollm2-135m",
            step=4,
            tools=[ToolSpec("calculator", "Evaluates arithmetic.", {"type": "object"})],
        ),
        wire_to_atif(malformed),
        wire_to_atif(orphan_tool),
        wire_to_atif({"task_id": "t", "prompt": "only a prompt", "reward": 0.0, "turns": []}),
    ]

    assert harbor_errors(docs) == [None, None, None, None]
    assert docs[0]["schema_version"] == ATIF_VERSION == "ATIF-v1.7"
    assert [s.get("llm_call_count") for s in docs[0]["steps"]] == [None, None, 1, 1]


def test_harbor_catches_what_it_forbids():
    """The check is Harbor's, not ours: a field it does not know and a step id out of order fail there."""
    doc = wire_to_atif(wire_item())
    unknown = {**doc, "rewards": 1.0}
    shuffled = {**doc, "steps": [{**doc["steps"][0], "step_id": 2}, *doc["steps"][1:]]}
    errors = harbor_errors([unknown, shuffled])
    assert "rewards" in errors[0] and "Extra inputs are not permitted" in errors[0]
    assert "expected 1 (sequential from 1), got 2" in errors[1]


def test_a_v17_trajectory_built_by_harbor_imports(tmp_path):
    doc = json.loads(harbor("make-atif-1.7"))
    assert doc["schema_version"] == "ATIF-v1.7" and doc["subagent_trajectories"]

    item = atif_to_wire(doc)
    roles = [t["role"] for t in item["turns"]]
    assert roles == ["system", "user", "assistant", "assistant", "tool", "assistant"]
    copied, call, tool, final = item["turns"][2:]
    assert copied["token_ids"] == [3, 4] and copied["loss_mask"] == [0, 0]  # copied context: never trained
    assert call["text"].startswith("<think>echo is enough</think>") and call["tool_name"] == "bash"
    assert call["token_ids"] == [5, 6] and call["loss_mask"] == [1, 1] and call["logprobs"] == [-0.5, -1.0]
    assert tool["text"] == "done" and final["text"] == "Finished."
    assert item["atif_subagents"] == 1 and item["session_id"] == "run-17"

    (tmp_path / "trajectory.json").write_text(json.dumps(doc))
    by_step, summary = read_atif([tmp_path])
    assert summary.skipped_files == [] and summary.without_reward == 1
    [stored] = by_step[0]
    assert [t["role"] for t in stored["turns"]] == roles


def test_our_export_read_back_is_harbor_valid_again():
    doc = wire_to_atif(wire_item(), model_name="smollm2-135m")
    again = wire_to_atif(atif_to_wire(doc), model_name="smollm2-135m")
    assert harbor_errors([again]) == [None]
    assert again["steps"] == doc["steps"]

"""preview_environment: what the dashboard shows next to an environment form, for every kind."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from trainers.envs.preview import check_environment_config, preview_environment
from trainers.registry import config_with_defaults, environment_kinds

MCP_SERVER = Path(__file__).with_name("mcp_server.py")
SAMPLES = {
    "from_dataset": None,  # needs a file: built in the test below
    "verifiers": {"environment": "vf-word-tools"},
    "openenv": {"server_app": "tests.fixtures.openenv_guess.server:app"},
    "agent": {
        "entry_point": "tests.trainers.envs.agents:calculator_agent",
        "tasks": [{"prompt": "What is 1 + 1?", "answer": 2}],
    },
    "harbor": {"path": str(Path(__file__).resolve().parents[2] / "fixtures" / "harbor_tasks")},
    "mcp_tools": {
        "tasks": [{"prompt": "What is 2 + 3?", "answer": 5}],
        "mcp_servers": [
            {"name": "tools", "command": [sys.executable, str(MCP_SERVER), "stdio"], "allow_tools": ["add"]}
        ],
    },
}


@pytest.mark.parametrize("kind", sorted(environment_kinds()))
def test_every_kind_previews_a_task_its_tools_and_its_prompts(kind, tmp_path):
    config = SAMPLES.get(kind, {})
    if kind == "from_dataset":
        path = tmp_path / "tasks.jsonl"
        path.write_text(
            json.dumps({"prompt": "What is 6 times 7?", "answer": 42})
            + "\n" * 2
            + json.dumps({"prompt": "2+2?", "answer": 4})
        )
        config = {"path": str(path), "tools": ["calculator"], "eval_fraction": 0.01}
    if kind == "verifiers":
        pytest.importorskip("vf_word_tools")
    result = preview_environment(kind, config)
    assert result["ok"], result["message"]
    assert result["errors"] == {} and result["task"]["id"] and result["task"]["prompt"]
    json.dumps(result)  # the dashboard ships it as JSON
    if kind == "openenv":  # a server it would start: the preview says so rather than starting it
        assert "started by each rollout worker" in result["health"] and result["first_message"] is None
    elif kind == "agent":  # the user's agent writes its prompts at run time: the task and the runner show
        assert result["task"]["prompt"] == "What is 1 + 1?" and result["first_message"] is None
        assert "calculator_agent (found)" in result["health"]
    elif kind == "harbor":  # no container for a preview: the task's instruction and what will run it show
        assert result["task"]["prompt"].startswith("Create the file /app/hello.txt")
        assert "1 Harbor task(s): hello-file" in result["health"]
    else:
        assert result["first_message"] and result["system_prompt"] is not None


def test_tools_and_rubric_criteria_show_for_a_verifiers_environment():
    pytest.importorskip("vf_word_tools")
    result = preview_environment("verifiers", {"environment": "vf-word-tools"})
    assert [t["name"] for t in result["tools"]] == ["count_letter", "spell"]
    assert result["tools"][0]["parameters"]["required"] == ["word", "letter"]
    assert "count_letter" in result["system_prompt"]
    assert {
        "name": "correct_answer",
        "kind": "verifiers_rubric",
        "weight": 1.0,
        "params": {"function": "correct_answer"},
    } in result["extra"]["rubric_criteria"]


def test_bad_config_gives_field_errors_from_the_schema_and_across_fields():
    assert preview_environment("arithmetic_calculator", {"max_digits": 0})["errors"] == {
        "max_digits": ["Max digits must be 1 or more (got 0)."]
    }
    crossed = preview_environment("arithmetic_calculator", {"min_digits": 4, "max_digits": 2})
    assert not crossed["ok"] and crossed["errors"] == {
        "max_digits": ["Must be at least min digits (4), not 2."]
    }
    both = preview_environment("openenv", {"url": "http://127.0.0.1:1", "server_app": "a:b"})
    assert "server_app" in both["errors"]
    assert check_environment_config("openenv", {}) == {
        "url": ["Give the server's URL, or a server app, command or Docker image to start."]
    }
    assert preview_environment("no_such_kind", {})["errors"]["kind"][0].startswith("unknown environment kind")
    assert preview_environment("textarena", {"game": "Wordle-v0"})["errors"]["game"]


def test_an_unreachable_server_is_a_message_not_an_exception():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = preview_environment("openenv", {"url": f"http://127.0.0.1:{port}", "connect_timeout_s": 1})
    assert not result["ok"] and f"127.0.0.1:{port} is unreachable" in result["message"]


def test_a_build_failure_is_a_message():
    result = preview_environment(
        "reasoning_gym", {"dataset": "basic_arithmetic", "dataset_config": {"bogus": 1}}
    )
    assert not result["ok"] and "cannot make 'basic_arithmetic'" in result["message"]


def test_defaults_of_every_kind_validate_once_required_fields_are_given():
    for name, spec in environment_kinds().items():
        sample = {
            "from_dataset": {"path": "/x.jsonl"},
            "verifiers": {"environment": "vf-word-tools"},
            "mcp_tools": SAMPLES["mcp_tools"],
            "agent": SAMPLES["agent"],
            "harbor": SAMPLES["harbor"],
        }.get(name, {})
        assert (
            check_environment_config(name, config_with_defaults(spec.config_schema, sample)) == {}
            or name == "openenv"
        )


def test_the_preview_and_the_ecosystem_modules_stay_light_for_the_web_process():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import trainers.envs.preview, trainers.envs.openenv, trainers.envs.verifiers_env\n"
        "import trainers.envs.reasoning_gym_env, trainers.envs.textarena_env, trainers.rubrics.ecosystem\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'verifiers', 'textarena',"
        " 'reasoning_gym', 'openenv', 'math_verify', 'django'})\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout

"""Example configs for the registered kinds, the one source the tests share: what a kind cannot default
(`SAMPLES`: where its tasks, tools, pattern or model come from), and `buildable_config`, the same sample
pointed at things that exist on this machine (the repository's fixtures, a file written for the test),
so the kind can be built, not only validated.

Used by tests/trainers/envs/test_registry.py (schema-valid defaults), tests/webapp/experiments/
test_schema_forms.py (forms round-trip them) and tests/deploy/test_every_kind_builds.py (every kind
built, on the host and inside the image).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from trainers.registry import config_with_defaults, criterion_kinds, environment_kinds

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"

# Kinds with a required text field whose default is empty: a user must type these.
REQUIRED_SAMPLES: dict[str, dict[str, Any]] = {
    "regex": {"pattern": r"\d+"},
    "learned_reward": {"path": "/models/reward"},
    "custom_python": {"function": "my_pkg.rewards:score"},
    "from_dataset": {"path": "/data/tasks.jsonl"},
    "harbor": {"path": "/tasks/hello-world"},
    "verifiers": {"environment": "vf-word-tools"},
}
# Kinds whose required value is a list (a JSON textarea), not one text field.
LIST_SAMPLES: dict[str, dict[str, Any]] = {
    "mcp_tools": {
        "mcp_servers": [{"name": "tools", "url": "http://127.0.0.1:8000/mcp", "allow_tools": ["add"]}]
    },
}
SAMPLES = {**REQUIRED_SAMPLES, **LIST_SAMPLES}

# The tasks of the kinds that take them inline (docs/environments.md's examples).
TASKS = [{"prompt": "What is 6 times 7?", "answer": 42}, {"prompt": "Capital of France?", "answer": "Paris"}]


def buildable_config(family: str, name: str, workdir: Path) -> dict[str, Any]:
    """The sample config of kind `name` (`family` "environment" or "criterion") with its defaults, pointed
    at what exists here: a tasks file written into `workdir`, the Harbor task and MCP server the tests
    ship, an OpenEnv URL nobody serves, an agent function of tests/trainers/envs/agents.py, a custom reward in this module."""
    spec = (environment_kinds() if family == "environment" else criterion_kinds())[name]
    local: dict[str, Any] = {}
    if name == "from_dataset":
        path = workdir / "tasks.jsonl"
        path.write_text("".join(json.dumps(task) + "\n" for task in TASKS))
        local = {"path": str(path)}
    elif name == "harbor":
        local = {"path": str(FIXTURES / "harbor_tasks" / "hello-file")}
    elif name == "mcp_tools":
        server = ROOT / "tests" / "trainers" / "envs" / "mcp_server.py"
        local = {
            "tasks": [{"prompt": "What is 1234 + 4321? Use the add tool.", "answer": 5555}],
            "mcp_servers": [
                {"name": "tools", "command": [sys.executable, str(server), "stdio"], "allow_tools": ["add"]}
            ],
        }
    elif name == "openenv":
        local = {"url": "http://127.0.0.1:9"}  # nobody serves it: the client connects at the first reset
    elif name == "agent":
        local = {"entry_point": "tests.trainers.envs.agents:calculator_agent", "tasks": TASKS}
    elif name == "custom_python":
        local = {"function": "tests.kind_examples:custom_reward"}
    return config_with_defaults(spec.config_schema, {**SAMPLES.get(name, {}), **local})


def custom_reward(*args: Any, **kwargs: Any) -> float:
    """The custom_python criterion's sample function."""
    return 1.0

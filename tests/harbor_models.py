"""Harbor's own pydantic models, asked from the Harbor venv (.venv-harbor, `make venv-harbor`).

Harbor 0.25 requires Python >= 3.12 and parts of it use 3.12 syntax; its models (`harbor.models.trajectories`,
`harbor.models.task.config`) import on 3.11, so the venv installs the package itself with
`--ignore-requires-python --no-deps` and only the models' dependencies. The tests run this file with
that venv's Python:

    python tests/harbor_models.py validate-atif  < JSON list of documents   → list of errors (null: valid)
    python tests/harbor_models.py make-atif-1.7                             → a v1.7 document built by Harbor
    python tests/harbor_models.py task-config < task.toml text              → TaskConfig as JSON
"""

from __future__ import annotations

import json
import sys


def validate_atif() -> None:
    from harbor.models.trajectories import Trajectory
    from pydantic import ValidationError

    out = []
    for doc in json.load(sys.stdin):
        try:
            Trajectory.model_validate(doc)
            out.append(None)
        except ValidationError as exc:
            out.append(str(exc))
    print(json.dumps(out))


def make_atif_17() -> None:
    """A trajectory as a Harbor agent writes it, with the fields v1.5-v1.7 added."""
    from harbor.models.trajectories import (
        Agent,
        FinalMetrics,
        Metrics,
        Observation,
        ObservationResult,
        Step,
        ToolCall,
        Trajectory,
    )

    def agent(name: str) -> Agent:
        return Agent(name=name, version="1.0.0", model_name="qwen3-8b")

    sub = Trajectory(
        schema_version="ATIF-v1.7",
        trajectory_id="sub-1",
        agent=agent("searcher"),
        steps=[Step(step_id=1, source="user", message="find it")],
    )
    trajectory = Trajectory(
        schema_version="ATIF-v1.7",
        session_id="run-17",
        trajectory_id="root-1",
        agent=agent("terminus-2"),
        steps=[
            Step(step_id=1, source="system", message="You are a shell agent."),
            Step(step_id=2, source="user", message="Create hello.txt"),
            Step(
                step_id=3,
                source="agent",
                message="Earlier: I listed the files.",
                is_copied_context=True,
                llm_call_count=1,
                metrics=Metrics(prompt_token_ids=[1, 2], completion_token_ids=[3, 4]),
            ),
            Step(
                step_id=4,
                source="agent",
                message="I will write the file.",
                reasoning_content="echo is enough",
                llm_call_count=1,
                tool_calls=[
                    ToolCall(
                        tool_call_id="c1", function_name="bash", arguments={"cmd": "echo hi > hello.txt"}
                    )
                ],
                observation=Observation(results=[ObservationResult(source_call_id="c1", content="done")]),
                metrics=Metrics(
                    prompt_token_ids=[1, 2, 3, 4], completion_token_ids=[5, 6], logprobs=[-0.5, -1.0]
                ),
            ),
            Step(step_id=5, source="agent", message="Finished.", llm_call_count=0),
        ],
        final_metrics=FinalMetrics(total_prompt_tokens=6, total_completion_tokens=4, total_steps=5),
        subagent_trajectories=[sub],
    )
    print(json.dumps(trajectory.to_json_dict()))


def task_config() -> None:
    from harbor.models.task.config import TaskConfig

    print(TaskConfig.model_validate_toml(sys.stdin.read()).model_dump_json())


if __name__ == "__main__":
    {"validate-atif": validate_atif, "make-atif-1.7": make_atif_17, "task-config": task_config}[sys.argv[1]]()

"""One factory per model for the web tests. Runs are made through the service (as users make them);
trajectories are written the way ingestion stores them."""

from __future__ import annotations

from typing import Any

from trainers.types import model_turns
from webapp.experiments.models import Run
from webapp.experiments.services import run_create
from webapp.rollouts.models import Trajectory, Turn

HOSTILE_TEXTS = [
    "<script>window.pwned = 1</script>",
    '<img src=x onerror="window.pwned=1">',
    "[click me](javascript:alert(1))",
]


def make_run(
    project,
    environment,
    rubric,
    user,
    name: str = "run",
    *,
    overrides: dict[str, Any] | None = None,
    preset: str = "grpo",
    queue: str = "cpu",
    dispatch: bool = False,
    **fields: Any,
) -> Run:
    """A run created by `run_create` (knobs in `overrides`); `fields` then set model fields directly
    (a status, progress) to stage a run in the middle of its life."""
    run, _token = run_create(
        project=project,
        name=name,
        environment=environment,
        rubric=rubric,
        preset=preset,
        overrides=overrides or {},
        user=user,
        queue=queue,
        dispatch=dispatch,
    )
    if fields:
        Run.objects.filter(pk=run.pk).update(**fields)
        run.refresh_from_db()
    return run


def turn(role: str, text: str = "", **fields: Any) -> dict[str, Any]:
    return {"role": role, "text": text, **fields}


def make_trajectory(
    run,
    *,
    step: int = 0,
    group: int = 0,
    sample: int = 0,
    task_id: str = "add-7",
    split: str = "train",
    reward: float = 0.0,
    turns: list[dict] | None = None,
    **fields: Any,
) -> Trajectory:
    turns = (
        turns
        if turns is not None
        else [turn("user", "What is 3 + 4?"), turn("assistant", "<answer>7</answer>")]
    )
    trajectory = Trajectory.objects.create(
        run=run,
        step=step,
        group_index=group,
        sample_index=sample,
        task_id=task_id,
        split=split,
        reward=reward,
        num_turns=model_turns(turns),
        num_tool_calls=sum(1 for t in turns if t.get("tool_name") and t["role"] == "assistant"),
        **fields,
    )
    Turn.objects.bulk_create(
        Turn(
            trajectory=trajectory,
            index=index,
            role=t["role"],
            text=t.get("text", ""),
            tool_name=t.get("tool_name", ""),
            tool_args=t.get("tool_args"),
            tool_result=t.get("tool_result", ""),
            reward=t.get("reward"),
            token_ids=t.get("token_ids"),
            loss_mask=t.get("loss_mask"),
        )
        for index, t in enumerate(turns)
    )
    return trajectory


def long_turns(count: int, *, words: int = 40, seed: int = 0) -> list[dict]:
    """`count` turns cycling user → assistant (with a tool call) → tool, each with tokens and a loss mask."""
    turns = []
    for index in range(count):
        role = ("user", "assistant", "tool")[index % 3]
        text = " ".join(f"w{(index * 7 + k + seed) % 97}" for k in range(words))
        extra: dict[str, Any] = {
            "token_ids": list(range(words)),
            "loss_mask": [1 if role == "assistant" else 0] * words,
        }
        if role == "assistant":
            extra.update(tool_name="calculator", tool_args={"expression": f"{index} + {seed}"})
        if role == "tool":
            extra.update(tool_name="calculator", tool_result=str(index + seed))
        turns.append(turn(role, f"turn {index}: {text}", **extra))
    return turns

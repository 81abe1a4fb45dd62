"""Factories for the review tests: trajectories with turns, written straight through the ORM."""

from __future__ import annotations

from collections.abc import Sequence

from tests.webapp.factories import make_trajectory as make_stored_trajectory
from tests.webapp.factories import turn
from webapp.rollouts.models import Trajectory


def make_trajectory(
    run,
    *,
    step: int = 1,
    group: int = 0,
    sample: int = 0,
    reward: float = 0.0,
    answer: str = "4",
    split: str = "train",
    task_id: str | None = None,
    seed: int = 7,
    prompt: str | None = None,
    components: list | None = None,
    tool: bool = False,
) -> Trajectory:
    """An answered addition task, as the review tests read it (optionally through one tool call)."""
    prompt = prompt if prompt is not None else f"What is {group} + 2?"
    turns = [turn("system", "You add numbers."), turn("user", prompt)]
    if tool:
        turns += [
            turn("assistant", '<tool>{"name": "add"}</tool>'),
            turn("tool", tool_name="add", tool_result=answer),
        ]
    turns.append(turn("assistant", f"<answer>{answer}</answer>"))
    return make_stored_trajectory(
        run,
        step=step,
        group=group,
        sample=sample,
        task_id=task_id or f"task-{group}",
        split=split,
        reward=reward,
        turns=turns,
        seed=seed,
        prompt=prompt,
        components=components or [],
    )


def make_group(
    run, *, step: int = 1, group: int = 0, rewards: Sequence[float] = (1.0, 0.0), **kwargs
) -> list[Trajectory]:
    return [
        make_trajectory(
            run, step=step, group=group, sample=i, reward=r, answer=f"answer {group}.{i}", **kwargs
        )
        for i, r in enumerate(rewards)
    ]

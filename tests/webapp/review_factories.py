"""Factories for the review tests: trajectories with turns, written straight through the ORM."""

from __future__ import annotations

from collections.abc import Sequence

from webapp.rollouts.models import Trajectory, Turn


def make_trajectory(run, *, step: int = 1, group: int = 0, sample: int = 0, reward: float = 0.0,
                    answer: str = "4", split: str = "train", task_id: str | None = None, seed: int = 7,
                    prompt: str | None = None, components: list | None = None, tool: bool = False) -> Trajectory:
    task_id = task_id or f"task-{group}"
    prompt = prompt if prompt is not None else f"What is {group} + 2?"
    trajectory = Trajectory.objects.create(
        run=run, step=step, split=split, group_index=group, sample_index=sample, task_id=task_id, seed=seed,
        prompt=prompt, reward=reward, components=components or [], num_turns=2 + 2 * tool,
    )
    turns = [Turn(trajectory=trajectory, index=0, role="system", text="You add numbers."),
             Turn(trajectory=trajectory, index=1, role="user", text=prompt)]
    if tool:
        turns += [Turn(trajectory=trajectory, index=2, role="assistant", text='<tool>{"name": "add"}</tool>'),
                  Turn(trajectory=trajectory, index=3, role="tool", tool_name="add", tool_result=answer)]
    turns.append(Turn(trajectory=trajectory, index=len(turns), role="assistant", text=f"<answer>{answer}</answer>"))
    Turn.objects.bulk_create(turns)
    return trajectory


def make_group(run, *, step: int = 1, group: int = 0, rewards: Sequence[float] = (1.0, 0.0), **kwargs) -> list[Trajectory]:
    return [make_trajectory(run, step=step, group=group, sample=i, reward=r, answer=f"answer {group}.{i}", **kwargs)
            for i, r in enumerate(rewards)]

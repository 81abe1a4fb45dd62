from __future__ import annotations

from typing import Any

from django.db import models

from trainers.learn.experience import step_diff
from webapp.experiments.models import Run


class ExperienceLibraryStep(models.Model):
    """Training-Free GRPO's experience library after one step (trainers/recipes/training_free_grpo.py),
    with the edits that step made. Step 0 is the library the run starts with."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="experience_steps")
    step = models.PositiveIntegerField()
    items = models.JSONField(default=list, help_text="[{id, text}] in library order")
    edits = models.JSONField(default=list, help_text="[{op, id, text, before, applied, reason, group}]")
    groups_asked = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="unique_experience_step")]
        ordering = ["run", "step"]

    def __str__(self) -> str:
        return f"run {self.run_id} experience library at step {self.step}"

    @staticmethod
    def step_in_prompt(step: int, split: str) -> int:
        """Which step's library was in the prompt of a trajectory of `step`: a training step's rollouts
        are generated before its edits (the previous step's library), an evaluation at step s after
        them (step s's)."""
        return step if split == "eval" else max(step - 1, 0)

    def summary(self) -> dict[str, Any]:
        """The step as the run page and its live `experience` frames show it."""
        return {
            "step": self.step,
            "items": self.items,
            "edits": self.edits,
            "counts": step_diff(self.edits),
            "groups_asked": self.groups_asked,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


RATE_BINS = 10  # the success-rate histogram's bins over [0, 1]


class TaskPoolStep(models.Model):
    """The curriculum from failures' task pool after one step (trainers/learn/curriculum.py): its size,
    frontier and replay buffer, what the step drew from each, and its newest entries with their lineage."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="task_pool_steps")
    step = models.PositiveIntegerField()
    size = models.PositiveIntegerField(default=0)
    frontier = models.PositiveIntegerField(default=0)
    replay = models.PositiveIntegerField(default=0)
    drawn = models.JSONField(default=dict, help_text="{tasks, frontier, replay}: the step's tasks by origin")
    entries = models.JSONField(
        default=list, help_text="[{id, prompt, parent, generator, born, state, attempts, rate, difficulty}]"
    )
    generation = models.JSONField(
        default=dict,
        help_text="{generator, generated, refused: {reason: count}}: what made the step's variants, and what "
        "the LLM generator refused",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="unique_task_pool_step")]
        ordering = ["run", "step"]

    def __str__(self) -> str:
        return f"run {self.run_id} task pool at step {self.step}"

    @property
    def replay_share(self) -> float:
        """The share of the step's prompts that came from the replay buffer."""
        total = sum(int(v) for v in (self.drawn or {}).values())
        return (self.drawn or {}).get("replay", 0) / total if total else 0.0

    def rate_histogram(self) -> list[int]:
        """Tasks tried at least once, by their newest success rate, in RATE_BINS equal bins over [0, 1]."""
        bins = [0] * RATE_BINS
        for entry in self.entries:
            rate = entry.get("rate")
            if rate is not None:
                bins[min(int(float(rate) * RATE_BINS), RATE_BINS - 1)] += 1
        return bins

    def summary(self) -> dict[str, Any]:
        """The step as the run page and its live `task_pool` frames show it."""
        states: dict[str, int] = {}
        for entry in self.entries:
            states[entry.get("state", "new")] = states.get(entry.get("state", "new"), 0) + 1
        return {
            "step": self.step,
            "size": self.size,
            "frontier": self.frontier,
            "replay": self.replay,
            "drawn": self.drawn,
            "replay_share": self.replay_share,
            "histogram": self.rate_histogram(),
            "states": states,
            "generator": (self.generation or {}).get("generator", ""),
            "generated": (self.generation or {}).get("generated", 0),
            "refused": (self.generation or {}).get("refused") or {},
            "entries": self.entries,
        }

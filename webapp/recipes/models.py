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

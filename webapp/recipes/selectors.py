"""Reads of the recipes' state."""

from __future__ import annotations

from typing import Any

from webapp.recipes.models import ExperienceLibraryStep


def experiences_in_prompt(*, run_id: int, step: int, split: str) -> list[dict[str, Any]] | None:
    """The experiences a trajectory of (`run_id`, `step`, `split`) had in its prompt; None for a run that
    keeps no experience library."""
    wanted = ExperienceLibraryStep.step_in_prompt(step, split)
    library = ExperienceLibraryStep.objects.filter(run_id=run_id, step__lte=wanted).order_by("-step").first()
    if library is None:
        return None
    return list(library.items)

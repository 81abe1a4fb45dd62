"""The recipes' panels on other apps' pages, loaded by their templates (`{% load recipes %}`)."""

from __future__ import annotations

from typing import Any

from django import template

from webapp.recipes.selectors import experiences_in_prompt

register = template.Library()


@register.inclusion_tag("recipes/_experiences_in_prompt.html")
def experiences_of(trajectory: Any) -> dict[str, Any]:
    """Training-Free GRPO: the experiences that were in this trajectory's prompt (nothing for other runs)."""
    return {
        "experiences": experiences_in_prompt(
            run_id=trajectory.run_id, step=trajectory.step, split=trajectory.split
        )
    }

"""Writes of the recipes' state: each as the ingestion of one event, inside its transaction."""

from __future__ import annotations

from typing import Any

from webapp.experiments.models import Run
from webapp.recipes.models import ExperienceLibraryStep, TaskPoolStep


def experience_store(run: Run, event: dict[str, Any]) -> dict[str, Any]:
    """Store an `experience` event (trainers.sdk.wire) as its step's library; a step sent again (a resumed
    run repeating it) replaces the earlier one. Returns the step's summary for the live frame."""
    library, _ = ExperienceLibraryStep.objects.update_or_create(
        run=run,
        step=event["step"],
        defaults={
            "items": event.get("items", []),
            "edits": [
                {"id": "", "text": "", "before": "", "applied": True, "reason": "", "group": 0, **edit}
                for edit in event.get("edits", [])
            ],
            "groups_asked": event.get("groups_asked", 0),
            "prompt_tokens": event.get("prompt_tokens", 0),
            "completion_tokens": event.get("completion_tokens", 0),
        },
    )
    return library.summary()


def task_pool_store(run: Run, event: dict[str, Any]) -> dict[str, Any]:
    """Store a `task_pool` event (trainers.sdk.wire) as its step's pool; returns its summary for the live frame."""
    pool, _ = TaskPoolStep.objects.update_or_create(
        run=run,
        step=event["step"],
        defaults={
            "size": event.get("size", 0),
            "frontier": event.get("frontier", 0),
            "replay": event.get("replay", 0),
            "drawn": event.get("drawn") or {},
            "generation": {
                "generator": event.get("generator", ""),
                "generated": event.get("generated", 0),
                "refused": event.get("refused") or {},
            },
            "entries": [
                {
                    "prompt": "",
                    "parent": "",
                    "generator": "",
                    "born": 0,
                    "state": "new",
                    "attempts": 0,
                    "rate": None,
                    "difficulty": "",
                    **entry,
                }
                for entry in event.get("entries", [])
            ],
        },
    )
    return pool.summary()

"""The SDK: what `pip install rollout-studio` ships without torch or Django.

`from trainers.sdk import Studio` is the public entry point (docs/api.md, "Python SDK"). The package
holds the client (`client`), the event wire format declared once (`wire`), event sinks and the phase clock
(`events`), the HTTP reporter (`reporting`), input coercion from what a trainer holds to the wire format
(`coercion`) and the ATIF converter (`atif`). Nothing in it imports another part of `trainers`: every
other package may depend on it, never the reverse.
"""

from __future__ import annotations

from trainers.sdk.client import FINAL_STATUSES, Run, Studio, StudioError, attach
from trainers.sdk.coercion import jsonable, messages_to_turns, prompt_task_id, trajectory_item

__all__ = [
    "FINAL_STATUSES",
    "Run",
    "Studio",
    "StudioError",
    "attach",
    "jsonable",
    "messages_to_turns",
    "prompt_task_id",
    "trajectory_item",
]

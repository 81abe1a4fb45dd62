"""One meaning of "turns" (trainers.types.model_turns: the model's responses): the run's `turns` metric, the
explorer's Turns column and the trajectory page show the same number for the same trajectory, the number
`max_turns` bounds — never the count of every message."""

from __future__ import annotations

import re

from django.urls import reverse

from trainers.learn.metrics import groups_of_items, step_metrics
from trainers.types import Task, Turn, model_turns
from trainers.types import Trajectory as Episode
from webapp.rollouts.ingest import ingest_batch
from webapp.rollouts.models import Trajectory

# An episode under max_turns=3 that used all three: 7 messages, 3 of them the model's.
MESSAGES = [
    {"role": "system", "text": "You can call the calculator."},
    {"role": "user", "text": "What is 40 + 2?"},
    {"role": "assistant", "text": "Let me compute.", "tool_name": "calc", "tool_args": {"expr": "40+2"}},
    {"role": "tool", "text": "42", "tool_name": "calc", "tool_result": "42"},
    {"role": "assistant", "text": "Checking again.", "tool_name": "calc", "tool_args": {"expr": "2+40"}},
    {"role": "tool", "text": "42", "tool_name": "calc", "tool_result": "42"},
    {"role": "assistant", "text": "The answer is 42."},
]


def wire_item() -> dict:
    return {
        "group": 0,
        "sample": 0,
        "task_id": "add-0",
        "split": "train",
        "prompt": "What is 40 + 2?",
        "reward": 1.0,
        "status": "ok",
        "components": [],
        "turns": MESSAGES,
    }


def test_a_turn_is_a_model_response_for_the_trainer_the_wire_and_the_rollout_alike():
    episode = Episode(
        task=Task(id="add-0", prompt="What is 40 + 2?"), turns=[Turn.from_dict(m) for m in MESSAGES]
    )
    assert model_turns(MESSAGES) == episode.model_turns == 3
    assert step_metrics(groups_of_items([wire_item()]))["turns"] == 3


def test_the_explorer_and_the_trajectory_page_count_what_the_turns_metric_and_max_turns_count(
    client_for, project, run
):
    ingest_batch(
        run=run, payload={"events": [{"seq": 1, "type": "trajectories", "step": 1, "items": [wire_item()]}]}
    )
    trajectory = Trajectory.objects.get()
    client = client_for("dave")

    explorer = client.get(reverse("review:explorer", args=[project.slug])).content.decode()
    page = client.get(
        reverse("rollouts:trajectory_detail", args=[project.slug, trajectory.pk])
    ).content.decode()

    row = explorer[explorer.index(f'data-trajectory="{trajectory.pk}"') :]
    assert re.findall(r'<td class="num">(\d+)</td>', row)[:3] == ["1", "3", "2"]  # step, turns, tool calls
    assert re.search(r"<dt[^>]*>Turns</dt><dd>3 <span class=\"muted\">model turns with 2 tool calls", page)
    assert trajectory.num_turns == 3

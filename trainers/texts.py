"""How a trajectory becomes preference text: a prompt and a response, as strings and as chat messages.

One rendering for both sides of the learned reward: the dashboard's preference snapshots and exports
(`webapp/review/services.py:snapshot_pairs`) train on it, and the `learned_reward` criterion scores with it, so a reward
model never sees one shape of text in training and another when it scores.

The prompt is everything before the first assistant turn (system and user turns); the response is
everything from it on. A response of exactly one assistant turn is that turn's text; a longer one
(tool calls, tool replies, several assistant turns) is a transcript, one "role: text" block per turn,
tool turns labelled with their tool.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol


class TurnLike(Protocol):
    # Read-only, so that both a stored Turn row (str fields) and a trainer Turn (optional ones) fit.
    @property
    def role(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def tool_name(self) -> str | None: ...
    @property
    def tool_result(self) -> str | None: ...


@dataclass
class TrajectoryText:
    prompt: str
    response: str
    prompt_messages: list[dict[str, str]] = field(default_factory=list)
    response_messages: list[dict[str, str]] = field(default_factory=list)


def _content(turn: TurnLike) -> str:
    if turn.role == "tool":
        return turn.tool_result or turn.text
    return turn.text


def _label(turn: TurnLike) -> str:
    return f"tool ({turn.tool_name})" if turn.role == "tool" and turn.tool_name else turn.role


def _message(turn: TurnLike) -> dict[str, str]:
    message = {"role": turn.role, "content": _content(turn)}
    if turn.role == "tool" and turn.tool_name:
        message["name"] = turn.tool_name
    return message


def flat_response(messages: Iterable[dict[str, str]]) -> str:
    """A response as flat text for preference exports: always one "role: text" block per message, so
    the chosen and the rejected side of a pair are rendered by the same rule whatever their shapes (a
    bare answer on one side and a transcript on the other is a cue a DPO model learns instead of the
    preference). Tool messages are labelled with their tool when the message names one."""
    blocks = []
    for message in messages:
        role = message.get("role", "")
        label = f"tool ({message['name']})" if role == "tool" and message.get("name") else role
        blocks.append(f"{label}: {message.get('content', '')}")
    return "\n".join(blocks)


def trajectory_text(prompt: str, turns: Iterable[TurnLike]) -> TrajectoryText:
    """Split `turns` (in order) at the first assistant turn. `prompt` is the trajectory's task prompt;
    when empty, the last user turn before the response stands in for it."""
    turns = list(turns)
    first_assistant = next((i for i, t in enumerate(turns) if t.role == "assistant"), len(turns))
    before, after = turns[:first_assistant], turns[first_assistant:]
    prompt_messages = [_message(t) for t in before]
    response_messages = [_message(t) for t in after]
    if not prompt:
        users = [t.text for t in before if t.role == "user"]
        prompt = users[-1] if users else ""
    if len(after) == 1 and after[0].role == "assistant":
        response = after[0].text
    else:
        response = "\n".join(f"{_label(t)}: {_content(t)}" for t in after)
    return TrajectoryText(prompt, response, prompt_messages, response_messages)

"""Turn what a user pastes into the rubric preview into a Trajectory.

Accepted, as a string or already-decoded JSON:
- a trajectory object: {"task": {"id", "prompt", "answer", "meta"}, "turns": [...], "status", "env_reward", "info"};
- an object with "messages" (OpenAI style) or a bare list of turns, each {"role", "text" or "content", …};
- ChatML text: <|im_start|>role\\n…<|im_end|>;
- a plain chat transcript where each message starts with "role:" at the start of a line
  (system / user / assistant / tool; "human" and "ai" are read as user and assistant);
- any other text, taken as a single assistant message.

Assistant messages that contain a `<tool_call>` get `tool_name` / `tool_args` filled in from it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from trainers.rollout.toolcalls import parse_tool_calls
from trainers.types import Role, Task, Trajectory, Turn

_ROLE_ALIASES: dict[str, Role] = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "bot": "assistant",
    "tool": "tool",
    "ipython": "tool",
}
_ROLE_LINE = re.compile(
    r"^[ \t]*(?:#+[ \t]*)?(system|user|human|assistant|ai|bot|tool)[ \t]*:[ \t]?",
    re.IGNORECASE | re.MULTILINE,
)
_CHATML = re.compile(r"<\|im_start\|>\s*(\w+)\s*\n(.*?)(?:<\|im_end\|>|(?=<\|im_start\|>)|\Z)", re.DOTALL)


class TranscriptError(ValueError):
    pass


def _turn_from_dict(data: Any, index: int) -> Turn:
    if not isinstance(data, dict):
        raise TranscriptError(f"turns.{index}: must be an object with 'role' and 'text'")
    role = _ROLE_ALIASES.get(str(data.get("role", "")).lower())
    if role is None:
        raise TranscriptError(
            f"turns.{index}.role: must be one of system, user, assistant, tool (got {data.get('role')!r})"
        )
    text = data.get("text", data.get("content", ""))
    if isinstance(text, list):  # OpenAI content parts
        text = "".join(part.get("text", "") for part in text if isinstance(part, dict))
    fields = {**data, "role": role, "text": "" if text is None else str(text)}
    if role == "tool" and "tool_name" not in fields and isinstance(data.get("name"), str):
        fields["tool_name"] = data["name"]
    return Turn.from_dict(fields)


def _split_chat(text: str) -> list[Turn]:
    chatml = _CHATML.findall(text)
    if chatml:
        turns = []
        for role, body in chatml:
            mapped = _ROLE_ALIASES.get(role.lower())
            if mapped is None:
                raise TranscriptError(f"unknown ChatML role {role!r}")
            turns.append(Turn(role=mapped, text=body.strip()))
        return turns
    markers = list(_ROLE_LINE.finditer(text))
    if not markers:
        return [Turn(role="assistant", text=text.strip())]
    turns = []
    preamble = text[: markers[0].start()].strip()
    if preamble:
        turns.append(Turn(role="user", text=preamble))
    for k, marker in enumerate(markers):
        end = markers[k + 1].start() if k + 1 < len(markers) else len(text)
        turns.append(Turn(role=_ROLE_ALIASES[marker.group(1).lower()], text=text[marker.end() : end].strip()))
    return turns


def _fill_tool_fields(turns: list[Turn]) -> None:
    last_call: str | None = None
    for turn in turns:
        if turn.role == "assistant":
            if turn.tool_name is None:
                calls = parse_tool_calls(turn.text)
                if isinstance(calls, list) and calls:
                    turn.tool_name, turn.tool_args = calls[0].name, calls[0].arguments
            last_call = turn.tool_name
        elif turn.role == "tool":
            if turn.tool_result is None:
                turn.tool_result = turn.text
            if turn.tool_name is None:
                turn.tool_name = last_call


def _task_from(data: Any, turns: list[Turn], answer: Any) -> Task:
    first_user = next((t.text for t in turns if t.role == "user"), "")
    if isinstance(data, dict):
        task = Task(
            id=str(data.get("id", "pasted")),
            prompt=str(data.get("prompt", first_user)),
            answer=data.get("answer"),
            meta=dict(data.get("meta") or {}),
        )
    else:
        task = Task(id="pasted", prompt=first_user)
    if answer is not None:
        task.answer = answer
    return task


def parse_transcript(source: str | dict[str, Any] | list[Any], *, answer: Any = None) -> Trajectory:
    """A Trajectory from pasted text or JSON; `answer`, when given, becomes the task's expected answer."""
    data: Any = source
    if isinstance(source, str):
        stripped = source.strip()
        if not stripped:
            raise TranscriptError("the transcript is empty")
        data = None
        if stripped[0] in "[{":
            try:
                data = json.loads(stripped)
            except json.JSONDecodeError as exc:
                if stripped[0] == "{" and '"turns"' in stripped or stripped[0] == "[":
                    raise TranscriptError(f"looks like JSON but does not parse: {exc}") from exc
        if data is None:
            turns = _split_chat(source)
            _fill_tool_fields(turns)
            return Trajectory(task=_task_from(None, turns, answer), turns=turns)
    if isinstance(data, list):
        turns = [_turn_from_dict(t, i) for i, t in enumerate(data)]
        _fill_tool_fields(turns)
        return Trajectory(task=_task_from(None, turns, answer), turns=turns)
    if not isinstance(data, dict):
        raise TranscriptError("expected a trajectory object, a list of turns or a chat transcript")
    raw_turns = data.get("turns", data.get("messages"))
    if not isinstance(raw_turns, list):
        raise TranscriptError("a trajectory object needs a 'turns' (or 'messages') list")
    turns = [_turn_from_dict(t, i) for i, t in enumerate(raw_turns)]
    _fill_tool_fields(turns)
    task_data = (
        data.get("task")
        if isinstance(data.get("task"), dict)
        else {k: data[k] for k in ("prompt", "answer") if k in data}
    )
    trajectory = Trajectory(task=_task_from(task_data, turns, answer), turns=turns)
    if data.get("status") in ("ok", "truncated", "error"):
        trajectory.status = data["status"]
    if isinstance(data.get("env_reward"), (int, float)) and not isinstance(data.get("env_reward"), bool):
        trajectory.env_reward = float(data["env_reward"])
    if isinstance(data.get("info"), dict):
        trajectory.info = dict(data["info"])
    return trajectory

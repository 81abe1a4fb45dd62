"""Input coercion for the SDK: what a trainer has at hand → the wire format (`trainers.sdk.wire`).

Lenient by design: chat messages in OpenAI / TRL shapes, numpy and torch scalars, dataclasses, our own
`trainers.types` objects — whatever a training loop holds is turned into wire-format dicts. What cannot be
turned into a valid one raises ValueError with the reason (the SDK drops it with a warning), judged by the
very checker the dashboard runs (`trainers.sdk.wire_check.check_item`), so client and server never disagree.

No third-party imports: the SDK installs without torch or Django.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, is_dataclass
from typing import Any

from trainers.sdk import wire
from trainers.sdk.wire import MAX_TEXT, MAX_TURNS_PER_TRAJECTORY, ROLES, SPLITS, TRAJECTORY_STATUSES

MAX_TASK_ID = wire.TRAJECTORY["task_id"].max_length or 200
# Split trajectory events well below the server's per-event and per-batch limits.
MAX_ITEMS_PER_EVENT = 500
MAX_EVENT_BYTES = 2 * 1024 * 1024


def as_number(value: Any) -> float | None:
    """A finite float from int/float/numpy/torch scalars; None for anything else or NaN/inf."""
    if isinstance(value, bool):
        return float(value)
    if hasattr(value, "item") and not isinstance(value, (int, float)):
        try:
            value = value.item()
        except (TypeError, ValueError, RuntimeError):  # a tensor with more than one element
            return None
    if isinstance(value, (int, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    return None


def as_integer(value: Any) -> int | None:
    if hasattr(value, "item") and not isinstance(value, (int, float)):
        try:
            value = value.item()
        except (TypeError, ValueError, RuntimeError):
            return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def jsonable(value: Any) -> Any:
    """Plain JSON from configs and trainer objects: dataclasses, enums, numpy/torch scalars, paths."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        return jsonable(asdict(value))
    if hasattr(value, "to_dict"):
        try:
            return jsonable(value.to_dict())
        except TypeError:
            pass
    if hasattr(value, "item"):
        try:
            return jsonable(value.item())
        except (TypeError, ValueError, RuntimeError):
            pass
    if hasattr(value, "value") and type(value).__module__ != "builtins":  # enums
        return jsonable(value.value)
    return str(value)


def _text(value: Any) -> str:
    """Message content as text: a string, or OpenAI-style content parts joined."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for part in value:
            if isinstance(part, Mapping):
                if part.get("type", "text") == "text":
                    parts.append(str(part.get("text", "")))
                else:
                    parts.append(f"[{part.get('type')}]")
            else:
                parts.append(str(part))
        return "".join(parts)
    return str(value)


def clip_text(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 20] + "\n…[truncated]"


_ROLE_ALIASES = {
    "developer": "system",
    "function": "tool",
    "ipython": "tool",
    "human": "user",
    "gpt": "assistant",
    "model": "assistant",
    "bot": "assistant",
}


def messages_to_turns(messages: Any, default_role: str = "assistant") -> list[dict[str, Any]]:
    """Chat messages (a string, or [{"role", "content", "tool_calls"?}] as in OpenAI / TRL) → turns."""
    if messages is None:
        return []
    if isinstance(messages, str):
        return [{"role": default_role, "text": clip_text(messages, MAX_TEXT)}]
    if isinstance(messages, Mapping):
        messages = [messages]
    turns: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, Mapping):
            turns.append({"role": default_role, "text": clip_text(_text(message), MAX_TEXT)})
            continue
        role = str(message.get("role") or default_role).lower()
        role = role if role in ROLES else _ROLE_ALIASES.get(role, "user")
        turn: dict[str, Any] = {
            "role": role,
            "text": clip_text(_text(message.get("content", message.get("text"))), MAX_TEXT),
        }
        calls = message.get("tool_calls") or []
        if role == "assistant" and calls:
            function = calls[0].get("function", calls[0]) if isinstance(calls[0], Mapping) else {}
            turn["tool_name"] = str(function.get("name") or "")[:100] or None
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    arguments = {"raw": arguments}
            if isinstance(arguments, Mapping):
                turn["tool_args"] = jsonable(arguments)
        if role == "tool":
            turn["tool_result"] = turn["text"]
            if message.get("name"):
                turn["tool_name"] = str(message["name"])[:100]
        turns.append({k: v for k, v in turn.items() if v is not None})
    return turns


def _turn(source: Any) -> dict[str, Any]:
    """A turn in the wire format from a wire-format dict, a chat message or a `trainers.types.Turn`."""
    if hasattr(source, "to_dict"):
        source = source.to_dict()
    if not isinstance(source, Mapping):
        return {"role": "assistant", "text": clip_text(_text(source), MAX_TEXT)}
    if "text" not in source and ("content" in source or "tool_calls" in source):
        turn = messages_to_turns([source])[0]
    else:
        role = str(source.get("role") or "assistant").lower()
        turn = {
            "role": role if role in ROLES else _ROLE_ALIASES.get(role, "user"),
            "text": clip_text(_text(source.get("text")), MAX_TEXT),
        }
    for field in wire.TURN.fields:  # every other field the format declares, coerced to its type
        if field.name not in turn and source.get(field.name) not in (None, ""):
            value = coerce_value(field, source[field.name])
            if value is not None:
                turn[field.name] = value
    return turn


def prompt_task_id(prompt: str) -> str:
    """A stable id for a prompt, so the same task is followed across steps (and across runs)."""
    return "prompt-" + hashlib.sha1(prompt.encode("utf-8", "replace")).hexdigest()[:16]


def _components(value: Any) -> list[dict[str, Any]] | None:
    """[{"name", "raw", "weight", "weighted"}] from that list, or from the shorthand {name: raw}."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        out = []
        for name, raw in value.items():
            number = as_number(raw)
            if number is not None:
                out.append({"name": str(name)[:200], "raw": number, "weight": 1.0, "weighted": number})
        return out
    if not isinstance(value, list):
        return None
    out = []
    for component in value:
        if not isinstance(component, Mapping) or not component.get("name"):
            return None
        raw, weight = as_number(component.get("raw")), as_number(component.get("weight", 1.0))
        weighted = as_number(component.get("weighted")) if component.get("weighted") is not None else None
        if raw is None or weight is None:
            continue  # a criterion that did not apply (NaN): leave it out rather than lose the trajectory
        entry = {
            "name": str(component["name"])[:200],
            "raw": raw,
            "weight": weight,
            "weighted": weighted if weighted is not None else raw * weight,
        }
        for field in wire.COMPONENT.fields:  # the optional ones, whatever the format declares
            if field.name not in entry and component.get(field.name) is not None:
                value = coerce_value(field, component[field.name])
                if value is not None:
                    entry[field.name] = value
        out.append(entry)
    return out


def coerce_value(field: wire.Field, value: Any) -> Any:
    """`value` as `field` of the wire format wants it, or None when it cannot be (the field is left out)."""
    if field.type == "number":
        return as_number(value)
    if field.type == "integer":
        number = as_integer(value)
        low = wire.INT64_MIN if field.minimum is None else field.minimum
        high = wire.INT64_MAX if field.maximum is None else field.maximum
        return number if number is not None and low <= number <= high else None
    if field.type == "boolean":
        return value if isinstance(value, bool) else None
    if field.type == "string":
        return clip_text(str(value), field.max_length or MAX_TEXT)
    if field.type == "numbers":
        if not isinstance(value, Mapping):
            return None
        numbers = {str(k): as_number(v) for k, v in value.items()}
        return {k: v for k, v in numbers.items() if v is not None}
    if field.type == "object":
        return jsonable(value) if isinstance(value, Mapping) else None
    if field.type == "integers":
        ints = [as_integer(v) for v in value] if isinstance(value, (list, tuple)) else [None]
        return ints if all(v is not None for v in ints) else None
    if field.type in ("halves", "octets"):  # packed arrays: a packed string as is, a list packed here
        if isinstance(value, str):
            return value
        if not isinstance(value, (list, tuple)) and not hasattr(value, "tolist"):
            return None
        values = value.tolist() if hasattr(value, "tolist") else list(value)
        if field.type == "halves":
            return wire.pack_halves(as_number(v) for v in values)
        ints = [as_integer(v) for v in values]
        return wire.pack_octets(ints) if all(v is not None for v in ints) else None  # type: ignore[arg-type]
    if field.type == "record" and field.items is not None:
        if not isinstance(value, Mapping):
            return None
        record = {}
        for sub in field.items.fields:
            if value.get(sub.name) is not None:
                coerced = coerce_value(sub, value[sub.name])
                if coerced is not None:
                    record[sub.name] = coerced
        return record or None
    return None


def trajectory_item(obj: Any) -> dict[str, Any]:
    """One trajectory in the wire format from what a trainer has at hand.

    Accepts a wire-format dict (with "turns"), a dict with "prompt" + "completion" (strings or chat
    messages) or "messages", a `trainers.types.Trajectory` (reward from `info["reward"]`, else its
    env_reward), or anything with `to_item()`. "group" / "sample" may be left out (see
    `Run.log_trajectories`). Raises ValueError when no reward can be found.
    """
    if hasattr(obj, "to_item"):
        obj = obj.to_item()
    elif hasattr(obj, "task") and hasattr(obj, "turns") and not isinstance(obj, Mapping):
        info = dict(getattr(obj, "info", {}) or {})
        obj = {
            "task_id": obj.task.id,
            "prompt": obj.task.prompt,
            "turns": [t.to_dict() if hasattr(t, "to_dict") else t for t in obj.turns],
            "status": obj.status,
            "reward": info.pop("reward", getattr(obj, "env_reward", None)),
            **{
                k: v
                for k, v in info.items()
                if k in ("group", "sample", "advantage", "components", "seed", "split")
            },
        }
    if not isinstance(obj, Mapping):
        raise ValueError(f"a trajectory must be a dict or a Trajectory, not {type(obj).__name__}")
    item: dict[str, Any] = {}
    prompt = obj.get("prompt")
    if isinstance(obj.get("turns"), list):
        turns = [_turn(t) for t in obj["turns"]]
    elif obj.get("messages") is not None:
        turns = messages_to_turns(obj["messages"], default_role="user")
    else:
        turns = messages_to_turns(prompt, default_role="user") + messages_to_turns(obj.get("completion"))
    too_long = len(turns) > MAX_TURNS_PER_TRAJECTORY
    item["turns"] = turns[:MAX_TURNS_PER_TRAJECTORY]

    if not isinstance(prompt, str):
        # A chat prompt: the last user message is what identifies the task.
        users = [t["text"] for t in turns if t["role"] == "user"]
        prompt = users[-1] if users else (_text(prompt) if prompt is not None else "")
    item["prompt"] = clip_text(prompt, MAX_TEXT)
    task_id = obj.get("task_id")
    item["task_id"] = str(task_id)[:MAX_TASK_ID] if task_id not in (None, "") else prompt_task_id(prompt)

    components = _components(obj.get("components"))
    if components is None:
        raise ValueError("components must be a list of {name, raw, weight, weighted} or a {name: value} dict")
    item["components"] = components
    reward = as_number(obj.get("reward"))
    if reward is None and obj.get("reward") is None and components:
        reward = sum(c["weighted"] for c in components)
    if reward is None:
        raise ValueError(f"trajectory has no finite reward (got {obj.get('reward')!r})")
    item["reward"] = reward
    if "advantage" in obj:
        item["advantage"] = as_number(obj["advantage"])
    status = obj.get("status", "ok")
    item["status"] = "truncated" if too_long else status if status in TRAJECTORY_STATUSES else "ok"
    split = obj.get("split", "train")
    item["split"] = split if split in SPLITS else "train"
    for field in wire.TRAJECTORY.fields:  # every other field the format declares, coerced to its type
        if field.name not in item and obj.get(field.name) is not None:
            value = coerce_value(field, obj[field.name])
            if value is not None:
                item[field.name] = value
    return item


def event_chunks(items: list[dict[str, Any]]) -> Iterable[list[dict[str, Any]]]:
    """Split a long list of trajectories into events that stay well under the server's limits."""
    chunk: list[dict[str, Any]] = []
    size = 0
    for item in items:
        item_size = len(json.dumps(item, separators=(",", ":")))
        if chunk and (len(chunk) >= MAX_ITEMS_PER_EVENT or size + item_size > MAX_EVENT_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += item_size
    if chunk:
        yield chunk

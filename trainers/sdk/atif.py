"""ATIF (Harbor's Agent Trajectory Interchange Format, v1.4+; we write v1.7) ⇄ our trajectory wire format.

Pure functions on plain dicts (no Django, no I/O): `wire_to_atif(item)` turns one trajectory item of a
`trajectories` event (docs/api.md, "Run event ingestion") into an ATIF document, `atif_to_wire(doc)`
turns an ATIF document back into a wire item. The web export and the importer
(`python -m trainers.importers atif FILE…`) both go through here.

How the two line up:

| wire | ATIF |
|---|---|
| system / user turn | step `source: "system"` / `"user"`, `message` |
| assistant turn | step `source: "agent"`: `message`, `tool_calls` (`function_name` = `tool_name`, `arguments` = `tool_args`), `metrics.completion_token_ids` = its `token_ids`, `metrics.prompt_token_ids` = every earlier turn's ids, `metrics.logprobs` |
| tool turns after it | that step's `observation.results` (`source_call_id` = the call's id, `content` = text) |
| reward, components, advantage, task, group, status… | root `extra.rollout_studio` |
| per-turn reward, ids of non-agent turns, masks that are not the default | `extra` of the step |

ATIF has no reward field of its own: an ATIF file from another tool (a Harbor trial) carries none,
and `atif_to_wire` leaves `reward` None for the caller to fill (the importer reads Harbor's
`result.json`). `reasoning_content` becomes a `<think>…</think>` prefix of the assistant text, and a
step's further tool calls beyond the first are kept in `extra` (a wire turn names one call).

v1.5-v1.8 on import: a step marked `is_copied_context` (context copied from an earlier trajectory) is
kept but never trained on (its tokens' loss mask is 0); `llm_call_count`, `trajectory_id` and
content parts are read; embedded `subagent_trajectories` are not turns of this trajectory and are
left out (counted in the item's `atif_subagents`). Our own export writes v1.7: `trajectory_id`, and
`llm_call_count: 1` on each sampled agent step.
"""

from __future__ import annotations

import uuid
from typing import Any

ATIF_VERSION = "ATIF-v1.7"
EXTRA = "rollout_studio"  # our key in the root and step `extra` objects
AGENT_NAME = "rollout-studio"
AGENT_VERSION = "0.1.0"
SOURCE_OF_ROLE = {"system": "system", "user": "user", "assistant": "agent"}
ROLE_OF_SOURCE = {v: k for k, v in SOURCE_OF_ROLE.items()}
# Trajectory fields that travel in extra.rollout_studio (everything but the turns).
ITEM_FIELDS = (
    "task_id",
    "prompt",
    "task",
    "reward",
    "components",
    "advantage",
    "status",
    "split",
    "group",
    "sample",
    "seed",
    "policy_version",
    "prompt_tokens",
    "completion_tokens",
    "rubric_version",
    "env_reward",
    "env_state",
    "turn_rewards",
    "step",
)


class AtifError(ValueError):
    """A document that is not an ATIF trajectory we can read; the message says where."""


def _tool_definitions(tools: list[Any] | None) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    out = []
    for tool in tools:
        if isinstance(tool, dict):
            out.append(tool if "function" in tool else {"type": "function", "function": tool})
        else:  # a trainers.types.ToolSpec
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                }
            )
    return out


def call_id(turn_index: int) -> str:
    """The id of the tool call made at a given turn (wire turns carry none of their own)."""
    return f"call_{turn_index}"


def wire_to_atif(
    item: dict[str, Any],
    *,
    session_id: str | None = None,
    model_name: str | None = None,
    tools: list[Any] | None = None,
    step: int | None = None,
    agent_name: str = AGENT_NAME,
    agent_version: str = AGENT_VERSION,
) -> dict[str, Any]:
    """One wire trajectory item → one ATIF document (a dict ready for `json.dumps`)."""
    turns = list(item.get("turns") or [])
    steps: list[dict[str, Any]] = []
    history: list[int] | None = []  # the ids of every turn so far; None once a turn has none
    last_agent: dict[str, Any] | None = None
    for index, turn in enumerate(turns):
        role, text = turn.get("role"), turn.get("text") or ""
        ids = turn.get("token_ids")
        extra: dict[str, Any] = {}
        if turn.get("reward") is not None:
            extra["reward"] = turn["reward"]
        if role == "tool":
            result: dict[str, Any] = {"content": text}
            if last_agent is None:  # a tool result with no call before it: hang it on a system step
                last_agent = {"step_id": len(steps) + 1, "source": "system", "message": ""}
                steps.append(last_agent)
            calls = last_agent.get("tool_calls") or []
            if calls:
                result["source_call_id"] = calls[0]["tool_call_id"]
            observation = last_agent.setdefault("observation", {"results": []})
            observation["results"].append(result)
            step_extra = last_agent.setdefault("extra", {}).setdefault(EXTRA, {})
            results_extra = step_extra.setdefault("results", [])
            result_extra: dict[str, Any] = {}
            if turn.get("tool_name"):
                result_extra["tool_name"] = turn["tool_name"]
            if turn.get("tool_result") is not None and turn["tool_result"] != text:
                result_extra["tool_result"] = turn["tool_result"]
            for key in ("token_ids", "loss_mask", "reward"):
                if turn.get(key) is not None:
                    result_extra[key] = turn[key]
            results_extra.append(result_extra)
        else:
            source = SOURCE_OF_ROLE.get(role)
            if source is None:
                raise AtifError(f"turns.{index}.role: {role!r} has no ATIF source")
            out: dict[str, Any] = {"step_id": len(steps) + 1, "source": source, "message": text}
            if source == "agent":
                if turn.get("tool_name") and isinstance(turn.get("tool_args"), dict):
                    out["tool_calls"] = [
                        {
                            "tool_call_id": call_id(index),
                            "function_name": turn["tool_name"],
                            "arguments": turn["tool_args"],
                        }
                    ]
                elif turn.get("tool_name"):  # a call that did not parse: its name, but no arguments to show
                    extra["tool_name"] = turn["tool_name"]
                metrics: dict[str, Any] = {}
                if ids is not None:
                    metrics["completion_token_ids"] = list(ids)
                    metrics["completion_tokens"] = len(ids)
                    if history is not None:
                        metrics["prompt_token_ids"] = list(history)
                        metrics["prompt_tokens"] = len(history)
                if turn.get("logprobs") is not None:
                    metrics["logprobs"] = list(turn["logprobs"])
                if metrics:
                    out["metrics"] = metrics
                mask = turn.get("loss_mask")
                if mask is not None and (ids is None or list(mask) != [1] * len(ids)):
                    extra["loss_mask"] = list(mask)
                if model_name:
                    out["model_name"] = model_name
                if ids is not None:
                    out["llm_call_count"] = 1  # one sampled completion per agent step
                last_agent = out
            else:
                if ids is not None:
                    extra["token_ids"] = list(ids)
                mask = turn.get("loss_mask")
                if mask is not None and (ids is None or list(mask) != [0] * len(ids)):
                    extra["loss_mask"] = list(mask)
                last_agent = None
            if extra:
                out["extra"] = {EXTRA: extra}
            steps.append(out)
        if history is not None:
            history = history + list(ids) if ids is not None else None
    if not steps:
        steps.append({"step_id": 1, "source": "user", "message": str(item.get("prompt") or "")})
    fields = {k: item[k] for k in ITEM_FIELDS if k in item and item[k] is not None}
    if step is not None:
        fields["step"] = step
    session = session_id or _session_id(item)
    doc: dict[str, Any] = {
        "schema_version": ATIF_VERSION,
        "session_id": session,
        "trajectory_id": session,
        "agent": {"name": agent_name, "version": agent_version},
        "steps": steps,
        "extra": {EXTRA: fields},
    }
    if model_name:
        doc["agent"]["model_name"] = model_name
    definitions = _tool_definitions(tools)
    if definitions:
        doc["agent"]["tool_definitions"] = definitions
    final: dict[str, Any] = {"total_steps": len(steps)}
    for ours, theirs in (
        ("prompt_tokens", "total_prompt_tokens"),
        ("completion_tokens", "total_completion_tokens"),
    ):
        if isinstance(item.get(ours), int):
            final[theirs] = item[ours]
    doc["final_metrics"] = final
    return doc


def _session_id(item: dict[str, Any]) -> str:
    parts = [str(item[k]) for k in ("task_id", "step", "group", "sample") if item.get(k) is not None]
    return "-".join(parts) if parts else uuid.uuid4().hex


def _text(message: Any, where: str) -> str:
    """A step message or result content: a string, or (v1.6+) content parts joined."""
    if message is None:
        return ""
    if isinstance(message, str):
        return message
    if isinstance(message, list):
        parts = []
        for part in message:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, dict):
                parts.append(f"[{part.get('type', 'content')}]")
            else:
                raise AtifError(f"{where}: content parts must be objects")
        return "".join(parts)
    raise AtifError(f"{where}: must be a string or a list of content parts")


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _ints(value: Any, where: str) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise AtifError(f"{where}: must be a list of integers")
    return list(value)


def atif_to_wire(doc: Any) -> dict[str, Any]:
    """One ATIF document → one wire trajectory item (`reward` None when the document carries none)."""
    if not isinstance(doc, dict):
        raise AtifError("an ATIF trajectory must be a JSON object")
    version = doc.get("schema_version")
    if not isinstance(version, str) or not version.startswith("ATIF-v1."):
        raise AtifError(f"schema_version: expected ATIF-v1.x, got {version!r}")
    steps = doc.get("steps")
    if not isinstance(steps, list) or not steps:
        raise AtifError("steps: must be a non-empty list")
    root_extra = _object(doc.get("extra"))
    ours = _object(root_extra.get(EXTRA))
    turns: list[dict[str, Any]] = []
    previous_ids: list[int] | None = None  # prompt + completion of the last agent step
    for n, step in enumerate(steps):
        where = f"steps.{n}"
        if not isinstance(step, dict):
            raise AtifError(f"{where}: must be an object")
        role = ROLE_OF_SOURCE.get(str(step.get("source")))
        if role is None:
            raise AtifError(f"{where}.source: must be system, user or agent (got {step.get('source')!r})")
        step_extra = _object(step.get("extra"))
        extra = _object(step_extra.get(EXTRA))
        text = _text(step.get("message"), f"{where}.message")
        if (
            role == "assistant"
            and isinstance(step.get("reasoning_content"), str)
            and step["reasoning_content"]
        ):
            text = f"<think>{step['reasoning_content']}</think>\n{text}"
        turn: dict[str, Any] = {"role": role, "text": text}
        metrics = _object(step.get("metrics"))
        calls = step.get("tool_calls") or []
        if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
            raise AtifError(f"{where}.tool_calls: must be a list of objects")
        names = {c.get("tool_call_id"): c.get("function_name") for c in calls}
        if role == "assistant":
            if calls:
                first = calls[0]
                if not isinstance(first.get("function_name"), str):
                    raise AtifError(f"{where}.tool_calls.0.function_name: must be a string")
                turn["tool_name"] = first["function_name"]
                if isinstance(first.get("arguments"), dict):
                    turn["tool_args"] = first["arguments"]
            elif isinstance(extra.get("tool_name"), str):
                turn["tool_name"] = extra["tool_name"]
            ids = _ints(metrics.get("completion_token_ids"), f"{where}.metrics.completion_token_ids")
            if ids is not None:
                turn["token_ids"] = ids
                turn["loss_mask"] = _ints(extra.get("loss_mask"), f"{where}.extra.loss_mask") or [1] * len(
                    ids
                )
                prompt = _ints(metrics.get("prompt_token_ids"), f"{where}.metrics.prompt_token_ids")
                previous_ids = (prompt + ids) if prompt is not None else None
            logprobs = metrics.get("logprobs")
            if isinstance(logprobs, list) and all(isinstance(x, (int, float)) for x in logprobs):
                turn["logprobs"] = [float(x) for x in logprobs]
            if len(calls) > 1:
                turn["extra_tool_calls"] = calls[1:]
            if step.get("is_copied_context") is True and "token_ids" in turn:
                turn["loss_mask"] = [0] * len(turn["token_ids"])  # copied context: shown, never trained
        else:
            ids = _ints(extra.get("token_ids"), f"{where}.extra.token_ids")
            if ids is not None:
                turn["token_ids"] = ids
                turn["loss_mask"] = _ints(extra.get("loss_mask"), f"{where}.extra.loss_mask") or [0] * len(
                    ids
                )
        if extra.get("reward") is not None:
            turn["reward"] = extra["reward"]
        if not (role == "system" and not text and "observation" in step and not turn.get("token_ids")):
            turns.append(turn)  # (a bare system step only carries an observation; its results follow)
        observation = step.get("observation")
        results = observation.get("results") if isinstance(observation, dict) else None
        if observation is not None and not isinstance(results, list):
            raise AtifError(f"{where}.observation.results: must be a list")
        results_extra = _list(extra.get("results"))
        for k, result in enumerate(results or []):
            if not isinstance(result, dict):
                raise AtifError(f"{where}.observation.results.{k}: must be an object")
            content = _text(result.get("content"), f"{where}.observation.results.{k}.content")
            mine = results_extra[k] if k < len(results_extra) and isinstance(results_extra[k], dict) else {}
            tool_turn: dict[str, Any] = {
                "role": "tool",
                "text": content,
                "tool_result": mine.get("tool_result", content),
            }
            name = mine.get("tool_name") or names.get(result.get("source_call_id")) or turn.get("tool_name")
            if name:
                tool_turn["tool_name"] = name
            for key in ("token_ids", "loss_mask", "reward"):
                if mine.get(key) is not None:
                    tool_turn[key] = mine[key]
            turns.append(tool_turn)
        # Tool tokens of a foreign file: what the next agent step's prompt adds after this one's.
        if results and len(results) == 1 and "token_ids" not in turns[-1] and previous_ids is not None:
            following = next(
                (s for s in steps[n + 1 :] if isinstance(s, dict) and s.get("source") == "agent"), None
            )
            prompt = (following or {}).get("metrics", {}).get("prompt_token_ids") if following else None
            if (
                isinstance(prompt, list)
                and prompt[: len(previous_ids)] == previous_ids
                and len(prompt) > len(previous_ids)
            ):
                turns[-1]["token_ids"] = list(prompt[len(previous_ids) :])
                turns[-1]["loss_mask"] = [0] * (len(prompt) - len(previous_ids))
    return _item(doc, ours, root_extra, turns)


def _item(
    doc: dict[str, Any], ours: dict[str, Any], root_extra: dict[str, Any], turns: list[dict[str, Any]]
) -> dict[str, Any]:
    """The wire item around the turns: our own fields the file kept, else what ATIF's root says."""
    item: dict[str, Any] = {k: v for k, v in ours.items() if k in ITEM_FIELDS}
    item["turns"] = turns
    item.setdefault(
        "reward", root_extra.get("reward") if isinstance(root_extra.get("reward"), (int, float)) else None
    )
    if "prompt" not in item:
        users = [t["text"] for t in turns if t["role"] == "user"]
        item["prompt"] = users[0] if users else ""
    item.setdefault("session_id", doc.get("session_id"))
    final = _object(doc.get("final_metrics"))
    for ours_key, theirs in (
        ("prompt_tokens", "total_prompt_tokens"),
        ("completion_tokens", "total_completion_tokens"),
    ):
        if ours_key not in item and isinstance(final.get(theirs), int):
            item[ours_key] = final[theirs]
    subagents = doc.get("subagent_trajectories")
    if isinstance(subagents, list) and subagents:
        item["atif_subagents"] = len(subagents)
    agent = _object(doc.get("agent"))
    if agent.get("model_name"):
        item.setdefault("model_name", agent["model_name"])
    return item


__all__ = ["ATIF_VERSION", "AtifError", "atif_to_wire", "call_id", "wire_to_atif"]

"""The OpenAI chat-completions shapes the gateway reads and writes, and its errors.

Plain data and checks, no torch: a request body becomes a `ChatRequest` (or an `ApiError` that the
server sends as OpenAI's error object), a sampled message becomes a `chat.completion` (or a stream of
`chat.completion.chunk`s). Only what a chat agent sends is understood; the rest is refused with a
message that names the field, or ignored where OpenAI itself treats it as a hint (`model`, `user`,
`seed`, `parallel_tool_calls`).
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from trainers.types import ToolCall, ToolSpec

ROLES = ("system", "user", "assistant", "tool")
MAX_STOP_STRINGS = 8


class ApiError(Exception):
    """An error the gateway answers with: HTTP status and OpenAI's `{"error": {...}}` object."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.type, self.param = status, message, code, type_, param
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, *, param: str | None = None, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, code=code, param=param)


@dataclass
class Message:
    """One chat message, normalised: `content` is text (text parts joined), `tool_calls` parsed."""

    role: str
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None

    def key(self) -> tuple[Any, ...]:
        """What makes two messages the same message (call ids aside: some clients renumber them)."""
        calls = tuple((c.name, json.dumps(c.arguments, sort_keys=True)) for c in self.tool_calls)
        return (self.role, self.content, calls, self.tool_call_id if self.role == "tool" else None)


@dataclass
class ChatRequest:
    messages: list[Message]
    tools: list[ToolSpec]
    model: str = ""
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    return_token_ids: bool = False  # vLLM's extension: prompt and completion token ids in the reply

    def tools_key(self) -> str:
        return json.dumps([[t.name, t.description, t.parameters] for t in self.tools], sort_keys=True)


def _text(content: Any, param: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise bad_request(
                    'Only text content parts ({"type": "text", "text": …}) are supported.',
                    param=f"{param}.{i}",
                )
            parts.append(part["text"])
        return "".join(parts)
    raise bad_request("Message content must be a string or a list of text parts.", param=param)


def _arguments(raw: Any, param: str) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            decoded = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            raise bad_request(
                "Tool call arguments must be a JSON object (as a string).", param=param
            ) from None
        if isinstance(decoded, dict):
            return decoded
    raise bad_request("Tool call arguments must be a JSON object (as a string).", param=param)


def parse_message(raw: Any, index: int) -> Message:
    param = f"messages.{index}"
    if not isinstance(raw, dict):
        raise bad_request("Each message must be a JSON object.", param=param)
    role = raw.get("role")
    if role == "developer":  # OpenAI's newer name for the system message
        role = "system"
    if role not in ROLES:
        raise bad_request(f"Unsupported role {role!r}; use one of {', '.join(ROLES)}.", param=f"{param}.role")
    message = Message(role=role, content=_text(raw.get("content"), f"{param}.content"))
    if role == "assistant" and raw.get("tool_calls"):
        calls = raw["tool_calls"]
        if not isinstance(calls, list):
            raise bad_request("tool_calls must be a list.", param=f"{param}.tool_calls")
        for j, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise bad_request(
                    "Each tool call needs a function with a name.", param=f"{param}.tool_calls.{j}"
                )
            arguments = _arguments(function.get("arguments"), f"{param}.tool_calls.{j}.function.arguments")
            message.tool_calls.append(ToolCall(function["name"], arguments, call.get("id")))
    if role == "tool":
        call_id = raw.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise bad_request(
                "A tool message needs the tool_call_id it answers.", param=f"{param}.tool_call_id"
            )
        message.tool_call_id = call_id
    return message


def parse_tools(raw: Any) -> list[ToolSpec]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise bad_request("tools must be a list.", param="tools")
    tools = []
    for i, tool in enumerate(raw):
        function = (
            tool.get("function")
            if isinstance(tool, dict) and tool.get("type", "function") == "function"
            else None
        )
        if (
            not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not function["name"]
        ):
            raise bad_request(
                'Each tool must be {"type": "function", "function": {"name": …}}.', param=f"tools.{i}"
            )
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            raise bad_request(
                "A tool's parameters must be a JSON schema object.", param=f"tools.{i}.function.parameters"
            )
        tools.append(ToolSpec(function["name"], str(function.get("description") or ""), parameters))
    return tools


def _number(body: dict[str, Any], key: str, low: float, high: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        raise bad_request(f"{key} must be a number from {low} to {high}.", param=key)
    return float(value)


def parse_chat_request(body: Any) -> ChatRequest:
    """The request body of `POST /v1/chat/completions`, checked (raises ApiError 400)."""
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise bad_request("messages must be a non-empty list.", param="messages")
    messages = [parse_message(m, i) for i, m in enumerate(raw_messages)]
    if messages[-1].role == "assistant":
        raise bad_request(
            "The last message must not be the assistant's (continuing a prefilled assistant "
            "message is not supported).",
            param="messages",
            code="unsupported_value",
        )
    n = body.get("n", 1)
    if n not in (1, None):
        raise bad_request(
            "Only n = 1 is supported: open one session per sample.", param="n", code="unsupported_value"
        )
    tools = parse_tools(body.get("tools"))
    if body.get("tool_choice") == "none":
        tools = []  # the model is not shown the tools and no call is read
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise bad_request("max_tokens must be a positive integer.", param="max_tokens")
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop or []
    if (
        not isinstance(stops, list)
        or not all(isinstance(s, str) for s in stops)
        or len(stops) > MAX_STOP_STRINGS
    ):
        raise bad_request(
            f"stop must be a string or a list of at most {MAX_STOP_STRINGS} strings.", param="stop"
        )
    options = body.get("stream_options") or {}
    return ChatRequest(
        messages=messages,
        tools=tools,
        model=str(body.get("model") or ""),
        temperature=_number(body, "temperature", 0.0, 2.0),
        top_p=_number(body, "top_p", 0.0, 1.0),
        max_tokens=max_tokens,
        stop=[s for s in stops if s],
        stream=bool(body.get("stream")),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        logprobs=bool(body.get("logprobs")),
        return_token_ids=bool(body.get("return_token_ids")),
    )


# ---- replies ---------------------------------------------------------------------------------------


@dataclass
class Reply:
    """What one call sampled, ready to be written as a completion."""

    content: str | None
    tool_calls: list[ToolCall]
    finish_reason: str  # stop | length | tool_calls
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    tokens: list[str]  # each completion token decoded on its own (for `logprobs`)
    id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex[:24]}")
    created: int = field(default_factory=lambda: int(time.time()))

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [tool_call_json(c) for c in self.tool_calls]
        return message

    def usage(self) -> dict[str, int]:
        prompt, completion = len(self.prompt_ids), len(self.completion_ids)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def logprobs_json(self) -> dict[str, Any]:
        return {
            "content": [
                {"token": t, "logprob": lp, "bytes": list(t.encode("utf-8")), "top_logprobs": []}
                for t, lp in zip(self.tokens, self.logprobs, strict=True)
            ]
        }


def tool_call_json(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
    }


def completion_json(reply: Reply, request: ChatRequest, model: str) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "message": reply.message(),
        "finish_reason": reply.finish_reason,
        "logprobs": reply.logprobs_json() if request.logprobs else None,
    }
    body: dict[str, Any] = {
        "id": reply.id,
        "object": "chat.completion",
        "created": reply.created,
        "model": model,
        "choices": [choice],
        "usage": reply.usage(),
    }
    if request.return_token_ids:
        body["prompt_token_ids"] = list(reply.prompt_ids)
        choice["token_ids"] = list(reply.completion_ids)
    return body


def completion_chunks(reply: Reply, request: ChatRequest, model: str) -> Iterator[dict[str, Any]]:
    """The reply as a stream: the role, the text, the tool calls, the finish reason, the usage."""

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return {
            "id": reply.id,
            "object": "chat.completion.chunk",
            "created": reply.created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, **extra}],
        }

    yield chunk({"role": "assistant", "content": ""})
    if reply.content:
        yield chunk({"content": reply.content}, logprobs=reply.logprobs_json() if request.logprobs else None)
    if reply.tool_calls:
        yield chunk(
            {"tool_calls": [{"index": i, **tool_call_json(c)} for i, c in enumerate(reply.tool_calls)]}
        )
    yield chunk({}, reply.finish_reason)
    if request.include_usage:
        yield {
            "id": reply.id,
            "object": "chat.completion.chunk",
            "created": reply.created,
            "model": model,
            "choices": [],
            "usage": reply.usage(),
        }

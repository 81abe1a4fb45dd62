"""Tool-call formats of the models researchers train now: Qwen3 (hermes calls after a `<think>` block),
Qwen3-Coder (XML calls) and gpt-oss (OpenAI's harmony channels). Registered in `trainers.rollout.toolformats`; built
on the classes of `trainers.rollout.toolformats_base`.

What each reads and writes was checked against the family's real chat template (tests/fixtures/templates:
Qwen/Qwen3-0.6B, Qwen3-Coder, openai/gpt-oss-120b), rendered by `apply_chat_template`:

- `qwen3`: `<think>\\nREASONING\\n</think>\\n\\n` then hermes `<tool_call>\\n{"name", "arguments"}\\n</tool_call>`.
  Calls and the answer are read after the reasoning only (a call the model muses about is not a call);
  the trajectory keeps the whole text; the template sees the reasoning as `reasoning_content` (it keeps it
  for the turns after the task, as the model saw them).
- `qwen3_coder`: `<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>`;
  values are text, read back by the tool's schema type (a number, a boolean, JSON for objects and lists).
- `harmony` (gpt-oss): messages on channels — `analysis` (reasoning), `commentary to=functions.NAME` with a
  JSON body and `<|call|>` (a call), `final` (the answer). The control tokens are special tokens a decoder
  drops, so this format reads the completion decoded with them (`completion_text`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from trainers.rollout.toolcalls import (
    ParseError,
    ToolExample,
    parse_tool_calls,
    resolve_call,
)
from trainers.rollout.toolformats_base import HermesFormat, NativeToolFormat
from trainers.sdk.reasoning import harmony_messages, split_reasoning
from trainers.types import ToolCall, ToolSpec


class Qwen3Format(HermesFormat):
    """Qwen3 with thinking: hermes calls, read after the `<think>` block."""

    name = "qwen3"

    def answer_text(self, text: str) -> str:
        return split_reasoning(text)[1]

    def has_call(self, text: str) -> bool:
        return super().has_call(self.answer_text(text))

    def parse(self, text: str, tools: list[ToolSpec] | None = None) -> list[ToolCall] | ParseError:
        return self._with_hint(parse_tool_calls(self.answer_text(text), tools))

    def assistant_message(self, text: str, calls: list[ToolCall]) -> dict[str, Any]:
        reasoning, visible = split_reasoning(text)
        message = super().assistant_message(visible, calls)
        if calls:
            before = visible.split("<tool_call>", 1)[0].strip()
            message["content"] = before
        if reasoning or "<think>" in text:
            message["reasoning_content"] = reasoning
        return message


_XML_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_XML_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|$)", re.DOTALL)
_XML_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|$)", re.DOTALL)


def _typed(value: str, schema: dict[str, Any] | None) -> Any:
    """An XML parameter's text as the tool's schema types it (as vLLM's qwen3_coder parser reads it)."""
    kinds = (schema or {}).get("type", "string")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    if "string" in kinds or not kinds:
        return value
    lowered = value.strip()
    if "boolean" in kinds and lowered.lower() in ("true", "false"):
        return lowered.lower() == "true"
    if "null" in kinds and lowered.lower() in ("null", "none"):
        return None
    try:
        return json.loads(lowered)
    except ValueError:
        return value  # the schema check then says what is wrong


class Qwen3CoderFormat(NativeToolFormat):
    """Qwen3-Coder: XML calls inside `<tool_call>`."""

    name = "qwen3_coder"
    stop = ("</tool_call>", "</answer>")
    hint = (
        "Write a tool call exactly like <tool_call>\n<function=TOOL_NAME>\n<parameter=ARGUMENT>\nvalue\n"
        "</parameter>\n</function>\n</tool_call>"
    )

    def call_text(self, call: ToolCall) -> str:
        params = "".join(
            f"<parameter={key}>\n{json.dumps(value) if isinstance(value, (dict, list)) else value}\n</parameter>\n"
            for key, value in call.arguments.items()
        )
        return f"<tool_call>\n<function={call.name}>\n{params}</function>\n</tool_call>"

    def has_call(self, text: str) -> bool:
        return "<tool_call>" in text

    def parse(self, text: str, tools: list[ToolSpec] | None = None) -> list[ToolCall] | ParseError:
        calls: list[ToolCall] = []
        for block in _XML_CALL.findall(text):
            function = _XML_FUNCTION.search(block)
            if function is None:
                # A hermes-style JSON call inside the tags: read it as that.
                parsed = parse_tool_calls(f"<tool_call>{block}</tool_call>", tools)
                if isinstance(parsed, ParseError):
                    return self._with_hint(ParseError("A tool call needs <function=NAME> … </function>."))
                calls += parsed
                continue
            name = function.group(1).strip()
            tool = next((t for t in tools or [] if t.name == name), None)
            properties = (tool.parameters.get("properties") or {}) if tool is not None else {}
            arguments = {}
            for key, raw in _XML_PARAMETER.findall(function.group(2)):
                key = key.strip()
                value = raw[1:] if raw.startswith("\n") else raw
                value = value[:-1] if value.endswith("\n") else value
                arguments[key] = _typed(value, properties.get(key))
            call = resolve_call(name, arguments, tools)
            if isinstance(call, ParseError):
                return self._with_hint(call)
            calls.append(call)
        return calls

    def assistant_message(self, text: str, calls: list[ToolCall]) -> dict[str, Any]:
        message = super().assistant_message(text, calls)
        if calls:
            message["content"] = text.split("<tool_call>", 1)[0].strip()
        return message


# --- gpt-oss: harmony -------------------------------------------------------------------------------

_START, _END, _MESSAGE, _CHANNEL = "<|start|>", "<|end|>", "<|message|>", "<|channel|>"
_CONSTRAIN, _CALL, _RETURN = "<|constrain|>", "<|call|>", "<|return|>"
HARMONY_TOKENS = (_START, _END, _MESSAGE, _CHANNEL, _CONSTRAIN, _CALL, _RETURN)


class HarmonyFormat(NativeToolFormat):
    """gpt-oss: a call is a `commentary` message to `functions.NAME` with a JSON body; the answer is the
    `final` channel's message; `analysis` is reasoning, kept in the trajectory and out of the answer."""

    name = "harmony"
    stop = (_CALL,)
    hint = (
        "Call a tool with a commentary message to it: <|channel|>commentary to=functions.TOOL_NAME "
        "<|constrain|>json<|message|>{...}<|call|>"
    )
    keeps_special_tokens = True
    closes_itself = True  # the sampled message ends with <|call|> or <|return|>: no close to add

    def completion_text(self, tokenizer: Any, token_ids: list[int], text: str) -> str:
        """The sampled text with the harmony control tokens the decoder dropped, less the closing
        <|return|> (the end of the turn, not part of it)."""
        decoded = tokenizer.decode(token_ids, skip_special_tokens=False)
        return decoded.removesuffix(_RETURN)

    def tools_prompt(self, tools: list[ToolSpec], example: ToolExample | None = None) -> str:
        return super().tools_prompt(tools, example)

    def call_text(self, call: ToolCall) -> str:
        return (
            f"{_CHANNEL}commentary to=functions.{call.name} {_CONSTRAIN}json{_MESSAGE}"
            f"{json.dumps(call.arguments)}{_CALL}"
        )

    def answer_text(self, text: str) -> str:
        messages = harmony_messages(text)
        finals = [m["body"] for m in messages if m["channel"] == "final"]
        if finals:
            return finals[-1]
        if messages:  # reasoning or a call only: no answer yet
            return ""
        return text

    def has_call(self, text: str) -> bool:
        return any(m["recipient"] for m in harmony_messages(text))

    def parse(self, text: str, tools: list[ToolSpec] | None = None) -> list[ToolCall] | ParseError:
        calls = []
        for message in harmony_messages(text):
            if not message["recipient"]:
                continue
            try:
                arguments = json.loads(message["body"].strip() or "{}")
            except json.JSONDecodeError as exc:
                return self._with_hint(ParseError(f"The call's arguments are not valid JSON: {exc.msg}."))
            call = resolve_call(message["recipient"], arguments, tools)
            if isinstance(call, ParseError):
                return self._with_hint(call)
            calls.append(call)
        return calls

    def assistant_message(self, text: str, calls: list[ToolCall]) -> dict[str, Any]:
        messages = harmony_messages(text)
        thinking = "".join(m["body"] for m in messages if m["channel"] == "analysis")
        if not calls:
            message: dict[str, Any] = {"role": "assistant", "content": self.answer_text(text)}
        else:
            message = super().assistant_message("", calls)
            del message["content"]  # the template refuses content and thinking together
        if thinking:
            message["thinking"] = thinking
        return message


def detect_current_family(template: str) -> str | None:
    """The families of this module, from the template's markup (checked before the older families)."""
    if "<|channel|>" in template and "<|call|>" in template:
        return "harmony"
    if "<function=" in template and "<parameter=" in template:
        return "qwen3_coder"
    if "<tool_call>" in template and "<think>" in template:
        return "qwen3"
    return None

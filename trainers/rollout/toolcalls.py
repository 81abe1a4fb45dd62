"""The one tool-call format models are prompted with and the parser accepts.

A tool call is a JSON object inside `<tool_call>` tags, and a final answer sits inside `<answer>`
tags:

    <tool_call>{"name": "calculator", "arguments": {"expression": "12+7"}}</tool_call>
    <answer>19</answer>

The format is chosen to be easy for a 135M-parameter model: one short tag pair, plain JSON, and a
worked example in the system prompt (`format_tools_prompt`). Model output is untrusted: the parser
never raises on it. A malformed call (bad JSON, unknown tool, arguments violating the tool's schema)
comes back as a `ParseError` whose `observation` is the text the environment shows the model.

Deliberate leniencies, because small models make these slips and the intent is unambiguous:
- a missing `</tool_call>` at the very end of the message;
- a Markdown code fence around the JSON inside the tags;
- `"arguments"` left out when the tool has no required parameters;
- `"arguments"` given as a bare string when the tool has exactly one parameter.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

from trainers.types import ToolCall, ToolSpec

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"
# Every observation that reports a failed tool call starts with this, so rubrics can tell failed calls
# from successful ones by reading the trajectory alone.
TOOL_ERROR_PREFIX = "Error:"

_TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_UNCLOSED_ANSWER = re.compile(r"<answer>(.*)\Z", re.DOTALL)
_CODE_FENCE = re.compile(r"^```[a-zA-Z]*\s*(.*?)\s*```$", re.DOTALL)


STUDIO_CALL_HINT = (
    'Write a tool call exactly like <tool_call>{"name": "TOOL_NAME", "arguments": {...}}</tool_call>'
)


@dataclass
class ParseError:
    """A tool call the model tried to make but got wrong. Not an exception: a value to show the model.

    `hint` shows the call syntax the model is expected to use (each tool format sets its own).
    """

    message: str
    tool_name: str | None = None  # set when the call named a tool before going wrong
    hint: str = STUDIO_CALL_HINT

    @property
    def observation(self) -> str:
        return f"{TOOL_ERROR_PREFIX} {self.message} {self.hint}".rstrip()


@dataclass
class ToolExample:
    """A worked example for the system prompt: question, the call, the tool's result, the answer."""

    question: str
    call: ToolCall
    result: str
    answer: str


def tool_call_blocks(text: str) -> list[str]:
    """The raw contents of every `<tool_call>` block, in order (an unclosed last block runs to the end)."""
    return [m.group(1) for m in _TOOL_CALL_BLOCK.finditer(text)]


def has_tool_call(text: str) -> bool:
    return TOOL_CALL_OPEN in text


def extract_answer(text: str) -> str | None:
    """The stripped content of the last `<answer>…</answer>` (an unclosed tag at the end counts), or None."""
    matches = _ANSWER_BLOCK.findall(text)
    if matches:
        return matches[-1].strip()
    unclosed = _UNCLOSED_ANSWER.search(text)
    if unclosed and ANSWER_CLOSE not in unclosed.group(1):
        return unclosed.group(1).strip()
    return None


def is_error_observation(text: str | None) -> bool:
    return text is not None and text.lstrip().startswith(TOOL_ERROR_PREFIX)


def decode_call_json(raw: str) -> dict[str, Any] | ParseError:
    body = raw.strip()
    fenced = _CODE_FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body:
        return ParseError("The tool call is empty.")
    try:
        decoded = json.loads(body)
    except json.JSONDecodeError as exc:
        return ParseError(f"The tool call is not valid JSON ({exc.msg} at character {exc.pos}).")
    if not isinstance(decoded, dict):
        return ParseError('The tool call must be a JSON object with "name" and "arguments".')
    return decoded


def syntax_error(raw_block: str) -> str | None:
    """Why one raw block is not a well-formed call (ignoring which tools exist), or None if it is."""
    decoded = decode_call_json(raw_block)
    if isinstance(decoded, ParseError):
        return decoded.message
    if not isinstance(decoded.get("name"), str) or not decoded["name"]:
        return 'The tool call has no "name".'
    if "arguments" in decoded and not isinstance(decoded["arguments"], (dict, str)):
        return '"arguments" must be a JSON object.'
    return None


def _coerce_arguments(raw_args: Any, tool: ToolSpec | None) -> dict[str, Any] | ParseError:
    if raw_args is None:
        raw_args = {}
    if isinstance(raw_args, str) and tool is not None:
        properties = list(tool.parameters.get("properties", {}))
        if len(properties) == 1:
            return {properties[0]: raw_args}
    if not isinstance(raw_args, dict):
        return ParseError('"arguments" must be a JSON object.', tool.name if tool else None)
    return raw_args


def validate_arguments(tool: ToolSpec, arguments: dict[str, Any]) -> str | None:
    """A readable message when `arguments` violate the tool's schema, else None."""
    errors = sorted(Draft202012Validator(tool.parameters).iter_errors(arguments), key=lambda e: list(e.path))
    if not errors:
        return None
    first = errors[0]
    where = ".".join(str(p) for p in first.absolute_path)
    if first.validator == "additionalProperties":
        return f"Tool {tool.name!r} got unexpected arguments: {first.message.split('(')[-1].rstrip(')')}."
    return (
        f"Tool {tool.name!r} argument {where!r}: {first.message}."
        if where
        else f"Tool {tool.name!r}: {first.message}."
    )


def resolve_call(
    name: Any, raw_arguments: Any, tools: list[ToolSpec] | None, call_id: str | None = None
) -> ToolCall | ParseError:
    """A decoded call checked against the offered tools: the one rule every tool-call format shares.

    With `tools`, the call must name one of them and its arguments must satisfy that tool's schema;
    without, only the shape is checked (a name, an arguments object).
    """
    if not isinstance(name, str) or not name:
        return ParseError('The tool call has no "name".')
    tool = None
    if tools is not None:
        tool = next((t for t in tools if t.name == name), None)
        if tool is None:
            known = ", ".join(sorted(t.name for t in tools)) or "none"
            return ParseError(f"Unknown tool {name!r}. Available tools: {known}.", name)
    arguments = _coerce_arguments(raw_arguments, tool)
    if isinstance(arguments, ParseError):
        return arguments
    if tool is not None:
        problem = validate_arguments(tool, arguments)
        if problem:
            return ParseError(problem, name)
    return ToolCall(name=name, arguments=arguments, id=call_id)


def parse_tool_calls(text: str, tools: list[ToolSpec] | None = None) -> list[ToolCall] | ParseError:
    """Every tool call in `text`, or the first problem found.

    With `tools`, calls must name one of them and satisfy its argument schema; without, only the
    syntax is checked. No tool call at all gives an empty list.
    """
    calls: list[ToolCall] = []
    for raw in tool_call_blocks(text):
        decoded = decode_call_json(raw)
        if isinstance(decoded, ParseError):
            return decoded
        call = resolve_call(decoded.get("name"), decoded.get("arguments"), tools)
        if isinstance(call, ParseError):
            return call
        calls.append(call)
    return calls


def format_tool_call(call: ToolCall) -> str:
    return f"{TOOL_CALL_OPEN}{json.dumps({'name': call.name, 'arguments': call.arguments})}{TOOL_CALL_CLOSE}"


def format_tool_result(result: str) -> str:
    """How a successful tool result is shown to the model (errors use `ParseError.observation` / TOOL_ERROR_PREFIX)."""
    return f"Result: {result}"


def _describe_parameters(parameters: dict[str, Any]) -> str:
    properties = parameters.get("properties", {})
    required = set(parameters.get("required", []))
    parts = []
    for name, prop in properties.items():
        kind = prop.get("type", "any")
        if "enum" in prop:
            kind = " | ".join(json.dumps(v) for v in prop["enum"])
        optional = "" if name in required else ", optional"
        description = f": {prop['description']}" if prop.get("description") else ""
        parts.append(f'"{name}" ({kind}{optional}){description}')
    return "; ".join(parts) if parts else "no arguments"


def format_tools_prompt(tools: list[ToolSpec], example: ToolExample | None = None) -> str:
    """The system-prompt section that teaches the format: rules, the tools, one worked example."""
    lines = [
        "You can use tools. To call a tool, write one tool call and then stop:",
        '<tool_call>{"name": "TOOL_NAME", "arguments": {...}}</tool_call>',
        "The result comes back in the next message. Call one tool per message.",
        "When you know the final answer, write it like this: <answer>ANSWER</answer>",
        "",
        "Tools:",
    ]
    for tool in tools:
        lines.append(f"- {tool.name}: {tool.description} Arguments: {_describe_parameters(tool.parameters)}.")
    if example is not None:
        lines += [
            "",
            "Example:",
            f"User: {example.question}",
            f"Assistant: {format_tool_call(example.call)}",
            f"Tool: {format_tool_result(example.result)}",
            f"Assistant: {ANSWER_OPEN}{example.answer}{ANSWER_CLOSE}",
        ]
    return "\n".join(lines)

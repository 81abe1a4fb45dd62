"""The tool-format protocol (`ToolFormat`, the `studio` format) and the first native families (hermes,
llama3, mistral); the current families (Qwen3, Qwen3-Coder, gpt-oss) build on these classes in
`trainers.rollout.toolformats_families`, and `trainers.rollout.toolformats` is where a run picks one.
"""

from __future__ import annotations

import json
import re
from typing import Any

from trainers.rollout.toolcalls import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    STUDIO_CALL_HINT,
    TOOL_CALL_OPEN,
    ParseError,
    ToolExample,
    decode_call_json,
    format_tool_call,
    format_tool_result,
    format_tools_prompt,
    parse_tool_calls,
    resolve_call,
)
from trainers.sdk.reasoning import split_reasoning
from trainers.types import ToolCall, ToolSpec

TOOL_FORMAT_CHOICES = (
    "auto",
    "native",
    "studio",
    "hermes",
    "llama3",
    "mistral",
    "qwen3",
    "qwen3_coder",
    "harmony",
)
NATIVE_FAMILIES = ("hermes", "llama3", "mistral", "qwen3", "qwen3_coder", "harmony")
ANSWER_RULE = f"When you know the final answer, write it like this: {ANSWER_OPEN}ANSWER{ANSWER_CLOSE}"


class ToolFormatError(ValueError):
    """The requested tool format cannot be used with this model's chat template."""


class ToolFormat:
    """The `studio` format; native families override what differs."""

    name = "studio"
    native = False
    stop: tuple[str, ...] = ("</tool_call>", "</answer>")
    hint = STUDIO_CALL_HINT
    keeps_special_tokens = False  # harmony reads its control tokens (completion_text)

    def completion_text(self, tokenizer: Any, token_ids: list[int], text: str) -> str:
        """The sampled text as this format reads it (default: as the backend decoded it)."""
        return text

    def answer_text(self, text: str) -> str:
        """The final message as the environment grades it: without a leading `<think>` block."""
        return split_reasoning(text)[1]

    # -- what the model is shown -----------------------------------------------------------------

    def tools_prompt(self, tools: list[ToolSpec], example: ToolExample | None = None) -> str:
        return format_tools_prompt(tools, example)

    def template_tools(self, tools: list[ToolSpec]) -> list[dict[str, Any]] | None:
        return None

    def example_messages(self, example: ToolExample) -> list[dict[str, Any]]:
        """The four messages of a worked tool-use example: question, call, result, answer."""
        call = ToolCall(example.call.name, example.call.arguments, self.call_id(0))
        return [
            {"role": "user", "content": example.question},
            self.assistant_message(self.call_text(call), [call]),
            self.tool_message(self.format_result(example.result), call),
            {"role": "assistant", "content": f"{ANSWER_OPEN}{example.answer}{ANSWER_CLOSE}"},
        ]

    def call_text(self, call: ToolCall) -> str:
        """How the model writes `call` (the assistant text of a worked example)."""
        return format_tool_call(call)

    def format_result(self, result: str) -> str:
        return format_tool_result(result)

    # -- what the model wrote ------------------------------------------------------------------

    def has_call(self, text: str) -> bool:
        return TOOL_CALL_OPEN in text

    def parse(self, text: str, tools: list[ToolSpec] | None = None) -> list[ToolCall] | ParseError:
        return self._with_hint(parse_tool_calls(text, tools))

    # -- what goes back --------------------------------------------------------------------------

    def call_id(self, index: int) -> str:
        """A call id for the index-th call of an episode: 9 alphanumerics, which every template accepts."""
        return f"call{index % 100000:05d}"

    def assistant_message(self, text: str, calls: list[ToolCall]) -> dict[str, Any]:
        return {"role": "assistant", "content": text}

    def tool_message(self, text: str, call: ToolCall | None) -> dict[str, Any]:
        return {"role": "tool", "content": text}

    def tool_message_text(self, message: dict[str, Any]) -> str:
        """The result text of a tool message this format built (the inverse of `tool_message`)."""
        return str(message.get("content") or "")

    def _with_hint(self, parsed: list[ToolCall] | ParseError) -> list[ToolCall] | ParseError:
        if isinstance(parsed, ParseError):
            parsed.hint = self.hint
        return parsed

    def __repr__(self) -> str:
        return f"<ToolFormat {self.name}>"


class NativeToolFormat(ToolFormat):
    """A model family's own format: the chat template renders tools, calls and results."""

    native = True
    stop: tuple[str, ...] = ("</answer>",)

    def tools_prompt(self, tools: list[ToolSpec], example: ToolExample | None = None) -> str:
        # The template lists the tools and explains the call syntax; the answer convention is ours.
        return ANSWER_RULE if tools else ""

    def template_tools(self, tools: list[ToolSpec]) -> list[dict[str, Any]] | None:
        return [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            }
            for t in tools
        ] or None

    def format_result(self, result: str) -> str:
        return result

    def assistant_message(self, text: str, calls: list[ToolCall]) -> dict[str, Any]:
        if not calls:
            return {"role": "assistant", "content": text}
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": c.id or self.call_id(i),
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for i, c in enumerate(calls)
            ],
        }

    def tool_message(self, text: str, call: ToolCall | None) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "tool", "content": text}
        if call is not None:
            message["name"] = call.name
        message["tool_call_id"] = call.id if call is not None and call.id else self.call_id(0)
        return message

    def _json_calls(
        self, body: str, tools: list[ToolSpec] | None, arguments_keys: tuple[str, ...]
    ) -> list[ToolCall] | ParseError:
        """Calls from a JSON object or a list of them, each {"name", <arguments key>, "id"?}."""
        decoded: Any
        try:
            decoded = json.loads(body)
        except json.JSONDecodeError:
            single = decode_call_json(body)  # also strips a Markdown code fence
            if isinstance(single, ParseError):
                return self._with_hint(single)
            decoded = single
        items = decoded if isinstance(decoded, list) else [decoded]
        if not items:
            return self._with_hint(ParseError("The tool call list is empty."))
        calls: list[ToolCall] = []
        for item in items:
            if not isinstance(item, dict):
                return self._with_hint(
                    ParseError('Each tool call must be a JSON object with "name" and arguments.')
                )
            raw_args = next((item[k] for k in arguments_keys if k in item), None)
            call_id = item.get("id") if isinstance(item.get("id"), str) else None
            call = resolve_call(item.get("name"), raw_args, tools, call_id)
            if isinstance(call, ParseError):
                return self._with_hint(call)
            calls.append(call)
        return calls


class HermesFormat(NativeToolFormat):
    """Qwen2.5 / Qwen3 / Hermes: `<tool_call>\\n{"name": …, "arguments": …}\\n</tool_call>`."""

    name = "hermes"
    stop = ("</tool_call>", "</answer>")
    hint = (
        'Write a tool call exactly like <tool_call>\n{"name": "TOOL_NAME", "arguments": {...}}\n</tool_call>'
    )

    def call_text(self, call: ToolCall) -> str:
        return f"<tool_call>\n{json.dumps({'name': call.name, 'arguments': call.arguments})}\n</tool_call>"

    def parse(self, text: str, tools: list[ToolSpec] | None = None) -> list[ToolCall] | ParseError:
        # The same blocks as the studio format; only the hint and the way results go back differ.
        return self._with_hint(parse_tool_calls(text, tools))


_PYTHON_TAG = "<|python_tag|>"


class Llama3Format(NativeToolFormat):
    """Llama 3.1+: a message that is one JSON object `{"name": …, "parameters": …}` is a call."""

    name = "llama3"
    hint = 'Call a tool by replying with only a JSON object: {"name": "TOOL_NAME", "parameters": {...}}'

    def call_text(self, call: ToolCall) -> str:
        return json.dumps({"name": call.name, "parameters": call.arguments})

    def _body(self, text: str) -> str | None:
        body = text.strip()
        tagged = body.startswith(_PYTHON_TAG)
        if tagged:
            body = body[len(_PYTHON_TAG) :].strip()
        if body.startswith("```"):
            body = re.sub(r"^```[a-zA-Z]*\s*|\s*```$", "", body)
        return body if tagged or body.startswith("{") else None

    def has_call(self, text: str) -> bool:
        return self._body(text) is not None

    def parse(self, text: str, tools: list[ToolSpec] | None = None) -> list[ToolCall] | ParseError:
        body = self._body(text)
        if body is None:
            return []
        if not body.startswith("{"):
            return self._with_hint(ParseError("Only JSON tool calls are supported (no built-in tools)."))
        # Llama 3.1's template takes one call per message: a single JSON object.
        return self._json_calls(body, tools, ("parameters", "arguments"))


_TOOL_CALLS = "[TOOL_CALLS]"
_ARGS = "[ARGS]"


class MistralFormat(NativeToolFormat):
    """Mistral: `[TOOL_CALLS][{"name": …, "arguments": …, "id": …}]` (or `[TOOL_CALLS]name[ARGS]{…}`).

    `[TOOL_CALLS]` is a special token that decoding may drop, so a message that is a bare JSON list
    of calls counts too. Call ids are 9 alphanumerics (the template refuses others).
    """

    name = "mistral"
    hint = 'Call a tool by replying with [TOOL_CALLS][{"name": "TOOL_NAME", "arguments": {...}}]'

    def call_text(self, call: ToolCall) -> str:
        return _TOOL_CALLS + json.dumps(
            [{"name": call.name, "arguments": call.arguments, "id": call.id or self.call_id(0)}]
        )

    def _body(self, text: str) -> str | None:
        body = text.strip()
        if body.startswith(_TOOL_CALLS):
            return body[len(_TOOL_CALLS) :].strip()
        return body if body.startswith("[{") else None

    def has_call(self, text: str) -> bool:
        return self._body(text) is not None

    def parse(self, text: str, tools: list[ToolSpec] | None = None) -> list[ToolCall] | ParseError:
        body = self._body(text)
        if body is None:
            return []
        if _ARGS in body and not body.startswith("["):  # the v11 tokenizer's form: name[ARGS]{json}
            name, _, raw = body.partition(_ARGS)
            decoded = decode_call_json(raw.split(_TOOL_CALLS)[0])
            if isinstance(decoded, ParseError):
                return self._with_hint(decoded)
            call = resolve_call(name.strip(), decoded, tools)
            return self._with_hint(call) if isinstance(call, ParseError) else [call]
        calls = self._json_calls(body, tools, ("arguments", "parameters"))
        if isinstance(calls, list):
            # The template refuses ids that are not 9 alphanumerics: replace what the model made up.
            for call in calls:
                if not (call.id and len(call.id) == 9 and call.id.isalnum()):
                    call.id = None
        return calls

    def tool_message(self, text: str, call: ToolCall | None) -> dict[str, Any]:
        # Mistral's template pastes the content in raw: `[TOOL_RESULTS]{"content": <content>, …}`.
        return super().tool_message(json.dumps(text), call)

    def tool_message_text(self, message: dict[str, Any]) -> str:
        try:
            return str(json.loads(message.get("content") or '""'))
        except json.JSONDecodeError:
            return str(message.get("content") or "")


STUDIO = ToolFormat()


def detect_classic_family(template: str) -> str | None:
    """The families of this module, from the template's markup (checked after the current families)."""
    if _TOOL_CALLS in template:
        return "mistral"
    if "<tool_call>" in template:
        return "hermes"
    if "<|start_header_id|>" in template and ("ipython" in template or _PYTHON_TAG in template):
        return "llama3"
    return None

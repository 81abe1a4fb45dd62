"""Tool-call formats: how tools are shown to the model, how its calls are read, how results go back.

One seam, used by every tool-using environment and by the rollout driver, so an environment never
needs to know which format is in use:

    fmt = resolve_tool_format("auto", tokenizer)      # the run knob `tool_format`
    fmt.tools_prompt(tools, example)   # the tools section of the system prompt ("" when the template shows them)
    fmt.template_tools(tools)          # the chat template's `tools=` argument (None for `studio`)
    fmt.example_messages(example)      # a worked tool-use episode as chat messages (few-shot)
    fmt.parse(text, tools)             # list[ToolCall] (empty: no call) or ParseError (never raises)
    fmt.format_result(result)          # how a successful result reads in the trajectory
    fmt.assistant_message(text, calls) # the sampled message as the template sees it (tool_calls)
    fmt.tool_message(text, call)       # a tool result as the template's tool message
    fmt.stop                           # stop strings for sampling

Formats:
- `studio` (`trainers.rollout.toolcalls`): the tools described in the system prompt with a worked example,
  calls as `<tool_call>{json}</tool_call>`, results as "Result: …". Works with any chat template;
  the bundled SmolLM2 has no tool support, so it gets this one.
- `hermes` (Qwen2.5, Qwen3, Hermes): the template renders the tools; calls are
  `<tool_call>\\n{"name": …, "arguments": …}\\n</tool_call>`; results are `tool` messages (Qwen wraps
  them in `<tool_response>`).
- `llama3` (Llama 3.1 / 3.2 / 3.3): calls are a bare JSON object `{"name": …, "parameters": …}`,
  optionally after `<|python_tag|>`; results go back under the `ipython` header.
- `mistral` (Mistral 7B v0.3, Nemo, Small): calls are `[TOOL_CALLS][{"name": …, "arguments": …, "id": …}]`;
  results are `[TOOL_RESULTS]` blocks tied to 9-character call ids.

Whatever the format, the allow-list, argument schemas and call limits are checked the same way
(`trainers.rollout.toolcalls.resolve_call`, `ToolEnvironment.step`), and a malformed call is a `ParseError`
whose observation starts with "Error:".
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
    split_reasoning,
)
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
FORMATS: dict[str, ToolFormat] = {
    "studio": STUDIO,
    "hermes": HermesFormat(),
    "llama3": Llama3Format(),
    "mistral": MistralFormat(),
}

# The current families live in their own module, which builds on the classes above.
from trainers.rollout.toolformats_families import (  # noqa: E402
    HarmonyFormat,
    Qwen3CoderFormat,
    Qwen3Format,
    detect_current_family,
)

FORMATS.update({"qwen3": Qwen3Format(), "qwen3_coder": Qwen3CoderFormat(), "harmony": HarmonyFormat()})

_PROBE_TOOL = [
    {
        "type": "function",
        "function": {
            "name": "probe_tool",
            "description": "d",
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
        },
    }
]
_PROBE_MESSAGES = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]


def template_takes_tools(tokenizer: Any) -> bool:
    """Whether the chat template renders a `tools=` argument (it changes the prompt when given one)."""
    try:
        plain = tokenizer.apply_chat_template(_PROBE_MESSAGES, tokenize=False, add_generation_prompt=True)
        with_tools = tokenizer.apply_chat_template(
            _PROBE_MESSAGES, tools=_PROBE_TOOL, tokenize=False, add_generation_prompt=True
        )
    except Exception:  # noqa: BLE001 — templates raise anything (TemplateError, ValueError) on what they refuse
        return False
    return "probe_tool" in with_tools and with_tools != plain


def detect_family(tokenizer: Any) -> str | None:
    """The native family of a tool-aware chat template, from the markup it renders; None if unknown."""
    template = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(template, dict):  # several named templates: the tool_use one speaks for tools
        template = template.get("tool_use") or template.get("default") or ""
    current = detect_current_family(template)
    if current is not None:
        return current
    if _TOOL_CALLS in template:
        return "mistral"
    if "<tool_call>" in template:
        return "hermes"
    if "<|start_header_id|>" in template and ("ipython" in template or _PYTHON_TAG in template):
        return "llama3"
    return None


def resolve_tool_format(choice: str, tokenizer: Any) -> ToolFormat:
    """The format a run uses, from the `tool_format` knob and the model's chat template.

    auto: the template's native family when it renders `tools=` and the family is known, else studio.
    native: the same, but an error when the template has no tool support or an unknown family.
    hermes | llama3 | mistral: that family's parser over the template (which must render tools).
    studio: today's format, with any template.
    """
    if choice not in TOOL_FORMAT_CHOICES:
        raise ToolFormatError(
            f"unknown tool_format {choice!r}; choose one of {', '.join(TOOL_FORMAT_CHOICES)}"
        )
    if choice == "studio":
        return STUDIO
    takes_tools = template_takes_tools(tokenizer)
    if choice == "auto":
        family = detect_family(tokenizer) if takes_tools else None
        return FORMATS[family] if family else STUDIO
    if not takes_tools:
        raise ToolFormatError(
            f"tool_format {choice!r} needs a chat template that renders tools (apply_chat_template(tools=…)); "
            'this model\'s template ignores them: use tool_format "studio".'
        )
    if choice == "native":
        family = detect_family(tokenizer)
        if family is None:
            raise ToolFormatError(
                "cannot tell which tool-call syntax this chat template uses: set tool_format to one of "
                f'{", ".join(NATIVE_FAMILIES)} (or "studio").'
            )
        return FORMATS[family]
    return FORMATS[choice]


def explain_tool_format(choice: str, tokenizer: Any) -> tuple[ToolFormat, str]:
    """`resolve_tool_format` and, in words, why: what the run's log says about the format it uses."""
    fmt = resolve_tool_format(choice, tokenizer)
    if choice not in ("auto", "native"):
        return fmt, f"tool_format {choice}"
    if fmt is STUDIO:
        return fmt, f"{choice}: the chat template does not render tools=, so the studio format (any model)"
    return fmt, f"{choice}: the chat template renders tools= and writes {FAMILY_MARKUP[fmt.name]}"


FAMILY_MARKUP = {
    "hermes": "<tool_call> JSON calls",
    "llama3": "Llama 3 JSON calls under the ipython role",
    "mistral": "[TOOL_CALLS] lists",
    "qwen3": "<tool_call> JSON calls after <think> reasoning (Qwen3)",
    "qwen3_coder": "<tool_call><function=…> XML calls (Qwen3-Coder)",
    "harmony": "harmony channels with to=functions.… calls (gpt-oss)",
}


def format_named(name: str) -> ToolFormat:
    """A format by its resolved name (what a run records), e.g. for Ray workers rebuilding it."""
    return FORMATS[name]


__all__ = [
    "FORMATS",
    "NATIVE_FAMILIES",
    "STUDIO",
    "TOOL_FORMAT_CHOICES",
    "HarmonyFormat",
    "HermesFormat",
    "Qwen3CoderFormat",
    "Qwen3Format",
    "explain_tool_format",
    "Llama3Format",
    "MistralFormat",
    "NativeToolFormat",
    "ToolFormat",
    "ToolFormatError",
    "detect_family",
    "resolve_tool_format",
    "template_takes_tools",
]

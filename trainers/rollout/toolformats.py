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
- `qwen3`, `qwen3_coder`, `harmony` (gpt-oss): `trainers.rollout.toolformats_families`.

The classes live below this module (`toolformats_base`: the protocol and the families above;
`toolformats_families`: the current ones, built on them); this module holds the registry and the choice.

Whatever the format, the allow-list, argument schemas and call limits are checked the same way
(`trainers.rollout.toolcalls.resolve_call`, `ToolEnvironment.step`), and a malformed call is a `ParseError`
whose observation starts with "Error:".
"""

from __future__ import annotations

from typing import Any

from trainers.rollout.toolformats_base import (
    NATIVE_FAMILIES,
    STUDIO,
    TOOL_FORMAT_CHOICES,
    HermesFormat,
    Llama3Format,
    MistralFormat,
    NativeToolFormat,
    ToolFormat,
    ToolFormatError,
    detect_classic_family,
)
from trainers.rollout.toolformats_families import (
    HarmonyFormat,
    Qwen3CoderFormat,
    Qwen3Format,
    detect_current_family,
)

FORMATS: dict[str, ToolFormat] = {
    "studio": STUDIO,
    "hermes": HermesFormat(),
    "llama3": Llama3Format(),
    "mistral": MistralFormat(),
}

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
    return detect_current_family(template) or detect_classic_family(template)


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

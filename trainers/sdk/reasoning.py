"""Reasoning told apart from the answer in a model's message: a `<think>` block (Qwen3, DeepSeek-R1,
QwQ) or gpt-oss's harmony channels (`analysis` is reasoning, `final` the answer).

The bottom of the library: `trainers.types.Trajectory.final_answer`, the tool-call formats
(`trainers.rollout.toolformats`) and the rubrics all read a message through these functions, so the
answer a rubric grades is the one the environment saw. Plain text in, plain text out; imports nothing.
"""

from __future__ import annotations

import re

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

# One harmony message: an optional header ("<|start|>assistant"), the channel and recipient in either
# order ("<|channel|>commentary to=functions.x" as the model writes it, "to=functions.x<|channel|>commentary"
# as the template renders it), an optional content type, the body, its end.
_HARMONY_MESSAGE = re.compile(
    r"(?:<\|start\|>\w*\s*)?(?P<head>(?:(?!<\|message\|>).)*?)<\|message\|>(?P<body>.*?)"
    r"(?:<\|end\|>|<\|call\|>|<\|return\|>|$)",
    re.DOTALL,
)
_RECIPIENT = re.compile(r"to=functions\.([\w.-]+)")
_CHANNEL_NAME = re.compile(r"<\|channel\|>\s*(\w+)")


def split_reasoning(text: str) -> tuple[str, str]:
    """(reasoning, the rest) of a message that starts with a `<think>` block (Qwen3, DeepSeek-R1, QwQ):
    the answer, the tool calls and the rubric's final message are the rest; the trajectory keeps both.
    A `</think>` without its opening tag (a template that opens the block in the prompt) ends the
    reasoning too; a block still open (cut off while thinking) leaves no rest. Without one: ("", text)."""
    stripped = text.lstrip()
    if THINK_CLOSE in text and (stripped.startswith(THINK_OPEN) or THINK_OPEN not in text):
        reasoning, _, rest = text.partition(THINK_CLOSE)
        return reasoning.split(THINK_OPEN, 1)[-1].strip("\n"), rest.lstrip("\n")
    if stripped.startswith(THINK_OPEN):
        return stripped[len(THINK_OPEN) :].strip("\n"), ""
    return "", text


def harmony_messages(text: str) -> list[dict[str, str]]:
    """The harmony messages in `text` (decoded with its control tokens): [{channel, recipient, body}]."""
    messages = []
    for match in _HARMONY_MESSAGE.finditer(text):
        head = match.group("head")
        channel = _CHANNEL_NAME.search(head)
        recipient = _RECIPIENT.search(head)
        messages.append(
            {
                "channel": channel.group(1) if channel else "",
                "recipient": recipient.group(1) if recipient else "",
                "body": match.group("body"),
            }
        )
    return messages


def visible_answer(text: str) -> str:
    """A final message without its reasoning: what rubrics grade as the answer. The `<think>` block of
    reasoning models and gpt-oss's harmony analysis are dropped (the final channel's text is kept)."""
    if "<|channel|>" in text and "final" in text:
        finals = [m["body"] for m in harmony_messages(text) if m["channel"] == "final"]
        if finals:
            return finals[-1]
    return split_reasoning(text)[1]

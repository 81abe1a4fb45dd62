"""A chat template as token ids: the pieces of a conversation (system prompt with the tools, the task,
each assistant message's end, tool results, the next header) appended turn by turn, so a rollout keeps the
exact tokens the model saw (`trainers.rollout.episodes`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainers.rollout.toolformats import STUDIO, ToolFormat
from trainers.types import ToolSpec


class ChatFormat:
    """Token ids of chat pieces under the tokenizer's chat template, appended turn by turn.

    The template is rendered around placeholder messages and the rendered texts are diffed, so this
    works for any template that renders a conversation as the concatenation of its messages (ChatML,
    Llama 3, Qwen, Mistral…) without knowing its markup. `tool_format` (trainers.rollout.toolformats) says how
    tools reach the template: a native format passes them as `tools=` and sends tool results as the
    template's own tool messages (with call ids); the studio format writes them into the system prompt.
    """

    # Placeholder conversations tried in order: some templates (Mistral) only show the system prompt
    # in the last user message, so the diff needs a conversation without one.
    _BASES = (
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
        [{"role": "user", "content": "U"}],
    )
    _PLAIN_ASSISTANT = {"role": "assistant", "content": "Z"}

    def __init__(self, tokenizer: Any, tool_format: ToolFormat | None = None) -> None:
        self.tokenizer = tokenizer
        self.tool_format = tool_format or STUDIO
        self.eos_text = tokenizer.eos_token or ""
        self._base = self._BASES[0]
        self.close_text = self.eos_text + "\n"  # a template that rewrites assistant content: end with eos
        for base in self._BASES:
            try:
                prompt = self.render(base, generation_prompt=True)
                after = self.render([*base, self._PLAIN_ASSISTANT], generation_prompt=False)
            except Exception:  # noqa: BLE001 — templates raise anything (TemplateError, ValueError) on what they refuse
                continue
            if after.startswith(prompt + "Z"):
                self._base, self.close_text = base, after[len(prompt) + 1 :]
                break
        self._role_ok: dict[str, bool] = {}

    def render(
        self,
        messages: list[dict[str, Any]],
        generation_prompt: bool,
        tools: list[dict[str, Any]] | None = None,
    ) -> str:
        extra = {"tools": tools} if tools else {}
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt, **extra
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _template_tools(
        self, tools: Sequence[ToolSpec] | None, tool_format: ToolFormat | None
    ) -> list[dict[str, Any]] | None:
        return (tool_format or self.tool_format).template_tools(list(tools or []))

    def _message(self, message: dict[str, Any]) -> dict[str, Any]:
        """`message` as the template takes it: a role it rejects ("tool" in some) is sent as "user".
        A message a native format built for the template (tool calls, call ids) goes as it is."""
        if set(message) - {"role", "content"} or self._supports_role(message["role"]):
            return dict(message)
        return {"role": "user", "content": message["content"]}

    def prompt(
        self,
        system: str,
        user: str,
        examples: Sequence[dict[str, Any]] = (),
        *,
        tools: Sequence[ToolSpec] | None = None,
        tool_format: ToolFormat | None = None,
    ) -> tuple[list[int], list[int]]:
        """(system message + example ids, user message + assistant header ids): the initial prompt.

        `examples` are the environment's few-shot messages, placed between the system prompt and the
        task; a role the template rejects ("tool" in some) is sent as "user", as in `run_episode`.
        `tools` reach a native template as its `tools=` argument.
        """
        template_tools = self._template_tools(tools, tool_format)
        prefix = [{"role": "system", "content": system}, *(self._message(m) for m in examples)]
        full = self.render([*prefix, {"role": "user", "content": user}], True, template_tools)
        try:
            prefix_text = self.render(prefix, False, template_tools)
        except Exception:  # noqa: BLE001 — e.g. Llama 3 puts tools in the first user message and refuses a prefix without one
            return [], self.encode(full)
        if full.startswith(prefix_text):
            return self.encode(prefix_text), self.encode(full[len(prefix_text) :])
        return [], self.encode(full)

    def continuation(
        self,
        role: str,
        content: str,
        ended_with_eos: bool,
        *,
        tools: Sequence[ToolSpec] | None = None,
        assistant: dict[str, Any] | None = None,
        message: dict[str, Any] | None = None,
        tool_format: ToolFormat | None = None,
    ) -> list[int]:
        """Ids that close the assistant message just sampled, add a `role` message and open the next
        assistant message. `ended_with_eos`: the sample already ends with the end-of-message token.

        `assistant` / `message`: the sampled message and the new one as the template should see them
        (a native format's `tool_calls` and tool message with its call id); by default plain text.
        """
        [ids] = self.continuation_messages(
            [message or {"role": role, "content": content}],
            ended_with_eos,
            tools=tools,
            assistant=assistant,
            tool_format=tool_format,
            plain=[content],
        )
        return ids

    def continuation_messages(
        self,
        messages: Sequence[dict[str, Any]],
        ended_with_eos: bool,
        *,
        tools: Sequence[ToolSpec] | None = None,
        assistant: dict[str, Any] | None = None,
        tool_format: ToolFormat | None = None,
        plain: Sequence[str] | None = None,
    ) -> list[list[int]]:
        """`continuation` for several new messages (an agent's tool results, a user reply): the ids of
        each, the first including the close of the sampled message, the last the next assistant header.

        Templates that merge consecutive messages (Qwen puts successive tool results in one block) do
        not render message by message; then all ids go to the last message (the others get none).
        `plain`: each message's text for templates that refuse the conversation (default: its content).
        """
        template_tools = self._template_tools(tools, tool_format)
        messages = [self._message(m) for m in messages]
        close = self.close_text
        if ended_with_eos and self.eos_text and close.startswith(self.eos_text):
            close = close[len(self.eos_text) :]
        if getattr(tool_format or self.tool_format, "closes_itself", False):
            close = ""  # harmony: a sampled message ends with its own <|call|> / <|end|>
        # The sampled message as the template sees it first (some templates only accept a tool
        # result after a tool call); plain text when the template refuses that. Qwen3's template
        # shows an empty <think> block only on the last message: the glue is read with a non-empty one.
        thinking = (
            {**assistant, "reasoning_content": "R"}
            if assistant and "reasoning_content" in assistant
            else None
        )
        for previous in (assistant, thinking, self._PLAIN_ASSISTANT):
            if previous is None:
                continue
            try:
                texts = [self.render([*self._base, previous], False, template_tools)]
                for i in range(1, len(messages) + 1):
                    texts.append(
                        self.render(
                            [*self._base, previous, *messages[:i]], i == len(messages), template_tools
                        )
                    )
            except Exception:  # noqa: BLE001 — templates raise anything on conversations they refuse
                continue
            if all(after.startswith(before) for before, after in zip(texts, texts[1:], strict=False)):
                pieces = [after[len(before) :] for before, after in zip(texts, texts[1:], strict=False)]
            elif texts[-1].startswith(texts[0]):
                pieces = [""] * (len(messages) - 1) + [texts[-1][len(texts[0]) :]]
            else:
                continue
            pieces[0] = close + pieces[0]
            return [self.encode(piece) if piece else [] for piece in pieces]
        texts = list(plain) if plain is not None else [str(m.get("content") or "") for m in messages]
        pieces = [text + self.eos_text for text in texts]
        pieces[0] = close + pieces[0]
        return [self.encode(piece) for piece in pieces]

    def _supports_role(self, role: str) -> bool:
        if role in ("system", "user", "assistant"):
            return True  # every chat template has these (a probe could trip over role-alternation rules)
        if role not in self._role_ok:
            try:
                self.render([*self._base, self._PLAIN_ASSISTANT, {"role": role, "content": "x"}], True)
                self._role_ok[role] = True
            except Exception:  # noqa: BLE001 — templates raise anything (TemplateError, ValueError) for roles they reject
                self._role_ok[role] = False
        return self._role_ok[role]

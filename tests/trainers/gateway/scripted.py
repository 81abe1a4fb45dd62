"""A policy written as a rule, for tests of what the gateway records around what a model writes.

The bundled 135M model rarely writes a correct tool call, so the mechanics (tool calls out, tool
results back, token layout, loss masks) are tested with `ScriptedModel`: a real `GenerationBackend`
whose "sampling" reads the whole context it is given (decoded with the real tokenizer, template
markup included) and answers by a rule, as token ids of that tokenizer. Deterministic, so the same
episode through the gateway and through `generate_rollouts` must give the same tokens.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

from trainers.rollout.backends.base import Completion, GenerationBackend, stop_index
from trainers.rollout.toolformats import FORMATS, STUDIO
from trainers.types import ToolCall

Rule = Callable[[str], tuple[str, str]]  # decoded context → (reply text, "eos" | "stop")
QUESTION = re.compile(r"What is (\d+) ([+*-]) (\d+)\?")


class ScriptedModel(GenerationBackend):
    def __init__(self, tokenizer: Any, rule: Rule) -> None:
        self.tokenizer, self.rule = tokenizer, rule
        self.batches: list[int] = []  # prompts per generate() call
        self.contexts: list[list[int]] = []
        self.lock = threading.Lock()

    def generate(
        self,
        prompts: Sequence[Any],
        n: int = 1,
        max_new_tokens: int = 128,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[Completion]:
        with self.lock:
            self.batches.append(len(prompts))
        out = []
        for prompt in prompts:
            ids_in = self.prompt_token_ids(prompt)
            self.contexts.append(ids_in)
            text, finish = self.rule(self.tokenizer.decode(ids_in))
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            if finish == "eos":
                ids.append(self.tokenizer.eos_token_id)
            if len(ids) > max_new_tokens:
                ids, finish = ids[:max_new_tokens], "length"
            decoded = self.tokenizer.decode(ids, skip_special_tokens=True)
            hit = stop_index(decoded, list(stop or [])) if finish == "stop" else None
            logprobs = [-0.01 * (i + 1) for i in range(len(ids))]
            out.append(Completion(ids, decoded, finish, logprobs, hit[1] if hit else None))  # type: ignore[arg-type]
        return out

    def update_weights(self, state_dict: Any) -> None:
        pass


def call_text(family: str, call: ToolCall) -> tuple[str, str]:
    """How a model of `family` writes `call`, and how its message ends (stop string or eos)."""
    fmt = FORMATS.get(family, STUDIO)
    if family == "mistral":
        return "[TOOL_CALLS]" + json.dumps(
            [{"name": call.name, "arguments": call.arguments, "id": call.id}]
        ), "eos"
    return fmt.call_text(call), ("stop" if family in ("studio", "hermes") else "eos")


def calculator_rule(family: str = "studio", *, answer_tag: bool = True) -> Rule:
    """Asked "What is A op B?" (the last such question in the context), first call the calculator;
    once the result is in the context after the question, answer with it."""

    def rule(context: str) -> tuple[str, str]:
        questions = list(QUESTION.finditer(context))
        if not questions:
            return "I cannot tell what you are asking.", "eos"
        last = questions[-1]
        a, op, b = int(last[1]), last[2], int(last[3])
        result = a + b if op == "+" else a - b if op == "-" else a * b
        if str(result) in context[last.end() :]:
            return (f"<answer>{result}</answer>" if answer_tag else f"It is {result}."), "eos"
        return call_text(family, ToolCall("calculator", {"expression": f"{a} {op} {b}"}, "call00001"))

    return rule

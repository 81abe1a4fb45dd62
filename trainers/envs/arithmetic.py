"""arithmetic_calculator: arithmetic questions, a calculator tool, answers in <answer> tags.

Built so a 135M model can reach a reward before it can do arithmetic: the system prompt shows a
worked tool call, a well-formed successful call earns partial credit once per episode, an <answer>
tag earns a little, and with the curriculum on, train tasks start at one-digit sums.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction
from typing import Any

from trainers.envs.base import Split, ToolEnvironment, answer_text, draw_tasks, task_id
from trainers.envs.kinds import ARITHMETIC_OPERATIONS
from trainers.envs.mcp import mcp_toolbox
from trainers.envs.safe_math import ExpressionError, evaluate
from trainers.envs.tools import calculator_spec, run_calculator
from trainers.rollout.toolcalls import ToolExample, extract_answer
from trainers.rubrics.criteria import find_numbers, parse_number
from trainers.types import Task, ToolCall

ANSWER_INSTRUCTION = "Use the calculator, then answer in <answer></answer>."
# Easiest first: the curriculum adds operators in this order.
OPERATOR_ORDER = ["+", "-", "*", "/"]


class ArithmeticCalculatorEnv(ToolEnvironment):
    kind = "arithmetic_calculator"

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> dict[str, list[str]]:
        errors: dict[str, list[str]] = {}
        for low, high, label in (
            ("min_digits", "max_digits", "min digits"),
            ("min_operands", "max_operands", "min operands"),
        ):
            if config[low] > config[high]:
                errors[high] = [f"Must be at least {label} ({config[low]}), not {config[high]}."]
        return errors

    def __init__(
        self,
        min_digits: int = 1,
        max_digits: int = 2,
        operations: list[str] | None = None,
        min_operands: int = 2,
        max_operands: int = 3,
        curriculum: bool = True,
        max_turns: int = 4,
        few_shot: bool = True,
        max_tool_calls: int = 3,
        max_expression_chars: int = 100,
        require_answer_tag: bool = False,
        reward_correct: float = 1.0,
        reward_valid_tool_call: float = 0.1,
        reward_answer_format: float = 0.1,
        eval_fraction: float = 0.1,
        mcp_servers: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(
            max_turns=max_turns,
            max_tool_calls=max_tool_calls,
            reward_valid_tool_call=reward_valid_tool_call,
            few_shot=few_shot,
            toolbox=mcp_toolbox(mcp_servers),
        )
        if min_digits > max_digits or min_operands > max_operands:
            raise ValueError("min_digits / min_operands must not exceed max_digits / max_operands")
        self.min_digits, self.max_digits = min_digits, max_digits
        self.operations = [op for op in OPERATOR_ORDER if op in (operations or ARITHMETIC_OPERATIONS)]
        if not self.operations:
            raise ValueError("operations must include at least one of + - * /")
        self.min_operands, self.max_operands = min_operands, max_operands
        self.curriculum = curriculum
        self.max_expression_chars = max_expression_chars
        self.require_answer_tag = require_answer_tag
        self.reward_correct, self.reward_answer_format = reward_correct, reward_answer_format
        self.eval_fraction = eval_fraction
        self.tools = [calculator_spec(max_expression_chars)]

    example = ToolExample(
        f"What is 12 + 7? {ANSWER_INSTRUCTION}", ToolCall("calculator", {"expression": "12 + 7"}), "19", "19"
    )

    def system_prompt(self) -> str:
        return (
            "You solve arithmetic questions. Use the calculator tool to compute, then give the final answer.\n\n"
            + self.tools_prompt()
        )

    # ---- tasks ----

    def _level(self, difficulty: float) -> tuple[int, int, list[str]]:
        """Digits, operands and operators for a difficulty in [0, 1]."""
        digits = self.min_digits + round(difficulty * (self.max_digits - self.min_digits))
        operands = self.min_operands + round(difficulty * (self.max_operands - self.min_operands))
        ops = self.operations[: 1 + round(difficulty * (len(self.operations) - 1))]
        return digits, operands, ops

    def _expression(self, rng: random.Random, difficulty: float) -> tuple[str, int]:
        digits, count, ops = self._level(difficulty)
        low, high = (1 if digits == 1 else 10 ** (digits - 1)), 10**digits - 1
        for _ in range(100):
            numbers = [rng.randint(low, high) for _ in range(count)]
            chosen = [rng.choice(ops) for _ in range(count - 1)]
            # Whole-number quotients: within each product term (numbers joined by * and /), make the
            # term's first number a multiple of all its divisors, so every step stays whole.
            term_start = 0
            for i, op in enumerate([*chosen, None]):
                if op in ("+", "-", None):
                    divisors = [numbers[j + 1] for j in range(term_start, i) if chosen[j] == "/"]
                    if divisors:
                        product = math.prod(divisors)
                        numbers[term_start] = product * rng.randint(2, max(2, high // product))
                    term_start = i + 1
            text = str(numbers[0]) + "".join(f" {op} {n}" for op, n in zip(chosen, numbers[1:], strict=True))
            try:
                value = evaluate(text)
            except ExpressionError:
                continue
            if value.denominator == 1:
                return text, int(value)
        raise ValueError("could not generate a whole-number arithmetic task")

    def tasks(self, split: Split, n: int, seed: int) -> list[Task]:
        def make(rng: random.Random, index: int) -> tuple[str, Task]:
            if self.curriculum and split == "train":
                difficulty = index / max(n - 1, 1)
            else:
                difficulty = rng.random()
            expression, answer = self._expression(rng, difficulty)
            prompt = f"What is {expression}? {ANSWER_INSTRUCTION}"
            meta = {"expression": expression, "difficulty": round(difficulty, 4)}
            return expression, Task(
                id=task_id(self.kind, expression), prompt=prompt, answer=answer, meta=meta
            )

        return draw_tasks(make, kind=self.kind, split=split, n=n, seed=seed, eval_fraction=self.eval_fraction)

    # ---- episode ----

    def run_tool(self, call: ToolCall) -> str:
        return run_calculator(call.arguments["expression"], self.max_expression_chars)

    def grade(self, text: str) -> tuple[float, dict[str, Any]]:
        assert self.task is not None
        tagged = extract_answer(text) is not None
        candidate = answer_text(text, self.require_answer_tag)
        value = None
        if candidate is not None:
            value = parse_number(candidate)
            if value is None:
                numbers = find_numbers(candidate)
                value = numbers[-1] if numbers else None
        self.last_answer = candidate
        correct = value is not None and Fraction(value) == Fraction(self.task.answer)
        reward = (self.reward_correct if correct else 0.0) + (self.reward_answer_format if tagged else 0.0)
        return reward, {"correct": correct, "answer": value, "answer_tag": tagged}

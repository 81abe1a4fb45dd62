"""countdown: reach a target by combining given numbers with + - * / (each number at most once).

Every task is solvable: the target is made by combining a random subset of the numbers. The
answer is an expression in <answer>…</answer>; the checker parses it with `ast` (never eval),
checks that its numbers are drawn from the given ones without reuse, and evaluates it exactly.
"""

from __future__ import annotations

import ast
import random
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainers.envs.base import Split, ToolEnvironment, draw_tasks, task_id
from trainers.envs.mcp import mcp_toolbox
from trainers.envs.safe_math import ExpressionError, evaluate, literals, parse_expression
from trainers.envs.tools import calculator_spec, run_calculator
from trainers.rollout.toolcalls import ToolExample, extract_answer
from trainers.types import Task, ToolCall


@dataclass
class CountdownCheck:
    valid: bool  # a well-formed expression using only the given numbers, each at most once
    correct: bool  # … and it equals the target
    message: str
    value: Fraction | None = None


def check_countdown(expression: str, numbers: list[int], target: int, max_chars: int = 200) -> CountdownCheck:
    try:
        tree = parse_expression(expression, max_chars)
    except ExpressionError as exc:
        return CountdownCheck(False, False, str(exc))
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and not isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            return CountdownCheck(False, False, "Only + - * / and parentheses are allowed.")
        if isinstance(node, ast.UnaryOp):
            return CountdownCheck(False, False, "Signs in front of numbers are not allowed.")
    used = literals(tree)
    if any(u.denominator != 1 for u in used):
        return CountdownCheck(False, False, "Use only the given whole numbers.")
    extra = Counter(int(u) for u in used) - Counter(numbers)
    if extra:
        n = next(iter(extra))
        return CountdownCheck(False, False, f"{n} is not available (or used more times than given).")
    try:
        value = evaluate(expression, max_chars)
    except ExpressionError as exc:
        return CountdownCheck(False, False, str(exc))
    if value != target:
        return CountdownCheck(True, False, f"The expression equals {value}, not {target}.", value)
    return CountdownCheck(True, True, f"Correct: the expression equals {target}.", value)


ANSWER_INSTRUCTION = "Answer with an expression in <answer></answer>."


class CountdownEnv(ToolEnvironment):
    kind = "countdown"

    def __init__(
        self,
        num_numbers: int = 3,
        max_number: int = 20,
        max_target: int = 100,
        calculator_tool: bool = True,
        max_turns: int = 4,
        few_shot: bool = True,
        max_tool_calls: int = 3,
        max_expression_chars: int = 100,
        reward_correct: float = 1.0,
        reward_valid_expression: float = 0.1,
        eval_fraction: float = 0.1,
        mcp_servers: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(
            max_turns=max_turns,
            max_tool_calls=max_tool_calls if calculator_tool or mcp_servers else 0,
            few_shot=few_shot,
            toolbox=mcp_toolbox(mcp_servers),
        )
        self.num_numbers, self.max_number, self.max_target = num_numbers, max_number, max_target
        self.max_expression_chars = max_expression_chars
        self.reward_correct, self.reward_valid_expression = reward_correct, reward_valid_expression
        self.eval_fraction = eval_fraction
        self.tools = [calculator_spec(max_expression_chars)] if calculator_tool else []

    def system_prompt(self) -> str:
        rules = (
            "You play the countdown numbers game: combine the given numbers with + - * / and parentheses "
            "to make the target. Use each number at most once; you do not have to use them all. Give the "
            "expression as your final answer, for example <answer>(7 - 3) * 5</answer>."
        )
        if not self.tools:
            return rules
        return rules + "\n\n" + self.tools_prompt()

    example = ToolExample(
        f"Numbers: 3, 5, 7. Target: 20. {ANSWER_INSTRUCTION}",
        ToolCall("calculator", {"expression": "(7 - 3) * 5"}),
        "20",
        "(7 - 3) * 5",
    )

    def example_messages(self) -> list[dict[str, str]]:
        if not self.few_shot:
            return []
        if self.tools:
            return super().example_messages()
        return [
            {"role": "user", "content": self.example.question},
            {"role": "assistant", "content": f"<answer>{self.example.answer}</answer>"},
        ]

    def _make(self, rng: random.Random) -> tuple[list[int], int, str]:
        for _ in range(200):
            numbers = [rng.randint(1, self.max_number) for _ in range(self.num_numbers)]
            subset = rng.sample(numbers, rng.randint(2, len(numbers)))
            expression = str(subset[0])
            for n in subset[1:]:
                op = rng.choice("+-*/")
                expression = f"({expression} {op} {n})" if op in "+-" else f"{expression} {op} {n}"
            try:
                value = evaluate(expression)
            except ExpressionError:
                continue
            if value.denominator == 1 and 1 < value <= self.max_target and int(value) not in numbers:
                return sorted(numbers), int(value), ast.unparse(parse_expression(expression))
        raise ValueError("could not generate a countdown task; raise max_target or max_number")

    def tasks(self, split: Split, n: int, seed: int) -> list[Task]:
        def make(rng: random.Random, index: int) -> tuple[str, Task]:
            numbers, target, solution = self._make(rng)
            key = f"{numbers}->{target}"
            prompt = f"Numbers: {', '.join(map(str, numbers))}. Target: {target}. {ANSWER_INSTRUCTION}"
            meta = {"numbers": numbers, "target": target, "solution": solution}
            return key, Task(id=task_id(self.kind, key), prompt=prompt, answer=target, meta=meta)

        return draw_tasks(make, kind=self.kind, split=split, n=n, seed=seed, eval_fraction=self.eval_fraction)

    def run_tool(self, call: ToolCall) -> str:
        return run_calculator(call.arguments["expression"], self.max_expression_chars)

    def grade(self, text: str) -> tuple[float, dict[str, Any]]:
        assert self.task is not None
        expression = extract_answer(text)
        if expression is None:
            self.last_answer = None
            return 0.0, {
                "correct": False,
                "valid": False,
                "message": "No <answer>…</answer> with an expression.",
            }
        self.last_answer = expression
        check = check_countdown(
            expression, self.task.meta["numbers"], self.task.meta["target"], self.max_expression_chars
        )
        reward = (
            self.reward_correct if check.correct else self.reward_valid_expression if check.valid else 0.0
        )
        return reward, {"correct": check.correct, "valid": check.valid, "message": check.message}

    def state(self) -> dict[str, Any]:
        meta = self.task.meta if self.task else {}
        return {**super().state(), "numbers": meta.get("numbers"), "target": meta.get("target")}

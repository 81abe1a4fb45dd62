"""python_tool: compute-style questions answered by writing Python that runs in the sandbox.

The model calls the `python` tool with a program; what the program prints comes back. The final
answer goes in <answer>…</answer> and is checked against the value computed here (by our own code,
not the sandbox).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from trainers.envs.base import Split, ToolEnvironment, answer_text, draw_tasks, task_id
from trainers.envs.kinds import PYTHON_TASK_TYPES
from trainers.envs.mcp import mcp_toolbox
from trainers.envs.tools import python_spec, run_python_tool
from trainers.rollout.toolcalls import ToolExample, extract_answer
from trainers.rubrics.criteria import find_numbers, parse_number
from trainers.types import Task, ToolCall


def _primes_below(n: int) -> int:
    sieve = bytearray([1]) * n
    sieve[0:2] = b"\x00\x00"
    for i in range(2, math.isqrt(n - 1) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(sieve[i * i :: i]))
    return sum(sieve)


def _fibonacci(n: int) -> int:
    a, b = 1, 1
    for _ in range(n - 2):
        a, b = b, a + b
    return b if n > 1 else 1


def _divisors(n: int) -> int:
    return sum(2 - (d * d == n) for d in range(1, math.isqrt(n) + 1) if n % d == 0)


# Each family: rng -> (question, answer)
FAMILIES: dict[str, Callable[[random.Random], tuple[str, int]]] = {
    "sum_of_squares": lambda r: (
        lambda n: (
            f"What is the sum of the squares of the integers from 1 to {n}?",
            n * (n + 1) * (2 * n + 1) // 6,
        )
    )(r.randint(10, 300)),
    "count_primes": lambda r: (lambda n: (f"How many prime numbers are less than {n}?", _primes_below(n)))(
        r.randint(50, 5000)
    ),
    "fibonacci": lambda r: (
        lambda n: (f"What is the {n}th Fibonacci number, counting F(1) = F(2) = 1?", _fibonacci(n))
    )(r.randint(10, 80)),
    "factorial_mod": lambda r: (
        lambda n, m: (f"What is {n}! (the factorial of {n}) modulo {m}?", math.factorial(n) % m)
    )(r.randint(10, 60), r.choice([97, 101, 1000, 9973, 10007])),
    "gcd": lambda r: (
        lambda k, a, b: (
            f"What is the greatest common divisor of {a * k} and {b * k}?",
            math.gcd(a * k, b * k),
        )
    )(r.randint(2, 500), r.randint(2, 2000), r.randint(2, 2000)),
    "digit_sum_power": lambda r: (
        lambda b, e: (f"What is the sum of the decimal digits of {b}^{e}?", sum(map(int, str(b**e))))
    )(r.randint(2, 9), r.randint(10, 200)),
    "count_divisors": lambda r: (lambda n: (f"How many positive divisors does {n} have?", _divisors(n)))(
        r.randint(100, 200000)
    ),
}
assert set(FAMILIES) == set(PYTHON_TASK_TYPES)


ANSWER_INSTRUCTION = "Use the python tool, then answer in <answer></answer>."


class PythonToolEnv(ToolEnvironment):
    kind = "python_tool"

    def __init__(
        self,
        task_types: list[str] | None = None,
        max_turns: int = 4,
        few_shot: bool = True,
        max_tool_calls: int = 3,
        max_code_chars: int = 2000,
        timeout_s: float = 5.0,
        memory_mb: int = 256,
        require_answer_tag: bool = False,
        reward_correct: float = 1.0,
        reward_valid_tool_call: float = 0.1,
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
        self.task_types = list(task_types or PYTHON_TASK_TYPES)
        unknown = set(self.task_types) - set(FAMILIES)
        if unknown:
            raise ValueError(f"unknown task types: {', '.join(sorted(unknown))}")
        self.timeout_s, self.memory_mb = timeout_s, memory_mb
        self.require_answer_tag, self.reward_correct = require_answer_tag, reward_correct
        self.eval_fraction = eval_fraction
        self.tools = [python_spec(max_code_chars)]

    example = ToolExample(
        f"What is the sum of the integers from 1 to 10? {ANSWER_INSTRUCTION}",
        ToolCall("python", {"code": "print(sum(range(1, 11)))"}),
        "55",
        "55",
    )

    def system_prompt(self) -> str:
        return (
            "You answer questions by writing short Python programs. Run them with the python tool, read "
            "the printed result, then give the final answer.\n\n" + self.tools_prompt()
        )

    def tasks(self, split: Split, n: int, seed: int) -> list[Task]:
        def make(rng: random.Random, index: int) -> tuple[str, Task]:
            family = rng.choice(self.task_types)
            question, answer = FAMILIES[family](rng)
            prompt = f"{question} {ANSWER_INSTRUCTION}"
            return question, Task(
                id=task_id(self.kind, question), prompt=prompt, answer=answer, meta={"family": family}
            )

        return draw_tasks(make, kind=self.kind, split=split, n=n, seed=seed, eval_fraction=self.eval_fraction)

    def run_tool(self, call: ToolCall) -> str:
        return run_python_tool(call.arguments["code"], timeout_s=self.timeout_s, memory_mb=self.memory_mb)

    def grade(self, text: str) -> tuple[float, dict[str, Any]]:
        assert self.task is not None
        candidate = answer_text(text, self.require_answer_tag)
        value = None
        if candidate is not None:
            value = parse_number(candidate)
            if value is None:
                numbers = find_numbers(candidate)
                value = numbers[-1] if numbers else None
        self.last_answer = candidate
        # Compare exactly for big integers (a float loses digits past 2**53).
        correct = False
        if candidate is not None and value is not None:
            digits = candidate.strip().replace(",", "")
            correct = (
                digits.lstrip("-").isdigit()
                and int(digits) == self.task.answer
                or (abs(self.task.answer) < 2**53 and Fraction(value) == self.task.answer)
            )
        return (self.reward_correct if correct else 0.0), {
            "correct": correct,
            "answer": candidate,
            "answer_tag": extract_answer(text) is not None,
        }

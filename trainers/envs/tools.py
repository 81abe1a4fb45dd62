"""Tools the built-in environments offer: their specs (shown to the model) and implementations, and the
error any tool raises (`ToolError`, for the built-in tools, MCP servers' and remote environments')."""

from __future__ import annotations

from trainers.envs.safe_math import ExpressionError, evaluate, format_number
from trainers.types import ToolSpec


class ToolError(Exception):
    """A tool refused or failed; the message is shown to the model after TOOL_ERROR_PREFIX."""


MAX_TOOL_OUTPUT_CHARS = 2000


def calculator_spec(max_expression_chars: int) -> ToolSpec:
    return ToolSpec(
        name="calculator",
        description="Evaluates an arithmetic expression with + - * / ** and parentheses.",
        parameters={
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": max_expression_chars,
                    "description": "for example 12*(3+4)",
                }
            },
            "required": ["expression"],
            "additionalProperties": False,
        },
    )


def run_calculator(expression: str, max_chars: int) -> str:
    try:
        return format_number(evaluate(expression, max_chars))
    except ExpressionError as exc:
        raise ToolError(str(exc)) from None


def python_spec(max_code_chars: int) -> ToolSpec:
    return ToolSpec(
        name="python",
        description="Runs a Python program and returns what it prints. Use print() to see results.",
        parameters={
            "type": "object",
            "properties": {
                "code": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": max_code_chars,
                    "description": "a complete Python program, for example print(sum(range(1, 11)))",
                }
            },
            "required": ["code"],
            "additionalProperties": False,
        },
    )


def clip_output(text: str) -> str:
    """Tool output as the model sees it: stripped, and cut (with a note) past MAX_TOOL_OUTPUT_CHARS."""
    text = text.strip()
    if len(text) > MAX_TOOL_OUTPUT_CHARS:
        return text[:MAX_TOOL_OUTPUT_CHARS] + f"\n… ({len(text) - MAX_TOOL_OUTPUT_CHARS} more characters)"
    return text


def run_python_tool(code: str, *, timeout_s: float, memory_mb: int) -> str:
    """Run model-written code in the sandbox; its stdout is the result, a failure a ToolError."""
    from trainers.envs.sandbox import run_python

    result = run_python(code, timeout_s=timeout_s, cpu_s=max(1, int(timeout_s + 0.999)), memory_mb=memory_mb)
    if result.killed_reason and result.exit_code != 1 or result.timed_out:
        raise ToolError(f"The program was stopped: {result.killed_reason}.")
    if result.exit_code != 0:
        last_lines = "\n".join(result.stderr.strip().splitlines()[-3:])
        raise ToolError(f"The program failed:\n{clip_output(last_lines)}")
    output = clip_output(result.stdout)
    return output if output else "(no output: print() the value you want to see)"


def tool_by_name(name: str, *, max_expression_chars: int = 100, max_code_chars: int = 2000) -> ToolSpec:
    if name == "calculator":
        return calculator_spec(max_expression_chars)
    if name == "python":
        return python_spec(max_code_chars)
    raise KeyError(name)

"""Arithmetic on untrusted expressions without eval: parse with `ast`, walk only the nodes we allow.

Exact arithmetic with Fraction, so 7/2*2 is 7, and bounds on length, nesting, exponents and result
size so a model cannot make the evaluator spin or allocate without limit.
"""

from __future__ import annotations

import ast
from fractions import Fraction

MAX_ABS_RESULT = Fraction(10) ** 30
MAX_EXPONENT = 64
MAX_DEPTH = 50

_REPLACEMENTS = {"×": "*", "÷": "/", "^": "**", "−": "-", "–": "-"}


class ExpressionError(ValueError):
    """Why an expression was refused or could not be evaluated (shown to the model)."""


def _normalise(expression: str) -> str:
    for old, new in _REPLACEMENTS.items():
        expression = expression.replace(old, new)
    return expression.strip().rstrip("=").strip()


def parse_expression(expression: str, max_chars: int = 200) -> ast.expr:
    if len(expression) > max_chars:
        raise ExpressionError(
            f"The expression is too long ({len(expression)} characters; at most {max_chars})."
        )
    text = _normalise(expression)
    if not text:
        raise ExpressionError("The expression is empty.")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ExpressionError(
            f"Cannot parse {expression!r}: use numbers, + - * / ** and parentheses."
        ) from None
    return tree.body


def _evaluate(node: ast.expr, depth: int) -> Fraction:
    if depth > MAX_DEPTH:
        raise ExpressionError("The expression is nested too deeply.")
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    ):
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand, depth + 1)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, depth + 1), _evaluate(node.right, depth + 1)
        op = node.op
        if isinstance(op, ast.Add):
            result = left + right
        elif isinstance(op, ast.Sub):
            result = left - right
        elif isinstance(op, ast.Mult):
            result = left * right
        elif isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)):
            if right == 0:
                raise ExpressionError("Division by zero.")
            result = (
                left / right
                if isinstance(op, ast.Div)
                else Fraction(left // right)
                if isinstance(op, ast.FloorDiv)
                else left % right
            )
        elif isinstance(op, ast.Pow):
            if right.denominator != 1 or abs(right) > MAX_EXPONENT:
                raise ExpressionError(f"Exponents must be whole numbers up to {MAX_EXPONENT}.")
            if left == 0 and right < 0:
                raise ExpressionError("Division by zero.")
            result = left ** int(right)
        else:
            raise ExpressionError(f"The operator {type(op).__name__} is not supported.")
        if abs(result) > MAX_ABS_RESULT:
            raise ExpressionError("The result is too large.")
        return result
    raise ExpressionError("Only numbers, + - * / ** and parentheses are allowed.")


def evaluate(expression: str, max_chars: int = 200) -> Fraction:
    """The exact value of an arithmetic expression; raises ExpressionError (never anything else) on bad input."""
    return _evaluate(parse_expression(expression, max_chars), 0)


def format_number(value: Fraction) -> str:
    """An integer as is; otherwise a decimal with up to 10 places and no trailing zeros."""
    if value.denominator == 1:
        return str(value.numerator)
    text = f"{float(value):.10f}".rstrip("0").rstrip(".")
    return text if text not in ("-0", "") else "0"


def literals(node: ast.expr) -> list[Fraction]:
    """Every number literal in a parsed expression, in order (used by countdown's checker)."""
    return [
        Fraction(n.value)
        for n in ast.walk(node)
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool)
    ]

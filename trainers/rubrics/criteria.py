"""Built-in criteria that need no model. Each takes its params as keyword arguments (see kinds.py)."""

from __future__ import annotations

import importlib
import math
import re
import string
import time
from importlib.metadata import entry_points
from typing import Any

from trainers.learn.algorithms import overlong_penalty
from trainers.rollout.toolcalls import (
    extract_answer,
    has_tool_call,
    is_error_observation,
    syntax_error,
    tool_call_blocks,
)
from trainers.rubrics.base import (
    REGEX_BUDGET_S,
    REGEX_TIMEOUT_S,
    Criterion,
    CriterionResult,
    CriterionUnavailable,
    compile_regex,
    regex_error,
)
from trainers.rubrics.kinds import FORMAT_CHECKS
from trainers.types import Trajectory, Turn

REWARD_FUNCTION_ENTRY_POINTS = "rollout_studio.reward_functions"

# A number: optional sign (only when the minus cannot be a subtraction, i.e. not right after a digit
# or a closing bracket), thousands separators, decimals, exponent.
_NUMBER = re.compile(
    r"(?:(?<![\w)\]])-)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|(?<![\w.])-?\.\d+"
)


def parse_number(text: str) -> float | None:
    """The value of a string that is one number (commas allowed as thousands separators), else None."""
    cleaned = text.strip().rstrip(".").replace(",", "")
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def find_numbers(text: str) -> list[float]:
    values = []
    for match in _NUMBER.finditer(text):
        value = parse_number(match.group(0))
        if value is not None:
            values.append(value)
    return values


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def _assistant_turns(trajectory: Trajectory) -> list[tuple[int, Turn]]:
    return [(i, t) for i, t in enumerate(trajectory.turns) if t.role == "assistant"]


class ExactMatch(Criterion):
    def __init__(
        self,
        extract: str = "answer_tag_or_full",
        match: str = "equals",
        case_sensitive: bool = False,
        collapse_whitespace: bool = True,
        strip_punctuation: bool = False,
        target: str | None = None,
    ) -> None:
        self.extract, self.match, self.target = extract, match, target
        self.case_sensitive, self.collapse_whitespace = case_sensitive, collapse_whitespace
        self.strip_punctuation = strip_punctuation

    def _normalise(self, text: str) -> str:
        if not self.case_sensitive:
            text = text.casefold()
        if self.strip_punctuation:
            text = text.translate(str.maketrans("", "", string.punctuation))
        if self.collapse_whitespace:
            text = " ".join(text.split())
        return text

    def _extract(self, final: str) -> str | None:
        tagged = extract_answer(final)
        if self.extract == "answer_tag":
            return tagged
        if self.extract == "answer_tag_or_full":
            return tagged if tagged is not None else final
        if self.extract == "last_line":
            lines = [line for line in final.splitlines() if line.strip()]
            return lines[-1] if lines else ""
        return final

    def score(self, trajectory: Trajectory) -> CriterionResult:
        expected = self.target if self.target is not None else trajectory.task.answer
        if expected is None:
            return CriterionResult(0.0, "No expected answer: the task has none and no target is set.")
        answer = self._extract(trajectory.final_answer)
        if answer is None:
            return CriterionResult(0.0, "No <answer>…</answer> tag in the final message.")
        got, want = self._normalise(answer), self._normalise(str(expected))
        ok = (want in got) if self.match == "contains" else (got == want)
        verb = "contains" if self.match == "contains" else "equals"
        return CriterionResult(
            1.0 if ok else 0.0,
            f"Answer {answer.strip()[:200]!r} {verb if ok else 'does not ' + verb.rstrip('s')} expected {str(expected)[:200]!r}.",
        )


class NumericMatch(Criterion):
    def __init__(
        self,
        extract: str = "answer_tag_or_last_number",
        abs_tolerance: float = 1e-6,
        rel_tolerance: float = 0.0,
        target: float | None = None,
    ) -> None:
        self.extract, self.abs_tolerance, self.rel_tolerance, self.target = (
            extract,
            abs_tolerance,
            rel_tolerance,
            target,
        )

    def extract_number(self, text: str) -> tuple[float | None, str]:
        """The answer's number and where it came from."""
        if self.extract in ("answer_tag", "answer_tag_or_last_number"):
            tagged = extract_answer(text)
            if tagged is not None:
                value = parse_number(tagged)
                if value is None:
                    numbers = find_numbers(tagged)
                    value = numbers[-1] if numbers else None
                if value is not None or self.extract == "answer_tag":
                    return value, "the <answer> tag"
            elif self.extract == "answer_tag":
                return None, "the <answer> tag (missing)"
        numbers = find_numbers(text)
        if not numbers:
            return None, "the text"
        if self.extract == "first_number":
            return numbers[0], "the first number"
        return numbers[-1], "the last number"

    def score(self, trajectory: Trajectory) -> CriterionResult:
        expected_raw = self.target if self.target is not None else trajectory.task.answer
        expected = (
            expected_raw
            if isinstance(expected_raw, (int, float)) and not isinstance(expected_raw, bool)
            else None
        )
        if expected is None and isinstance(expected_raw, str):
            expected = parse_number(expected_raw)
        if expected is None:
            return CriterionResult(0.0, f"Expected answer {expected_raw!r} is not a number.")
        value, source = self.extract_number(trajectory.final_answer)
        if value is None:
            return CriterionResult(0.0, f"No number found in {source}.")
        error = abs(value - float(expected))
        ok = error <= self.abs_tolerance or error <= self.rel_tolerance * abs(float(expected))
        relation = "matches" if ok else "does not match"
        return CriterionResult(
            1.0 if ok else 0.0, f"{_fmt(value)} (from {source}) {relation} expected {_fmt(float(expected))}."
        )


class RegexCriterion(Criterion):
    def __init__(
        self,
        pattern: str,
        must_match: bool = True,
        full_match: bool = False,
        flags: list[str] | None = None,
        scope: str = "final_answer",
    ) -> None:
        self.regex = compile_regex(pattern, flags)
        self.must_match, self.full_match, self.scope = must_match, full_match, scope
        self.timed_out = 0
        self._deadline = 0.0

    @classmethod
    def check_config(cls, params: dict[str, Any]) -> dict[str, list[str]]:
        problem = regex_error(params.get("pattern"), params.get("flags"))
        return {"pattern": [problem]} if problem else {}

    def _passes(self, text: str) -> bool:
        """Whether `text` passes; a match that runs past REGEX_TIMEOUT_S (or past what is left of the
        trajectory's REGEX_BUDGET_S) fails and is remembered."""
        match = self.regex.fullmatch if self.full_match else self.regex.search
        left = self._deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            found = match(text, timeout=min(REGEX_TIMEOUT_S, left))
        except TimeoutError:
            self.timed_out += 1
            return False
        return (found is not None) == self.must_match

    def _timeout_note(self) -> str:
        if not self.timed_out:
            return ""
        return (
            f" The pattern gave up after {REGEX_TIMEOUT_S:g} s on {self.timed_out} text(s), scored as failing;"
            " it probably backtracks catastrophically."
        )

    def score(self, trajectory: Trajectory) -> CriterionResult:
        want = "matches" if self.must_match else "does not match"
        self.timed_out = 0
        self._deadline = time.monotonic() + REGEX_BUDGET_S
        if self.scope == "each_assistant":
            turns = _assistant_turns(trajectory)
            if not turns:
                return CriterionResult(0.0, "No assistant messages.")
            rewards = {i: 1.0 if self._passes(t.text) else 0.0 for i, t in turns}
            passed = sum(rewards.values())
            return CriterionResult(
                passed / len(turns),
                f"{passed:g} of {len(turns)} assistant messages: pattern {want}.{self._timeout_note()}",
                rewards,
            )
        if self.scope == "all_assistant":
            text = "\n".join(t.text for _, t in _assistant_turns(trajectory))
        else:
            text = trajectory.final_answer
        ok = self._passes(text)
        return CriterionResult(
            1.0 if ok else 0.0,
            f"Pattern {want if ok else 'fails: ' + want}: {self.regex.pattern!r}.{self._timeout_note()}",
        )


class FormatCriterion(Criterion):
    def __init__(self, checks: list[str] | None = None) -> None:
        self.checks = list(checks or FORMAT_CHECKS)

    def score(self, trajectory: Trajectory) -> CriterionResult:
        final = trajectory.final_answer
        assistant = _assistant_turns(trajectory)
        blocks = [(i, b) for i, t in assistant for b in tool_call_blocks(t.text)]
        bad = [(i, syntax_error(b)) for i, b in blocks]
        bad = [(i, why) for i, why in bad if why]
        results: dict[str, tuple[bool, str]] = {}
        for check in self.checks:
            if check == "answer_tag":
                ok = extract_answer(final) is not None and "</answer>" in final
                results[check] = (
                    ok,
                    "final message has <answer>…</answer>"
                    if ok
                    else "no <answer>…</answer> in the final message",
                )
            elif check == "tool_call_syntax":
                ok = not bad
                results[check] = (
                    ok,
                    f"{len(blocks)} tool call(s), all well-formed"
                    if ok
                    else f"malformed tool call in turn {bad[0][0]}: {bad[0][1]}",
                )
            elif check == "used_tool":
                ok = len(blocks) > len(bad)
                results[check] = (ok, "made a well-formed tool call" if ok else "no well-formed tool call")
            elif check == "nothing_after_answer":
                ok = "</answer>" in final and not final.rsplit("</answer>", 1)[1].strip()
                results[check] = (
                    ok,
                    "nothing after </answer>" if ok else "text after </answer> (or no answer)",
                )
        passed = sum(ok for ok, _ in results.values())
        turn_rewards = None
        if "tool_call_syntax" in self.checks and blocks:
            bad_turns = {i for i, _ in bad}
            turn_rewards = {i: 0.0 if i in bad_turns else 1.0 for i, _ in blocks}
        detail = "; ".join(f"{'✓' if ok else '✗'} {why}" for ok, why in results.values())
        return CriterionResult(
            passed / len(results), f"{passed} of {len(results)} checks pass: {detail}.", turn_rewards
        )


def measure_length(trajectory: Trajectory, unit: str, scope: str) -> tuple[int, str]:
    """Length of the assistant's output and the unit actually used ('auto' picks tokens if present)."""
    turns = [t for _, t in _assistant_turns(trajectory)]
    if scope == "final_answer":
        turns = turns[-1:]
    elif scope == "longest_message" and turns:
        # The per-message token budget (max new tokens) is what a message runs out of.
        turns = [
            max(turns, key=lambda t: len(t.token_ids) if t.token_ids is not None else len(t.text.split()))
        ]
    if unit == "auto":
        unit = "tokens" if turns and all(t.token_ids is not None for t in turns) else "words"
    if unit == "tokens":
        if any(t.token_ids is None for t in turns):
            raise CriterionUnavailable("Length in tokens needs token ids, and this trajectory has none.")
        return sum(len(t.token_ids or []) for t in turns), "tokens"
    if unit == "chars":
        return sum(len(t.text) for t in turns), "chars"
    return sum(len(t.text.split()) for t in turns), "words"


class LengthCriterion(Criterion):
    def __init__(
        self, min_len: int = 0, max_len: int = 256, unit: str = "auto", scope: str = "all_assistant"
    ) -> None:
        self.min_len, self.max_len, self.unit, self.scope = min_len, max_len, unit, scope

    @classmethod
    def check_config(cls, params: dict[str, Any]) -> dict[str, list[str]]:
        low, high = params.get("min_len", 0), params.get("max_len", 256)
        if isinstance(low, int) and isinstance(high, int) and low > high:
            return {"min_len": ["must be ≤ max length"]}
        return {}

    def score(self, trajectory: Trajectory) -> CriterionResult:
        length, unit = measure_length(trajectory, self.unit, self.scope)
        if length < self.min_len:
            raw = length / self.min_len
        elif length <= self.max_len:
            raw = 1.0
        else:
            raw = max(0.0, 1.0 - (length - self.max_len) / self.max_len)
        return CriterionResult(raw, f"{length} {unit}; 1.0 inside [{self.min_len}, {self.max_len}] {unit}.")


class OverlongPenalty(Criterion):
    """DAPO's soft overlong punishment (Yu et al., 2025, eq. 13)."""

    def __init__(
        self, max_len: int = 512, buffer: int = 128, unit: str = "auto", scope: str = "all_assistant"
    ) -> None:
        self.max_len, self.buffer, self.unit, self.scope = max_len, buffer, unit, scope

    @classmethod
    def check_config(cls, params: dict[str, Any]) -> dict[str, list[str]]:
        buffer, high = params.get("buffer", 128), params.get("max_len", 512)
        if isinstance(buffer, int) and isinstance(high, int) and buffer > high:
            return {"buffer": ["must be ≤ max length"]}
        return {}

    def penalty(self, length: int) -> float:
        return overlong_penalty(length, self.max_len, self.buffer)

    def score(self, trajectory: Trajectory) -> CriterionResult:
        length, unit = measure_length(trajectory, self.unit, self.scope)
        raw = self.penalty(length)
        return CriterionResult(
            raw,
            f"{length} {unit}; no penalty up to {self.max_len - self.buffer}, −1 at {self.max_len} {unit}.",
        )


class ToolCallsCriterion(Criterion):
    def __init__(
        self,
        min_calls: int = 1,
        max_calls: int = 3,
        reward_in_range: float = 1.0,
        penalty_per_extra_call: float = 0.25,
        penalty_per_failed_call: float = 0.25,
    ) -> None:
        self.min_calls, self.max_calls, self.reward_in_range = min_calls, max_calls, reward_in_range
        self.penalty_per_extra_call, self.penalty_per_failed_call = (
            penalty_per_extra_call,
            penalty_per_failed_call,
        )

    @classmethod
    def check_config(cls, params: dict[str, Any]) -> dict[str, list[str]]:
        low, high = params.get("min_calls", 1), params.get("max_calls", 3)
        if isinstance(low, int) and isinstance(high, int) and low > high:
            return {"min_calls": ["must be ≤ max calls"]}
        return {}

    @staticmethod
    def calls(trajectory: Trajectory) -> list[tuple[int, bool]]:
        """(turn index, failed) for every assistant turn that attempted a tool call."""
        found = []
        turns = trajectory.turns
        for i, turn in enumerate(turns):
            if turn.role != "assistant" or not (turn.tool_name or has_tool_call(turn.text)):
                continue
            reply = turns[i + 1] if i + 1 < len(turns) and turns[i + 1].role == "tool" else None
            if reply is not None:
                failed = is_error_observation(
                    reply.tool_result if reply.tool_result is not None else reply.text
                )
            else:  # a pasted transcript without tool replies: judge by syntax alone
                failed = (
                    any(syntax_error(b) for b in tool_call_blocks(turn.text)) if not turn.tool_name else False
                )
            found.append((i, failed))
        return found

    def score(self, trajectory: Trajectory) -> CriterionResult:
        calls = self.calls(trajectory)
        count, failed = len(calls), sum(f for _, f in calls)
        extra = max(0, count - self.max_calls)
        in_range = self.min_calls <= count <= self.max_calls
        raw = (
            (self.reward_in_range if in_range else 0.0)
            - self.penalty_per_extra_call * extra
            - self.penalty_per_failed_call * failed
        )
        per_call = self.reward_in_range / max(self.max_calls, 1)
        turn_rewards = {}
        for k, (i, was_failed) in enumerate(calls, start=1):
            if was_failed:
                turn_rewards[i] = -self.penalty_per_failed_call
            elif k > self.max_calls:
                turn_rewards[i] = -self.penalty_per_extra_call
            else:
                turn_rewards[i] = per_call
        return CriterionResult(
            raw,
            f"{count} tool call(s), {failed} failed; target {self.min_calls}–{self.max_calls}"
            f" ({'in range' if in_range else 'out of range'}), {extra} extra.",
            turn_rewards or None,
        )


class EnvRewardCriterion(Criterion):
    def score(self, trajectory: Trajectory) -> CriterionResult:
        steps = trajectory.info.get("step_rewards")
        detail = f" (per step: {', '.join(f'{r:g}' for r in steps)})" if steps else ""
        return CriterionResult(
            float(trajectory.env_reward), f"Environment reward {trajectory.env_reward:g}{detail}."
        )


def resolve_reward_function(reference: str) -> Any:
    """Find a registered reward function: an entry point name, or `module:function` on the import path.

    Only names are resolved; nothing in `reference` is evaluated.
    """
    if ":" in reference:
        module_name, _, attr = reference.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise CriterionUnavailable(
                f"Reward function module {module_name!r} is not importable here: {exc}"
            ) from exc
        function = getattr(module, attr, None)
        if function is None:
            raise CriterionUnavailable(f"Module {module_name!r} has no function {attr!r}.")
    else:
        matches = [ep for ep in entry_points(group=REWARD_FUNCTION_ENTRY_POINTS) if ep.name == reference]
        if not matches:
            raise CriterionUnavailable(
                f"No reward function {reference!r} in entry point group {REWARD_FUNCTION_ENTRY_POINTS!r} here."
            )
        function = matches[0].load()
    if not callable(function):
        raise CriterionUnavailable(f"Reward function {reference!r} is not callable.")
    return function


class CustomPython(Criterion):
    """Calls `function(trajectory, **args)`; it returns a number, (number, explanation) or a CriterionResult."""

    def __init__(self, function: str, args: dict[str, Any] | None = None) -> None:
        self.reference, self.args = function, dict(args or {})
        self._function: Any = None

    def score(self, trajectory: Trajectory) -> CriterionResult:
        if self._function is None:
            self._function = resolve_reward_function(self.reference)
        result = self._function(trajectory, **self.args)
        provenance = {"function": self.reference}
        out: CriterionResult | None
        if isinstance(result, CriterionResult):
            result.provenance = {**provenance, **result.provenance}
            value, out = result.raw, result
        elif isinstance(result, tuple) and len(result) == 2:
            value, out = result[0], CriterionResult(float(result[0]), str(result[1]), provenance=provenance)
        else:
            value = result
            out = (
                CriterionResult(
                    float(result), f"{self.reference} returned {result!r}.", provenance=provenance
                )
                if isinstance(result, (int, float))
                else None
            )
        if out is None or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
            raise TypeError(
                f"Reward function {self.reference!r} returned {result!r}; expected a finite number."
            )
        out.raw = float(out.raw)
        return out

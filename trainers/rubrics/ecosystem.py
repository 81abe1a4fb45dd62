"""Criteria over ecosystem packages: math-verify's symbolic equivalence and a verifiers rubric's functions.

Both import their package only when they score, so listing kinds stays cheap.
"""

from __future__ import annotations

import threading
from typing import Any

from trainers.rollout.toolcalls import extract_answer
from trainers.rubrics.base import Criterion, CriterionResult, CriterionUnavailable
from trainers.types import Trajectory

_CLIP = 200


def _clip(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _CLIP else text[:_CLIP] + "…"


class MathVerifyCriterion(Criterion):
    """1 when math-verify finds the answer equivalent to the expected one (LaTeX, fractions, sets…), else 0."""

    def __init__(
        self,
        extract: str = "answer_tag_or_full",
        target: str | None = None,
        float_rounding: int = 6,
        strict: bool = True,
        timeout_s: int = 5,
    ) -> None:
        self.extract, self.target = extract, target
        self.float_rounding, self.strict, self.timeout_s = float_rounding, strict, timeout_s

    def _answer(self, trajectory: Trajectory) -> str | None:
        final = trajectory.final_answer
        if self.extract == "full":
            return final
        tagged = extract_answer(final)
        if tagged is not None or self.extract == "answer_tag":
            return tagged
        return final

    def score(self, trajectory: Trajectory) -> CriterionResult:
        try:
            from math_verify import parse, verify
        except ImportError as exc:
            raise CriterionUnavailable(f"math-verify is not installed here: {exc}") from exc
        expected = self.target if self.target not in (None, "") else trajectory.task.answer
        if expected is None:
            return CriterionResult(0.0, "No expected answer: the task has none and no target is set.")
        answer = self._answer(trajectory)
        if answer is None:
            return CriterionResult(0.0, "No <answer>…</answer> tag in the final message.")
        # math-verify's timeouts use SIGALRM, which only the main thread may set: elsewhere, none.
        timeout = self.timeout_s if threading.current_thread() is threading.main_thread() else None
        gold = parse(_as_math(expected), parsing_timeout=timeout)
        predicted = parse(_as_math(answer), parsing_timeout=timeout)
        if not gold:
            return CriterionResult(
                0.0, f"math-verify could not read the expected answer {_clip(str(expected))!r}."
            )
        if not predicted:
            return CriterionResult(0.0, f"math-verify found no mathematical answer in {_clip(answer)!r}.")
        same = verify(
            gold, predicted, float_rounding=self.float_rounding, strict=self.strict, timeout_seconds=timeout
        )
        verdict = "equivalent to" if same else "not equivalent to"
        return CriterionResult(
            1.0 if same else 0.0,
            f"Answer {_clip(str(predicted[0]))} is {verdict} the expected "
            f"{_clip(str(gold[0]))} (read from {_clip(answer)!r}).",
        )


def _as_math(value: Any) -> str:
    """A bare answer as math-verify reads best: wrapped in $…$ unless it already has LaTeX delimiters."""
    text = str(value).strip()
    if "$" in text or "\\(" in text or "\\[" in text or "\\boxed" in text:
        return text
    return f"${text}$"


class VerifiersRubricCriterion(Criterion):
    """A verifiers rubric function's value, as the `verifiers` environment computed it at the episode's end.

    `function` names one reward function (raw: its value); empty takes them all (raw: Σ weight × value
    with the environment's weights). Give the criterion the function's weight in the rubric spec to
    keep verifiers' weighting with each function's raw and weighted value shown apart.
    """

    def __init__(self, function: str = "") -> None:
        self.function = function

    def score(self, trajectory: Trajectory) -> CriterionResult:
        scores = (trajectory.info.get("last_step") or {}).get("verifiers") or trajectory.info.get("verifiers")
        if not isinstance(scores, dict) and trajectory.status == "error":
            # An episode that failed (its agent over its turn limit, a dead harness) was never scored by
            # the environment: it earns nothing, and the run goes on.
            reason = " ".join(str(trajectory.info.get("error") or "the episode failed").split())[:300]
            return CriterionResult(0.0, f"The episode failed before the environment scored it: {reason}")
        if not isinstance(scores, dict):
            raise CriterionUnavailable(
                "Only episodes of a `verifiers` environment carry its rubric's values "
                "(they are computed when the episode ends)."
            )
        rewards, weights = scores.get("rewards") or {}, scores.get("weights") or {}
        provenance = {"environment": scores.get("environment")}
        if self.function:
            if self.function not in rewards:
                skipped = (
                    " (a group reward function: not run)"
                    if self.function in (scores.get("skipped") or [])
                    else ""
                )
                known = ", ".join(sorted(rewards)) or "none"
                raise CriterionUnavailable(
                    f"The environment's rubric has no function {self.function!r}{skipped}; it has {known}."
                )
            value = float(rewards[self.function])
            return CriterionResult(
                value,
                f"{self.function} = {value:g} (weight {weights.get(self.function, 1.0):g} "
                "in the environment's rubric).",
                provenance=provenance,
            )
        total = sum(float(rewards[name]) * float(weights.get(name, 1.0)) for name in rewards)
        parts = ", ".join(
            f"{name} {float(rewards[name]):g}×{float(weights.get(name, 1.0)):g}" for name in rewards
        )
        return CriterionResult(
            total, f"Weighted sum of the environment's rubric: {parts}.", provenance=provenance
        )

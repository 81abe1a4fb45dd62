"""The curriculum's LLM generator (`curriculum_generator: llm`): a model rewrites a failed task into easier or
related variants, each with its answer, for environments with no generator of their own (a JSONL file's
tasks) or whose generator cannot aim at a failure.

The model is asked for the variants in a strict line format (`VARIANT_FORMAT`: `TASK: …` then `ANSWER: …`).
Its answer is untrusted text: `parse_variants` reads what follows the format and names what does not, and
`LLMVariants` keeps a variant only when

- it is new: not the failed task (its words or the arithmetic it states), not a task already in the pool or
  earlier in the same answer, not the text of a held-out task (an evaluation task learned from would no
  longer be held out); and it does not state its own answer ("… = 10");
- its answer is a number where the failed task's is one;
- the environment's own verifier grades it: the environment, reset on the variant, grades the stated answer
  as a reply (`<answer>ANSWER</answer>`) and calls it correct — so the answer is one its `match` can read
  (a number for a numeric match), reasoning-gym's scorer accepts it, and so on; with a math-verify criterion
  in the rubric, math-verify must read the answer as mathematics too;
- where the task states a plain arithmetic expression, the stated answer is its value (a small model's
  sums are often wrong, and a wrong reference answer teaches the policy a wrong answer).

Every refusal is counted by reason (`REFUSALS`) and reaches the `task_pool` event; a model that fails to
answer at all (an endpoint down) is a refusal too, never the run's failure. Plain Python: the model is a
callable (prompts → answers) that `trainers.rubrics.judge_models.generation_model` makes.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

from trainers.envs.base import task_id
from trainers.envs.safe_math import ExpressionError, evaluate
from trainers.rubrics.criteria import parse_number
from trainers.types import Task

MAX_TASK_CHARS = 2000
MAX_ANSWER_CHARS = 200
SHOWN_TASK_CHARS = 1500  # how much of the failed task the model is shown

VARIANT_FORMAT = (
    "Write each new task in exactly this format, and nothing else:\n"
    "TASK: <the new task, stated in full>\n"
    "ANSWER: <its correct final answer alone>"
)
_PLACEHOLDERS = ("the new task, stated in full", "its correct final answer alone")

# Why a variant was refused: the code the task_pool event counts, and its words (the docs' table).
REFUSALS = {
    "no_variant": "the answer holds no TASK:/ANSWER: pair",
    "no_answer": "a TASK: line with no ANSWER: line after it",
    "empty": "an empty task or answer",
    "too_long": f"a task over {MAX_TASK_CHARS} or an answer over {MAX_ANSWER_CHARS} characters",
    "placeholder": "the format's placeholder copied back",
    "copy": "the failed task itself (its words or its arithmetic), or a task already in the pool or earlier in "
    "the answer",
    "gives_answer": 'the task states its own answer ("… = 10", "its answer is 10")',
    "not_a_number": "the failed task's answer is a number and the variant's is not",
    "held_out": "the text of a held-out (evaluation) task",
    "unverifiable": "the environment's verifier does not grade the stated answer as correct",
    "wrong_answer": "the task's arithmetic gives another answer than the one stated",
    "model_error": "the generator model gave no answer (its error is in the run's log)",
}

_TASK = re.compile(r"^[\s>*#\-\d.)]*\**\s*(TASK|ANSWER)\s*\d*\s*\**\s*[:：]\s*\**\s*(.*)$", re.I)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# A run of numbers and operators, at least "a op b": the arithmetic a task states.
_EXPRESSION = re.compile(r"[-(]*\d[\d.\s]*(?:[-+*/×÷][\s(]*\d[\d.\s)]*)+")


def _plain(text: str) -> str:
    """One line of untrusted text with no control characters."""
    return _CONTROL.sub(" ", text).strip()


def normal(text: str) -> str:
    """A task's text as duplicates are compared: case, spacing and a trailing stop ignored."""
    return " ".join(str(text).split()).casefold().rstrip(".?! ")


def variant_prompt(task: Any, n: int) -> str:
    """What the generator model is asked about one failed task: its text, its answer, the format."""
    shown = (task.prompt or "").strip()
    if len(shown) > SHOWN_TASK_CHARS:
        shown = shown[: SHOWN_TASK_CHARS - 1] + "…"
    answer = "" if task.answer is None else f"\nIts answer: {str(task.answer)[:MAX_ANSWER_CHARS]}"
    return (
        "A student could not solve this task:\n\n"
        f"{shown}{answer}\n\n"
        f"Write {n} new task{'s' if n != 1 else ''} of the same kind that practise the same skill: each a "
        "little easier than this one, or a closely related one of the same difficulty, each with its "
        "correct answer in the same form as this task's answer.\n\n"
        f"{VARIANT_FORMAT}"
    )


def parse_variants(answer: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The (task, answer) pairs in a model's answer, in order, and the refusal codes of what broke the
    format (`REFUSALS`). A task may run over several lines until its ANSWER line; chatter around the pairs
    is ignored; an answer with no pair at all is one `no_variant`."""
    pairs: list[tuple[str, str]] = []
    refused: list[str] = []
    task: list[str] | None = None
    for line in str(answer).splitlines():
        found = _TASK.match(line)
        if found and found.group(1).upper() == "TASK":
            if task is not None:
                refused.append("no_answer")
            task = [found.group(2)]
        elif found and task is not None:
            pairs.append((_plain(" ".join(" ".join(task).split())), _plain(found.group(2)).strip("*` ")))
            task = None
        elif task is not None and line.strip():
            task.append(line.strip())
    if task is not None:
        refused.append("no_answer")
    if not pairs and not refused:
        refused.append("no_variant")
    return pairs, refused


def form_problem(text: str, answer: str) -> str:
    """The refusal code of a pair whose form is wrong ("" when it is fine): empty, too long, a placeholder."""
    if not text or not answer:
        return "empty"
    if len(text) > MAX_TASK_CHARS or len(answer) > MAX_ANSWER_CHARS:
        return "too_long"
    plain = (normal(text.strip("<>")), normal(answer.strip("<>")))
    if any(p in plain[0] or p in plain[1] for p in _PLACEHOLDERS):
        return "placeholder"
    return ""


def stated_expression(text: str) -> str:
    """The one plain arithmetic expression a task states, without spaces ("" when none or several: an
    equation, a comparison)."""
    found = [m.group(0).strip() for m in _EXPRESSION.finditer(text.replace("×", "*").replace("÷", "/"))]
    found = [e for e in found if re.search(r"\d\s*[-+*/]\s*[\d(]", e)]
    return "".join(found[0].rstrip(".").split()) if len(found) == 1 else ""


def arithmetic_disagrees(text: str, answer: Any) -> bool:
    """Whether the task states one plain arithmetic expression whose value is not the stated answer (False
    when it states none, or the answer is no number: nothing to check)."""
    value = parse_number(str(answer))
    expression = stated_expression(text)
    if value is None or not expression:
        return False
    try:
        return evaluate(expression) != Fraction(value).limit_denominator(10**9)
    except (ExpressionError, ZeroDivisionError, ValueError, OverflowError):
        return False


def gives_answer(text: str, answer: str) -> bool:
    """Whether the task states its own answer: after an "=", or as "(its) answer is/: …" (SmolLM2-135M wrote
    "10 + 6 - 6 = 10" as a task)."""
    shown = re.escape(answer.strip().rstrip("."))
    return bool(re.search(rf"(=|\banswer\b(\s+is)?\s*[:=]?)\s*{shown}(?![\w.]*\d)", text, re.I))


def variant_task(parent: Any, text: str, answer: str, generator: str) -> Task:
    """A variant as a task of the failed one's environment: the answer a number where the failed task's is
    one, the failed task's tools and dataset kept, and for a reasoning-gym task an entry of its own (its
    scorer reads the entry)."""
    value: Any = answer
    if isinstance(parent.answer, (int, float)) and not isinstance(parent.answer, bool):
        number = parse_number(answer)
        if number is not None:
            value = int(number) if float(number).is_integer() else number
    meta: dict[str, Any] = {k: parent.meta[k] for k in ("tools", "dataset") if k in (parent.meta or {})}
    meta.update({"generator": generator, "variant_of": parent.id})
    entry = (parent.meta or {}).get("entry")
    if isinstance(entry, dict):
        source = (entry.get("metadata") or {}).get("source_dataset")
        meta["entry"] = {
            "question": text,
            "answer": answer,
            "metadata": {"source_dataset": source, "variant_of": parent.id} if source else {},
        }
    return Task(id=task_id("llm", normal(text)), prompt=text, answer=value, meta=meta)


def grades_its_answer(env: Any, task: Task) -> bool:
    """Whether the environment's verifier, reset on `task`, grades its stated answer as a reply
    (`<answer>ANSWER</answer>`) correct. Any error is a no."""
    try:
        env.reset(task, 0)
        _, info = env.grade(f"<answer>{task.answer}</answer>")
        return bool(info.get("correct"))
    except Exception:  # noqa: BLE001 — an answer the verifier chokes on is one it cannot check
        return False


def math_verify_reads(answer: str) -> bool:
    """Whether math-verify reads `answer` as mathematics (it keeps text it cannot read as a bare string,
    which it would then compare as text)."""
    from math_verify import parse

    # math-verify's timeouts use SIGALRM, which only the main thread may set: elsewhere, none.
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    text = answer if "$" in answer or "\\boxed" in answer else f"${answer}$"
    try:
        return any(not isinstance(p, str) for p in parse(text, parsing_timeout=timeout))
    except Exception:  # noqa: BLE001 — what it chokes on, it does not read
        return False


class LLMVariants:
    """The curriculum's variant maker over a generator model (see the module docstring): (failed task, n,
    seed, exclude ids) → up to n verified variants. `refused` counts refusals by code since `take()`;
    `generated` the variants made."""

    def __init__(
        self,
        ask: Callable[[list[str]], list[str]],
        make_env: Callable[[], Any],
        *,
        model: str,
        held_out: Sequence[str] = (),
        math_verify: bool = False,
        log: Callable[[str, str], None] | None = None,
    ) -> None:
        self.ask, self.make_env, self.math_verify, self.log = ask, make_env, math_verify, log
        self.name = f"llm:{model}"
        self.held_out = {normal(text) for text in held_out}
        self.refused: dict[str, int] = {}
        self.generated = 0
        self._failed_sum = ""  # the arithmetic the failed task states, while its variants are checked
        env = make_env()
        try:
            if not callable(getattr(env, "grade", None)):
                raise ValueError(
                    f"the llm curriculum generator needs an environment that grades a task's stated answer "
                    f"(from_dataset, reasoning_gym, the arithmetic kinds…); {getattr(env, 'kind', env)!r} "
                    "does not: use curriculum_generator environment"
                )
        finally:
            if hasattr(env, "close"):
                env.close()

    def _refuse(self, code: str, count: int = 1) -> None:
        self.refused[code] = self.refused.get(code, 0) + count

    def take(self) -> dict[str, int]:
        """The refusals since the last take, by code; the count starts again."""
        refused, self.refused = self.refused, {}
        return refused

    def __call__(self, task: Any, n: int, seed: int, exclude: set[str]) -> list[Task]:
        return self.many([task], n, exclude)[0]

    def many(self, tasks: Sequence[Any], n: int, exclude: set[str]) -> list[list[Task]]:
        """Up to n variants of each failed task, the model asked about all of them in one batch (`TaskPool`
        calls this for a step's failures)."""
        try:
            answers = self.ask([variant_prompt(task, n) for task in tasks])
        except Exception as exc:  # noqa: BLE001 — a generator that fails costs variants, never the run
            self._refuse("model_error", len(tasks))
            if self.log:
                self.log(f"curriculum generator {self.name}: {type(exc).__name__}: {exc}", "warning")
            return [[] for _ in tasks]
        env = self.make_env()
        try:
            made = [
                self._read(task, answer, n, exclude, env) for task, answer in zip(tasks, answers, strict=True)
            ]
        finally:
            if hasattr(env, "close"):
                env.close()
        self.generated += sum(len(m) for m in made)
        return made

    def _read(self, task: Any, answer: str, n: int, exclude: set[str], env: Any) -> list[Task]:
        """The kept variants of one failed task in the model's answer; the rest counted as refused."""
        pairs, broken = parse_variants(answer)
        for code in broken:
            self._refuse(code)
        made: list[Task] = []
        seen = {normal(task.prompt)}
        self._failed_sum = stated_expression(task.prompt)
        for text, stated in pairs:
            if len(made) >= n:
                break  # more than asked for: the rest is not counted either way
            code = self._problem(task, text, stated, seen, exclude, env)
            if code:
                self._refuse(code)
                continue
            made.append(variant_task(task, text, stated, self.name))
            seen.add(normal(text))
        return made

    def _problem(self, task: Any, text: str, stated: str, seen: set[str], exclude: set[str], env: Any) -> str:
        code = form_problem(text, stated)
        if code:
            return code
        variant = variant_task(task, text, stated, self.name)
        expression = stated_expression(text)
        if normal(text) in seen or variant.id in exclude or (expression and expression == self._failed_sum):
            return "copy"
        if normal(text) in self.held_out:
            return "held_out"
        if gives_answer(text, stated):
            return "gives_answer"
        # (With math-verify on, its reading is the check: \\frac{1}{2} is a number to it.)
        numeric = parse_number(str(task.answer)) is not None and not self.math_verify
        if numeric and parse_number(stated) is None:
            return "not_a_number"
        if not grades_its_answer(env, variant) or (self.math_verify and not math_verify_reads(stated)):
            return "unverifiable"
        if arithmetic_disagrees(text, stated):
            return "wrong_answer"
        return ""


def llm_variants(trainer: Any) -> LLMVariants:
    """The run's LLM generator (`curriculum_generator_*` knobs), its model resolved where every LLM a run asks
    outside its rubric is (`generation_model`; "policy" is a frozen copy of the starting weights: the policy
    itself changes under training), loaded into the run's judge pool so it is closed with it."""
    from trainers.rubrics.ecosystem import MathVerifyCriterion
    from trainers.rubrics.judge_models import JudgePool, describe_model, generation_model

    cfg = trainer.config
    if trainer.judges is None:
        trainer.judges = JudgePool(
            policy_model=cfg.model, device=trainer.learner.device, secrets=getattr(trainer, "_secrets", None)
        )
    ask = generation_model(
        trainer.judges,
        model=cfg.curriculum_generator_model,
        base_url=cfg.curriculum_generator_base_url,
        api_key_secret=cfg.curriculum_generator_api_key_secret,
        max_tokens=cfg.curriculum_generator_max_new_tokens,
    )
    math = any(isinstance(b.criterion, MathVerifyCriterion) for b in getattr(trainer.rubric, "criteria", []))
    trainer.log(
        "curriculum from failures: variants written by "
        f"{describe_model(cfg.curriculum_generator_model, cfg.curriculum_generator_base_url)}, kept when the "
        "environment grades their answers" + (" and math-verify reads them" if math else "")
    )
    return LLMVariants(
        ask,
        trainer.make_env,
        model=cfg.curriculum_generator_model,
        held_out=[t.prompt for t in trainer.sampler.eval_tasks],
        math_verify=math,
        log=trainer.log,
    )

"""LLM-as-judge criterion: any chat model, reached through a generation callable injected at build time.

The callable has the interface `generate(prompts: list[str]) -> list[str]` (one reply per prompt);
the trainer wraps its policy or a separate judge model in one. Nothing here imports torch. Replies
are cached by a hash of (model, template, inputs), so re-scoring the same response is free and a
rubric preview can show the same verdict the trainer saw in the same process.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from trainers.rubrics.base import Criterion, CriterionResult, CriterionUnavailable, regex_error
from trainers.rubrics.kinds import DEFAULT_JUDGE_TEMPLATE
from trainers.types import Trajectory

GenerateFn = Callable[[list[str]], list[str]]

TEMPLATE_FIELDS = ("prompt", "response", "answer", "transcript")
_CACHE_SIZE = 10_000
_REPLY_CACHE: OrderedDict[str, str] = OrderedDict()


def render_transcript(trajectory: Trajectory) -> str:
    """The conversation after the system prompt, one 'role: text' block per turn."""
    return "\n".join(f"{t.role}: {t.text}" for t in trajectory.turns if t.role != "system")


def template_error(template: Any) -> str | None:
    if not isinstance(template, str):
        return None
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        return f"invalid template: {exc} (write {{{{ and }}}} for literal braces)"
    unknown = sorted({f for f in fields if f not in TEMPLATE_FIELDS})
    if unknown:
        return f"unknown field(s) {', '.join('{' + f + '}' for f in unknown)}; use {', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)}"
    if "response" not in fields and "transcript" not in fields:
        return "the template must include {response} or {transcript}"
    return None


class LLMJudge(Criterion):
    def __init__(
        self,
        model: str = "policy",
        template: str = DEFAULT_JUDGE_TEMPLATE,
        score_pattern: str = r"(?i)score\s*[:=]\s*(-?\d+(?:\.\d+)?)",
        min_score: float = 0.0,
        max_score: float = 10.0,
        normalize: bool = True,
        on_parse_failure: float = 0.0,
        generate: GenerateFn | Mapping[str, GenerateFn] | None = None,
        only_when_checks_pass: bool = False,
    ) -> None:
        self.model, self.template = model, template
        self.only_when_checks_pass = only_when_checks_pass  # the rubric applies it (scoring.py)
        self.score_regex = re.compile(score_pattern)
        self.min_score, self.max_score, self.normalize = min_score, max_score, normalize
        self.on_parse_failure = on_parse_failure
        self.generate: GenerateFn | None = None
        self.attach_models(generate=generate)

    def attach_models(
        self, *, generate: GenerateFn | Mapping[str, GenerateFn] | None = None, **_: Any
    ) -> None:
        """Inject the judge: a callable, or a mapping from model name to callable."""
        if isinstance(generate, Mapping):
            generate = generate.get(self.model)
        if generate is not None:
            self.generate = generate

    @classmethod
    def check_config(cls, params: dict[str, Any]) -> dict[str, list[str]]:
        errors: dict[str, list[str]] = {}
        problem = template_error(params.get("template", DEFAULT_JUDGE_TEMPLATE))
        if problem:
            errors["template"] = [problem]
        pattern = params.get("score_pattern")
        if isinstance(pattern, str):
            problem = regex_error(pattern)
            if problem is None and re.compile(pattern).groups < 1:
                problem = "needs a capturing group ( … ) around the score"
            if problem:
                errors["score_pattern"] = [problem]
        low, high = params.get("min_score", 0.0), params.get("max_score", 10.0)
        if isinstance(low, (int, float)) and isinstance(high, (int, float)) and high <= low:
            errors["max_score"] = ["must be greater than the lowest score"]
        return errors

    def prompt_for(self, trajectory: Trajectory) -> str:
        answer = trajectory.task.answer
        return self.template.format(
            prompt=trajectory.task.prompt,
            response=trajectory.final_answer,
            answer="" if answer is None else answer,
            transcript=render_transcript(trajectory),
        )

    def cache_key(self, prompt: str) -> str:
        return hashlib.sha256(json.dumps([self.model, self.template, prompt]).encode()).hexdigest()

    def parse_score(self, reply: str) -> float | None:
        matches = self.score_regex.findall(reply)
        if not matches:
            return None
        last = matches[-1]
        try:
            return float(last[0] if isinstance(last, tuple) else last)
        except ValueError:
            return None

    def score(self, trajectory: Trajectory) -> CriterionResult:
        return self.score_many([trajectory])[0]

    def score_many(self, trajectories: list[Trajectory]) -> list[CriterionResult]:
        prompts = [self.prompt_for(t) for t in trajectories]
        keys = [self.cache_key(p) for p in prompts]
        missing = sorted({k: p for k, p in zip(keys, prompts, strict=True) if k not in _REPLY_CACHE}.items())
        cached = {k for k in keys if k in _REPLY_CACHE}
        if missing:
            if self.generate is None:
                raise CriterionUnavailable(f"LLM judge {self.model!r} has no model attached in this process.")
            replies = self.generate([p for _, p in missing])
            if len(replies) != len(missing):
                raise RuntimeError(f"Judge returned {len(replies)} replies for {len(missing)} prompts.")
            for (key, _), reply in zip(missing, replies, strict=True):
                _REPLY_CACHE[key] = reply
                _REPLY_CACHE.move_to_end(key)
            while len(_REPLY_CACHE) > _CACHE_SIZE:
                _REPLY_CACHE.popitem(last=False)
        return [self._result(_REPLY_CACHE[key], key, key in cached) for key in keys]

    def _result(self, reply: str, key: str, cache_hit: bool) -> CriterionResult:
        provenance = {"judge_model": self.model, "cache_key": key, "cache_hit": cache_hit}
        value = self.parse_score(reply)
        if value is None:
            return CriterionResult(
                self.on_parse_failure,
                f"No score found in the judge's reply: {reply.strip()[:1000]}",
                provenance=provenance,
            )
        raw = value
        if self.normalize:
            clipped = min(max(value, self.min_score), self.max_score)
            raw = (clipped - self.min_score) / (self.max_score - self.min_score)
        return CriterionResult(raw, f"Judge score {value:g}: {reply.strip()[:1000]}", provenance=provenance)


def clear_judge_cache() -> None:
    _REPLY_CACHE.clear()


# --- the judge as an annotator: one pair, shown in one order -------------------------------------------
#
# A preference queue can ask an `llm_judge` criterion's model to annotate it like a person would: two
# responses side by side, "which is better?". The criterion supplies the model; the prompt is this one,
# with the queue's own instructions (what the human annotators read), so judge and humans answer the same
# question. The dashboard asks each pair twice, A shown first and B shown first; position bias shows up
# as the two orders disagreeing.

PAIRWISE_TEMPLATE = (
    "Two responses to the same task follow. Decide which one is better.\n"
    "{instructions}"
    "Task:\n{prompt}\n\n"
    "Response 1:\n{first}\n\n"
    "Response 2:\n{second}\n\n"
    "Which response is better, 1 or 2?"
)
# Written at the start of the judge's reply (after the chat template's assistant header), so even a very
# small model answers with the number straight away; the reply is read on from there.
PAIRWISE_REPLY_PREFIX = "The better response is Response"
PAIRWISE_MAX_NEW_TOKENS = 4
_PAIRWISE_VERDICT = re.compile(r"\s*(?:#\s*|number\s*)?([12])(?!\d)", re.IGNORECASE)


def pairwise_prompt(*, prompt: str, first: str, second: str, instructions: str = "") -> str:
    """The question one pair asks the judge, `first` shown as Response 1."""
    instructions = instructions.strip()
    return PAIRWISE_TEMPLATE.format(
        instructions=f"Instructions:\n{instructions}\n\n" if instructions else "",
        prompt=prompt.strip(),
        first=first.strip(),
        second=second.strip(),
    )


def parse_pairwise(reply: str) -> int | None:
    """1 or 2: the response the judge's reply (after PAIRWISE_REPLY_PREFIX) names; None when it names
    neither."""
    found = _PAIRWISE_VERDICT.match(reply)
    return int(found.group(1)) if found else None


def backend_generate(
    backend: Any, *, reply_prefix: str = "", max_new_tokens: int = PAIRWISE_MAX_NEW_TOKENS
) -> GenerateFn:
    """A judge's `generate` over a generation backend (trainers.backends): each prompt is one user message
    in the model's chat template, the reply starts with `reply_prefix`, greedy decoding."""
    tokenizer = backend.tokenizer

    def generate(prompts: list[str]) -> list[str]:
        token_ids = []
        for prompt in prompts:
            chat = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
            )
            token_ids.append(tokenizer(chat + reply_prefix, add_special_tokens=False)["input_ids"])
        completions = backend.generate(token_ids, max_new_tokens=max_new_tokens, temperature=0.0)
        return [completion.text for completion in completions]

    return generate

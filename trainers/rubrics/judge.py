"""LLM-as-judge criterion: any chat model, reached through a generation callable injected at build time.

The callable has the interface `generate(prompts: list[str]) -> list[str]` (one reply per prompt).
Where the model runs is the criterion's `model` / `base_url` params; `trainers.rubrics.judge_models`
makes the callable for them (a frozen copy of the policy, a model loaded on the worker, an
OpenAI-compatible endpoint) and the trainer attaches it. Nothing here imports torch. Replies are cached
by a hash of (model, template, inputs), so re-scoring the same response is free and a rubric preview can
show the same verdict the trainer saw in the same process.

Two modes: `per_trajectory` asks one prompt per response for an absolute score; `group` asks one prompt
holding the whole GRPO group and reads one score per answer (ART's RULER: relative scores are what GRPO
uses anyway, and one call per group is cheaper than one per rollout).
"""

from __future__ import annotations

import hashlib
import json
import re
import string
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from trainers.rubrics.base import Criterion, CriterionResult, CriterionUnavailable, regex_error
from trainers.rubrics.kinds import (
    DEFAULT_GROUP_SCORE_PATTERN,
    DEFAULT_GROUP_TEMPLATE,
    DEFAULT_JUDGE_TEMPLATE,
    DEFAULT_SCORE_PATTERN,
    SECRET_NAME_PATTERN,
)
from trainers.types import Trajectory

GenerateFn = Callable[[list[str]], list[str]]

TEMPLATE_FIELDS = ("prompt", "response", "answer", "transcript")
GROUP_TEMPLATE_FIELDS = ("prompt", "answer", "responses")
MODES = ("per_trajectory", "group")
_CACHE_SIZE = 10_000
_REPLY_CACHE: OrderedDict[str, str] = OrderedDict()
_EXPLANATION_CHARS = 1000


def render_transcript(trajectory: Trajectory) -> str:
    """The conversation after the system prompt, one 'role: text' block per turn."""
    return "\n".join(f"{t.role}: {t.text}" for t in trajectory.turns if t.role != "system")


def render_responses(trajectories: list[Trajectory]) -> str:
    """A group's final answers as the group template's {responses}: 'Answer 1:\n…' blocks."""
    return "\n\n".join(f"Answer {i}:\n{t.final_answer.strip()}" for i, t in enumerate(trajectories, 1))


def _template_fields(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]


def template_error(
    template: Any, fields: tuple[str, ...] = TEMPLATE_FIELDS, needs: tuple[str, ...] = ()
) -> str | None:
    if not isinstance(template, str):
        return None
    try:
        used = _template_fields(template)
    except ValueError as exc:
        return f"invalid template: {exc} (write {{{{ and }}}} for literal braces)"
    unknown = sorted({f for f in used if f not in fields})
    if unknown:
        return f"unknown field(s) {', '.join('{' + f + '}' for f in unknown)}; use {', '.join('{' + f + '}' for f in fields)}"
    needs = needs or (("response", "transcript") if fields == TEMPLATE_FIELDS else ("responses",))
    if not any(f in used for f in needs):
        return f"the template must include {' or '.join('{' + f + '}' for f in needs)}"
    return None


@dataclass
class JudgeUsage:
    """What a judge cost since it was last read: model calls (prompts sent), tokens, seconds waited."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cache_hits: int = 0

    def add(self, other: Mapping[str, Any]) -> None:
        for key in ("calls", "prompt_tokens", "completion_tokens", "cache_hits"):
            setattr(self, key, getattr(self, key) + int(other.get(key) or 0))
        self.seconds += float(other.get("seconds") or 0.0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def judge_where(params: Mapping[str, Any]) -> str:
    """Where an llm_judge criterion's model runs: "endpoint" (base_url set), "policy" or "model"."""
    if str(params.get("base_url") or "").strip():
        return "endpoint"
    return "policy" if str(params.get("model") or "policy") == "policy" else "model"


class LLMJudge(Criterion):
    def __init__(
        self,
        model: str = "policy",
        template: str = DEFAULT_JUDGE_TEMPLATE,
        score_pattern: str = DEFAULT_SCORE_PATTERN,
        min_score: float = 0.0,
        max_score: float = 10.0,
        normalize: bool = True,
        on_parse_failure: float = 0.0,
        generate: GenerateFn | Mapping[str, GenerateFn] | None = None,
        only_when_checks_pass: bool = False,
        base_url: str = "",
        api_key_secret: str = "",
        mode: str = "per_trajectory",
        group_template: str = DEFAULT_GROUP_TEMPLATE,
        group_score_pattern: str = DEFAULT_GROUP_SCORE_PATTERN,
        max_new_tokens: int = 256,
        reply_prefix: str = "",
        timeout_s: float = 60.0,
    ) -> None:
        self.model, self.template = model, template
        self.base_url, self.api_key_secret = base_url.strip(), api_key_secret
        self.mode, self.group_template = mode, group_template
        self.max_new_tokens, self.reply_prefix, self.timeout_s = max_new_tokens, reply_prefix, timeout_s
        self.only_when_checks_pass = only_when_checks_pass  # the rubric applies it (scoring.py)
        self.score_regex = re.compile(score_pattern)
        self.group_score_regex = re.compile(group_score_pattern)
        self.min_score, self.max_score, self.normalize = min_score, max_score, normalize
        self.on_parse_failure = on_parse_failure
        self.generate: GenerateFn | None = None
        self.usage = JudgeUsage()
        self._prefetched: set[str] = set()  # asked ahead by prefetch(): not cache hits when scored
        self.attach_models(generate=generate)

    @property
    def where(self) -> str:
        return judge_where({"model": self.model, "base_url": self.base_url})

    def attach_models(
        self, *, generate: GenerateFn | Mapping[str, GenerateFn] | None = None, **_: Any
    ) -> None:
        """Inject the judge: a callable, or a mapping from model name to callable."""
        if isinstance(generate, Mapping):
            generate = generate.get(self.model)
        if generate is not None:
            self.generate = generate

    def take_usage(self) -> JudgeUsage:
        """The cost since the last call (the trainer reads it once per step)."""
        usage, self.usage = self.usage, JudgeUsage()
        return usage

    @classmethod
    def check_config(cls, params: dict[str, Any]) -> dict[str, list[str]]:
        errors: dict[str, list[str]] = {}
        problem = template_error(params.get("template", DEFAULT_JUDGE_TEMPLATE))
        if problem:
            errors["template"] = [problem]
        problem = template_error(params.get("group_template", DEFAULT_GROUP_TEMPLATE), GROUP_TEMPLATE_FIELDS)
        if problem:
            errors["group_template"] = [problem]
        for key, groups in (("score_pattern", 1), ("group_score_pattern", 2)):
            pattern = params.get(key)
            if isinstance(pattern, str):
                problem = regex_error(pattern)
                if problem is None and re.compile(pattern).groups < groups:
                    problem = (
                        "needs a capturing group ( … ) around the score"
                        if groups == 1
                        else "needs two capturing groups: the answer's number, then its score"
                    )
                if problem:
                    errors[key] = [problem]
        low, high = params.get("min_score", 0.0), params.get("max_score", 10.0)
        if isinstance(low, (int, float)) and isinstance(high, (int, float)) and high <= low:
            errors["max_score"] = ["must be greater than the lowest score"]
        base_url = str(params.get("base_url") or "").strip()
        secret = params.get("api_key_secret") or ""
        if base_url and not re.match(r"^https?://[^\s/]+", base_url):
            errors["base_url"] = ["must be an http:// or https:// URL, e.g. https://api.example.com/v1"]
        if isinstance(secret, str) and secret and not re.match(SECRET_NAME_PATTERN, secret):
            errors["api_key_secret"] = [
                "a secret name is letters, digits and _ (not starting with a digit), at most 64 characters"
            ]
        if secret and not base_url:
            errors["api_key_secret"] = ["only an endpoint takes a key: set the base URL or leave this empty"]
        if base_url and str(params.get("model", "policy")) == "policy":
            errors["model"] = ["an endpoint needs the name of its model ('policy' is the run's own model)"]
        return errors

    # -- prompts -----------------------------------------------------------------------------------------

    def prompt_for(self, trajectory: Trajectory) -> str:
        answer = trajectory.task.answer
        return self.template.format(
            prompt=trajectory.task.prompt,
            response=trajectory.final_answer,
            answer="" if answer is None else answer,
            transcript=render_transcript(trajectory),
        )

    def group_prompt_for(self, trajectories: list[Trajectory]) -> str:
        first = trajectories[0].task
        return self.group_template.format(
            prompt=first.prompt,
            answer="" if first.answer is None else first.answer,
            responses=render_responses(trajectories),
        )

    def cache_key(self, prompt: str) -> str:
        template = self.group_template if self.mode == "group" else self.template
        return hashlib.sha256(
            json.dumps([self.model, self.base_url, self.reply_prefix, template, prompt]).encode()
        ).hexdigest()

    # -- replies -----------------------------------------------------------------------------------------

    def parse_score(self, reply: str) -> float | None:
        matches = self.score_regex.findall(reply)
        if not matches:
            return None
        last = matches[-1]
        try:
            return float(last[0] if isinstance(last, tuple) else last)
        except ValueError:
            return None

    def parse_group_scores(self, reply: str, size: int) -> list[float | None]:
        """One score per answer 1…size (None where the reply gives none); the last line for an answer wins."""
        scores: list[float | None] = [None] * size
        for match in self.group_score_regex.finditer(reply):
            try:
                index, value = int(match.group(1)), float(match.group(2))
            except (TypeError, ValueError):
                continue
            if 1 <= index <= size:
                scores[index - 1] = value
        return scores

    def prefetch(self, groups: list[list[Trajectory]]) -> None:
        """Ask the judge about several groups in one batch (a step's groups, an evaluation's tasks), so
        scoring them group by group afterwards finds every reply cached: one model call instead of one
        per group."""
        if self.mode == "group":
            prompts = [self.group_prompt_for(g) for g in groups if g]
        else:
            prompts = [self.prompt_for(t) for g in groups for t in g]
        fresh = {self.cache_key(p) for p in prompts} - set(_REPLY_CACHE)
        self._ask(prompts)
        self._prefetched |= fresh

    def _ask(self, prompts: list[str]) -> tuple[list[str], list[bool]]:
        """The replies to `prompts` (cached ones from the cache; the others in one batch) and which were
        cache hits."""
        keys = [self.cache_key(p) for p in prompts]
        cached = [k in _REPLY_CACHE and k not in self._prefetched for k in keys]
        self._prefetched -= set(keys)
        missing = sorted({k: p for k, p in zip(keys, prompts, strict=True) if k not in _REPLY_CACHE}.items())
        self.usage.cache_hits += sum(cached)
        if missing:
            if self.generate is None:
                raise CriterionUnavailable(f"LLM judge {self.model!r} has no model attached in this process.")
            started = time.perf_counter()
            replies = self.generate([p for _, p in missing])
            self.usage.seconds += time.perf_counter() - started
            self.usage.calls += len(missing)
            self.usage.add(
                {
                    k: v
                    for k, v in (getattr(self.generate, "last_usage", None) or {}).items()
                    if k.endswith("_tokens")
                }
            )
            if len(replies) != len(missing):
                raise RuntimeError(f"Judge returned {len(replies)} replies for {len(missing)} prompts.")
            for (key, _), reply in zip(missing, replies, strict=True):
                _REPLY_CACHE[key] = reply
                _REPLY_CACHE.move_to_end(key)
            while len(_REPLY_CACHE) > _CACHE_SIZE:
                _REPLY_CACHE.popitem(last=False)
        return [_REPLY_CACHE[k] for k in keys], cached

    def score(self, trajectory: Trajectory) -> CriterionResult:
        return self.score_many([trajectory])[0]

    def score_many(self, trajectories: list[Trajectory]) -> list[CriterionResult]:
        if self.mode == "group":
            return self._score_group(trajectories)
        prompts = [self.prompt_for(t) for t in trajectories]
        replies, cached = self._ask(prompts)
        return [
            self._result(self.parse_score(reply), reply, self.cache_key(prompt), hit)
            for prompt, reply, hit in zip(prompts, replies, cached, strict=True)
        ]

    def _score_group(self, trajectories: list[Trajectory]) -> list[CriterionResult]:
        if not trajectories:
            return []
        prompt = self.group_prompt_for(trajectories)
        (reply,), (hit,) = self._ask([prompt])
        scores = self.parse_group_scores(reply, len(trajectories))
        key = self.cache_key(prompt)
        return [self._result(value, reply, key, hit, answer=i) for i, value in enumerate(scores, 1)]

    def _result(
        self, value: float | None, reply: str, key: str, cache_hit: bool, answer: int | None = None
    ) -> CriterionResult:
        provenance: dict[str, Any] = {
            "judge_model": self.model,
            "judge_where": self.where,
            "judge_mode": self.mode,
            "cache_key": key,
            "cache_hit": cache_hit,
        }
        if self.base_url:
            provenance["judge_endpoint"] = self.base_url
        said = reply.strip()[:_EXPLANATION_CHARS]
        which = f" for answer {answer} of the group" if answer is not None else ""
        if value is None:
            return CriterionResult(
                self.on_parse_failure,
                f"No score found{which} in the judge's reply: {said}",
                provenance=provenance,
            )
        raw = value
        if self.normalize:
            clipped = min(max(value, self.min_score), self.max_score)
            raw = (clipped - self.min_score) / (self.max_score - self.min_score)
        return CriterionResult(raw, f"Judge score {value:g}{which}: {said}", provenance=provenance)


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
    """A judge's `generate` over a generation backend (trainers.rollout.backends): each prompt is one user message
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

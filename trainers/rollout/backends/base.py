"""The generation interface every rollout backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from trainers.sdk.cancel import check_cancel

FinishReason = Literal["stop", "eos", "length"]
# A prompt is either token ids (exact, what multi-turn rollouts use) or a chat: a list of
# {"role", "content"} messages rendered with the tokenizer's chat template.
Prompt = Sequence[int] | Sequence[Mapping[str, Any]]


@dataclass
class Completion:
    """One sampled continuation.

    `token_ids` are exactly the sampled tokens (including a final eos or the token that completed a
    stop string), so the trainer can score them without re-tokenizing. `text` is their decoded text
    without special tokens, cut right after the stop string when one matched. `logprobs[i]` is the
    log-probability of `token_ids[i]` under the sampling policy's logits divided by the temperature
    (before top-p), the same quantity the learner computes. `entropies[i]` (when the call asked for
    `entropy_tokens`) is the entropy in nats of that same distribution at token i, for the first
    `entropy_tokens` tokens: what branching rollouts (`trainers.rollout.branching`) measure.
    """

    token_ids: list[int]
    text: str
    finish_reason: FinishReason
    logprobs: list[float] | None = None
    stop: str | None = None  # the stop string that ended it, when finish_reason == "stop"
    entropies: list[float] | None = None


@dataclass
class Request:
    """One row's next turn for `GenerationBackend.generate_continuous`: the tokens so far, how many it may
    add, and the caller's handle on the row (an episode)."""

    prompt_ids: list[int]
    max_new_tokens: int
    key: Any = None
    order: int = 0  # the row's place among the call's rows: a row's next turn keeps its first turn's


# Called as a request's completion is ready; returns the same row's next request, or None when it is over.
OnFinish = Callable[[Request, Completion], "Request | None"]


class GenerationBackend(ABC):
    """Samples completions; `update_weights` loads new policy weights between steps."""

    tokenizer: Any

    @abstractmethod
    def generate(
        self,
        prompts: Sequence[Prompt],
        n: int = 1,
        max_new_tokens: int = 128,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
        entropy_tokens: int = 0,
    ) -> list[Completion]:
        """`n` completions per prompt, prompt-major: [p0s0, p0s1, …, p1s0, …]; with `entropy_tokens`,
        each completion's `entropies` of its first that many tokens."""

    def generate_continuous(
        self,
        requests: Sequence[Request],
        on_finish: OnFinish,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
        entropy_tokens: int = 0,
    ) -> None:
        """Decode every request, one completion each, and call `on_finish(request, completion)` as each
        is ready; the request it returns (the row's next turn: its prompt, completion and what the
        environment added) is decoded too, until none comes back.

        A backend that schedules rows (the transformers backend) starts a row's next turn while the others
        decode. This default schedules turns: the pending requests generate together, one `generate` call
        per budget (`max_new_tokens`), and the next round starts when all have finished — the seeds of
        those calls (`seed + 7919 × round + budget`) are those the episode driver always used."""
        pending = sorted(requests, key=lambda r: r.order)
        round_ = 0
        while pending:
            by_budget: dict[int, list[Request]] = {}
            for request in pending:
                by_budget.setdefault(request.max_new_tokens, []).append(request)
            following: list[Request] = []
            for budget, batch in sorted(by_budget.items()):
                check_cancel()  # between generation batches (trainers.sdk.cancel)
                completions = self.generate(
                    [r.prompt_ids for r in batch],
                    n=1,
                    max_new_tokens=budget,
                    temperature=temperature,
                    top_p=top_p,
                    stop=stop,
                    seed=None if seed is None else seed + 7919 * round_ + budget,
                    # Only when asked: a backend of before entropies (a test's replay) takes no such keyword.
                    **({"entropy_tokens": entropy_tokens} if entropy_tokens else {}),
                )
                for request, completion in zip(batch, completions, strict=True):
                    follow = on_finish(request, completion)
                    if follow is not None:
                        following.append(follow)
            pending = sorted(following, key=lambda r: r.order)
            round_ += 1

    @abstractmethod
    def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Load (a subset of) policy weights, keyed like the policy's state_dict."""

    def release_weights(self) -> bool:
        """Give back the memory of the generation weights until the next `update_weights`, which must then
        bring all of them; True if it did. By default nothing is released (vLLM, a remote engine, a model
        shared with the learner)."""
        return False

    @contextmanager
    def session(self) -> Iterator[None]:
        """Calls inside may reuse what earlier calls inside computed; the weights must not change inside.
        `generate_rollouts` opens one per batch of episodes. Nothing to reuse by default (vLLM caches
        prefixes itself)."""
        yield

    def close(self) -> None:  # noqa: B027 — optional hook, most backends hold nothing to release
        """Release what the backend holds (processes, GPU memory)."""

    def prompt_token_ids(self, prompt: Prompt) -> list[int]:
        """Token ids of one prompt; chats get the chat template with the generation prompt."""
        if len(prompt) and isinstance(prompt[0], Mapping):
            rendered = self.tokenizer.apply_chat_template(
                list(prompt), add_generation_prompt=True, tokenize=False
            )
            return list(self.tokenizer(rendered, add_special_tokens=False)["input_ids"])
        return [int(t) for t in prompt]  # type: ignore[arg-type]


def stop_index(text: str, stops: Sequence[str]) -> tuple[int, str] | None:
    """(end index of the earliest stop string in `text`, that stop) or None."""
    best: tuple[int, str] | None = None
    for stop in stops:
        found = text.find(stop)
        if found >= 0 and (best is None or found + len(stop) < best[0]):
            best = (found + len(stop), stop)
    return best

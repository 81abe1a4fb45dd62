"""The KV states of token prefixes the transformers backend already computed, kept for one session.

A multi-turn episode asks for its next turn with everything so far — prompt, sampled turns, tool
results — and only the last few dozen tokens are new. Encoding the whole conversation again cost the
demo most of its generation time (16 samples × ~750 tokens re-encoded at every turn). Inside a session
(`TransformersBackend.session()`, entered by `generate_rollouts` for one batch of episodes, while the
weights stay fixed) the backend keeps each finished row's keys and values here, keyed by the tokens they
encode, and a later prompt that extends one of them encodes only its new tokens: what vLLM calls
automatic prefix caching. Outside a session nothing is kept, so nothing can go stale when the learner
updates the weights in place.

Memory is bounded by a byte budget (least recently used entries go first); an entry is dropped as soon as
a prompt extended it (that row's next entry supersedes it). A prompt that finds no entry is encoded in
full, so the store only ever saves time and never changes which tokens are sampled from which context.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import torch

# A prefix shorter than this is not worth a forward pass of its own (see `common_prefix`).
MIN_SHARED_PREFIX = 32


class PrefixStore:
    """Token prefix → its KV states, one tensor (layers, 2, kv heads, length, head dim) per entry."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self.entries: OrderedDict[tuple[int, ...], torch.Tensor] = OrderedDict()
        self.bytes = 0
        # What the store saved, for the step's metrics and the tests: tokens served from it and tokens
        # that had to be encoded.
        self.reused_tokens = 0
        self.encoded_tokens = 0

    def __len__(self) -> int:
        return len(self.entries)

    def longest(self, prompt: Sequence[int]) -> tuple[tuple[int, ...], torch.Tensor] | None:
        """The longest stored prefix of `prompt` that leaves at least one token to encode (the forward
        pass over the last token gives the logits of the next), with its states; None without one."""
        best: tuple[tuple[int, ...], torch.Tensor] | None = None
        for key, states in self.entries.items():
            if len(key) < len(prompt) and (best is None or len(key) > len(best[0])):
                if tuple(prompt[: len(key)]) == key:
                    best = (key, states)
        return best

    def put(self, key: tuple[int, ...], states: torch.Tensor) -> None:
        if not key:
            return
        self.drop(key)
        size = states.numel() * states.element_size()
        if size > self.budget_bytes:
            return
        self.entries[key] = states
        self.bytes += size
        while self.bytes > self.budget_bytes:
            _, evicted = self.entries.popitem(last=False)
            self.bytes -= evicted.numel() * evicted.element_size()

    def drop(self, key: tuple[int, ...]) -> None:
        states = self.entries.pop(key, None)
        if states is not None:
            self.bytes -= states.numel() * states.element_size()


def common_prefix(prompts: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """The tokens every prompt starts with (not the whole of any prompt: one token is left to encode)."""
    if len(prompts) < 2:
        return ()
    shortest = min(len(p) for p in prompts) - 1
    first = prompts[0]
    length = 0
    while length < shortest and all(p[length] == first[length] for p in prompts[1:]):
        length += 1
    return tuple(first[:length])

"""Continuous batching for the transformers backend: the decode batch schedules rows, not turns.

Decoding a turn of every episode as one batch made each row wait for the batch's longest: a row whose
turn ended idled until the slowest row stopped, and only then did its tool answer go in and its next turn
start. On a CPU a decode step of one row costs about what sixteen do, so that idling was pure loss. Here a
row that finishes leaves the batch at once (its keys and values go to the session's prefix store), the
caller's `on_finish` steps its environment right away, and the row's next turn — prompt, completion and
the environment's tokens — is prefilled from the stored states (only the new tokens run through the
model) and joins the batch at the next decode step, while the other rows keep decoding.

A joining row's slots are copied into a free row of the batch's buffers (`kv_cache`); the batch's slots
widen when it is longer than the batch so far, and the rows are packed again when holes take more than an
eighth of the slots. The attention mask and per-row positions make each row compute exactly what it would
alone (tested: greedy decoding gives the tokens of the turn-by-turn schedule).

The batch holds at most `wave_bytes` of cache (rows × (prompt + budget) × bytes a token, the rule of
`TransformersBackend._waves`); requests beyond it wait and join as rows leave.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from trainers.models import cache_argument
from trainers.rollout.backends.base import OnFinish, Request
from trainers.rollout.backends.kv_cache import kv_bytes_per_token
from trainers.rollout.backends.sampling import sample_next, stop_window, token_entropy
from trainers.sdk.cancel import check_cancel

# Holes (slots no row uses) the batch tolerates before it packs its rows again: this many, or an eighth of
# the slots, whichever is more. Every decode step attends over all slots; packing costs about one step.
PACK_SLACK = 32


@dataclass
class _Row:
    request: Request
    prompt: tuple[int, ...]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)

    @property
    def remaining(self) -> int:
        return self.request.max_new_tokens - len(self.tokens)


class _Batch:
    """The rows decoding together: their cache, attention mask (with holes), next positions, and the
    logits of each row's next token."""

    def __init__(self, backend: Any) -> None:  # a TransformersBackend (which imports this module)
        self.backend = backend
        self.rows: list[_Row] = []
        self.cache: Any = None
        self.mask = torch.zeros((0, 0), dtype=torch.long)
        self.next_position = torch.zeros((0,), dtype=torch.long)
        self.logits: torch.Tensor | None = None
        self.per_token = kv_bytes_per_token(backend.model)
        # How the schedule went (`TransformersBackend.last_schedule`): rows that joined a running batch
        # shorter than it (into its holes) or longer (the batch widened), and times the rows were packed.
        self.stats = {"joined_shorter": 0, "joined_longer": 0, "packed": 0}

    @property
    def length(self) -> int:
        return int(self.mask.shape[1])

    def admit(self, pending: deque[Request]) -> list[Request]:
        """The pending requests that join now: in order, while the batch's cache stays within the wave
        budget (at least one when the batch is empty)."""
        wave = self.backend.wave_bytes
        if not self.per_token or wave <= 0:
            taken = list(pending)
            pending.clear()
            return taken
        longest = max((len(r.prompt) + r.request.max_new_tokens for r in self.rows), default=0)
        taken = []
        while pending:
            need = max(longest, len(pending[0].prompt_ids) + pending[0].max_new_tokens)
            count = len(self.rows) + len(taken)
            if count and (count + 1) * need * self.per_token > wave:
                break
            taken.append(pending.popleft())
            longest = need
        return taken

    def join(self, requests: list[Request]) -> None:
        """Prefill `requests` (identical prompts once; stored prefixes reused) and add them as rows."""
        unique: dict[tuple[int, ...], int] = {}
        for r in requests:
            unique.setdefault(tuple(r.prompt_ids), len(unique))
        prompts = list(unique)
        device = self.backend.device
        source = torch.tensor([unique[tuple(r.prompt_ids)] for r in requests], device=device)
        new_rows = [_Row(r, tuple(r.prompt_ids)) for r in requests]
        budget = max(r.max_new_tokens for r in requests)
        if not self.rows:  # a fresh batch: the prefill's cache is the batch's
            cache, mask, positions, logits = self.backend._prefill(prompts, budget)
            if len(prompts) < len(requests):
                cache.batch_select_indices(source)
            self.cache, self.rows = cache, new_rows
            self.mask, self.next_position, self.logits = (
                mask[source],
                positions[source, -1] + 1,
                logits[source],
            )
            return
        cache, mask, positions, logits = self.backend._prefill(prompts, 0)
        width = max(self.length, mask.shape[1])
        self.stats["joined_longer" if mask.shape[1] > self.length else "joined_shorter"] += len(requests)
        slots = width + max(max(r.remaining for r in self.rows), budget)
        rows = len(self.rows) + len(requests)
        for layer, source_layer in zip(self.cache.layers, cache.layers, strict=True):
            have = layer._keys.shape[-2]
            layer.reserve(rows, slots if slots <= have else max(slots, have + have // 4))
            layer.extend(width)
            layer.add_rows(source_layer, source)
        pad = torch.nn.functional.pad
        self.mask = torch.cat(
            [pad(self.mask, (0, width - self.length)), pad(mask[source], (0, width - mask.shape[1]))]
        )
        self.next_position = torch.cat([self.next_position, positions[source, -1] + 1])
        assert self.logits is not None
        self.logits = torch.cat([self.logits, logits[source]])
        self.rows += new_rows

    def leave(self, gone: list[int], chosen: torch.Tensor) -> torch.Tensor:
        """Drop rows `gone`: the last row takes each one's place (one row copied, not the whole cache).
        Returns `chosen` (a token per row) for the rows that stay, in their new order."""
        order = list(range(len(self.rows)))
        for i in sorted(gone, reverse=True):  # the last row is never one still to drop
            last = len(order) - 1
            for layer in self.cache.layers:
                if i != last:
                    layer.move_row(last, i)
                layer.drop_last_rows(1)
            order[i] = order[last]
            order.pop()
        index = torch.tensor(order, dtype=torch.long, device=self.mask.device)
        self.rows = [self.rows[j] for j in order]
        self.mask, self.next_position = self.mask[index], self.next_position[index]
        return chosen[index]

    def pack_if_sparse(self) -> None:
        """Pack every row's slots right-aligned again when holes take too many of them."""
        if not self.rows:
            return
        counts = self.mask.sum(dim=1)
        longest = int(counts.max())
        if self.length - longest <= max(PACK_SLACK, self.length // 8):
            return
        live = [row.nonzero().squeeze(-1) for row in self.mask]
        self.stats["packed"] += 1
        for layer in self.cache.layers:
            layer.pack(live, longest)
        slot = torch.arange(longest, device=self.mask.device)
        self.mask = (slot[None, :] >= (longest - counts)[:, None]).to(self.mask.dtype)

    def decode(self, chosen: torch.Tensor) -> None:
        """Feed each row its sampled token: the logits of the next."""
        ones = torch.ones((len(self.rows), 1), dtype=self.mask.dtype, device=self.mask.device)
        self.mask = torch.cat([self.mask, ones], dim=1)
        model = self.backend.model
        out = model(
            input_ids=chosen[:, None],
            attention_mask=self.mask,
            position_ids=self.next_position[:, None],
            **cache_argument(model, self.cache),
            use_cache=True,
        )
        self.logits = out.logits[:, -1]
        self.next_position = self.next_position + 1


def decode_continuous(
    backend: Any,
    requests: Sequence[Request],
    on_finish: OnFinish,
    *,
    temperature: float,
    top_p: float,
    stops: list[str],
    seed: int | None,
    entropy_tokens: int,
) -> None:
    """`TransformersBackend.generate_continuous`: decode until no row is left and no request waits."""
    generator = None if seed is None else torch.Generator(device=backend.device).manual_seed(int(seed))
    pending = deque(sorted(requests, key=lambda r: r.order))
    batch = _Batch(backend)
    backend.last_schedule = batch.stats
    window = stop_window(stops)
    while pending or batch.rows:
        check_cancel()  # every decode step: a cancel lands mid-turn (trainers.sdk.cancel)
        with backend.computing():
            batch.pack_if_sparse()
            joining = batch.admit(pending)
            if joining:
                batch.join(joining)
            assert batch.logits is not None
            chosen, chosen_logprobs = sample_next(batch.logits, temperature, top_p, generator)
            measure = any(len(row.tokens) < entropy_tokens for row in batch.rows)
            entropy = token_entropy(batch.logits, temperature).tolist() if measure else []
        finished: list[tuple[int, _Row, tuple[str, str | None]]] = []
        for i, (row, token, logprob) in enumerate(
            zip(batch.rows, chosen.tolist(), chosen_logprobs.tolist(), strict=True)
        ):
            if len(row.tokens) < entropy_tokens:
                row.entropies.append(entropy[i])
            row.tokens.append(token)
            row.logprobs.append(logprob)
            reason = backend.row_finish(row.tokens, row.request.max_new_tokens, stops, window)
            if reason is not None:
                finished.append((i, row, reason))
        if finished:
            with backend.computing():
                if backend.prefixes is not None:  # the row's next turn starts from these states
                    for i, row, _ in finished:
                        backend._keep_states(batch.cache, batch.mask, i, row.prompt + tuple(row.tokens[:-1]))
                chosen = batch.leave([i for i, _, _ in finished], chosen)
            for _, row, reason in finished:  # the environments step while no model work is under way
                completion = backend.completion(
                    row.tokens, row.logprobs, reason, row.entropies if entropy_tokens else None
                )
                follow = on_finish(row.request, completion)
                if follow is not None:
                    pending.append(follow)
        if batch.rows:
            with backend.computing():
                batch.decode(chosen)

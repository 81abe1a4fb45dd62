"""Batched sampling with a KV cache on plain transformers models (CPU or GPU).

Our own loop rather than `model.generate`, for three reasons that matter on a small CPU:
- identical prompts (a GRPO group) are prefilled once and their cache rows copied, so a group of 8
  pays for one prompt forward instead of 8;
- finished rows (stopped on `</tool_call>`, `</answer>` or eos) leave the batch at once, so the rest
  decode with a smaller batch instead of carrying padding to the longest completion;
- the sampled tokens' log-probabilities come out for free, the same quantity the learner computes
  (log-softmax of logits / temperature).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import torch

from trainers.models import PolicyPrecision, cache_argument
from trainers.rollout.backends.base import (
    Completion,
    GenerationBackend,
    OnFinish,
    Prompt,
    Request,
    stop_index,
)
from trainers.rollout.backends.continuous import decode_continuous
from trainers.rollout.backends.kv_cache import kv_bytes_per_token, preallocated_cache
from trainers.rollout.backends.packed_linear import PackedLinears, can_pack
from trainers.rollout.backends.prefix_store import MIN_SHARED_PREFIX, PrefixStore, common_prefix
from trainers.rollout.backends.sampling import sample_next, stop_window, token_entropy
from trainers.sdk import cancel
from trainers.sdk.cancel import check_cancel

log = logging.getLogger(__name__)

# What a session may keep of prefixes' keys and values (trainers.rollout.backends.prefix_store). The demo's 16
# episodes of ~800 tokens keep ~600 MB in fp32 at the end of a turn (SmolLM2-135M: 46 KB per token).
DEFAULT_PREFIX_BUDGET_BYTES = 1 << 30
# What one generation wave's KV cache may take (rows × (longest prompt + new tokens) × bytes a token). A
# wider call (an evaluation of 256 tasks × 256 new tokens: ~6 GB of bf16 cache for the 135M model) runs
# as several waves of this size, one after another: the rows' buffers are allocated, seeded with the
# shared prefix and compacted when rows finish, and each of those touches the whole buffer; at 6 GB that
# cost minutes of page faults and copies. The demo's step (16 rows of ~850 tokens) is one wave.
DEFAULT_WAVE_BYTES = 1 << 30


def _contiguous_head_input(model: Any) -> None:
    """Hand the LM head a contiguous input. A prefill keeps each row's last hidden state only
    (`logits_to_keep=1`), a strided (rows, 1, hidden) slice, and PyTorch multiplies such a slice by
    broadcasting the head's weight to every row, copying it: for the 135M model's 49,152 × 576 head in
    bf16 and 13 rows, 650 ms against 5 ms for a contiguous input — ~1-2 s of the demo's step."""
    head = model.get_output_embeddings()
    if head is None or getattr(head, "_studio_contiguous_input", False):
        return
    head.register_forward_pre_hook(lambda module, args: (args[0].contiguous(), *args[1:]) if args else None)
    head._studio_contiguous_input = True


def _decoder_layers(model: Any) -> list[Any]:
    """The model's stack of decoder layers (the first module list of more than one module)."""
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) > 1:
            return list(module)
    return []


@contextmanager
def checking_cancel(model: Any) -> Iterator[None]:
    """`check_cancel()` before every decoder layer while inside, where a cancellation check is installed
    (trainers.sdk.cancel): one forward over a long prompt (a shared system prompt, a wide batch's prefill)
    takes seconds on a busy CPU, and a cancel should not wait for it to end."""
    if not cancel.installed():
        yield
        return
    handles = [layer.register_forward_pre_hook(lambda *_: check_cancel()) for layer in _decoder_layers(model)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def eos_token_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids


class TransformersBackend(GenerationBackend):
    """Generation on a `transformers` causal LM, optionally the very model object the learner trains.

    Sharing the learner's model (the default in a single process) means `update_weights` has
    nothing to do: the next `generate` already sees the new weights.
    """

    def __init__(
        self,
        model: Any = None,
        tokenizer: Any = None,
        model_name: str | None = None,
        device: str = "auto",
        dtype: str = "auto",
        lora: Mapping[str, Any] | None = None,
        precision: PolicyPrecision | None = None,
        prefix_budget_bytes: int = DEFAULT_PREFIX_BUDGET_BYTES,
        wave_bytes: int = DEFAULT_WAVE_BYTES,
        continuous: bool = False,
    ) -> None:
        """`precision`: the trained policy's `trainers.models.PolicyPrecision` when `model` is the policy
        itself, so sampling runs under the learner's autocast; None samples in the model's own dtype.
        `continuous`: `generate_continuous` schedules rows (trainers.rollout.backends.continuous); False (the
        default until the demo step is timed with it on a quiet machine: bench/demo_step.py --turns) schedules
        turns, as `GenerationBackend`'s default does."""
        if model is None or tokenizer is None:
            from trainers.models import DEFAULT_MODEL, load_model, load_tokenizer

            name = model_name or DEFAULT_MODEL
            model = model if model is not None else load_model(name, device, dtype)
            tokenizer = tokenizer if tokenizer is not None else load_tokenizer(name)
            if lora and lora.get("enabled"):
                from trainers.models import apply_lora

                model = apply_lora(model, lora)
        self.model = model
        _contiguous_head_input(model)
        self.tokenizer = tokenizer
        self.precision = precision
        self.eos_ids = eos_token_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else next(iter(self.eos_ids)))
        self.prefix_budget_bytes = prefix_budget_bytes
        self.wave_bytes = wave_bytes
        self.continuous = continuous
        self.prefixes: PrefixStore | None = None  # only inside `session()`
        self._released: dict[str, torch.Size] | None = None  # parameter shapes while `release_weights` holds
        self.last_session = (0, 0)  # (prompt tokens reused, prompt tokens encoded) of the last session
        self.last_schedule: dict[str, int] = {}  # how the last `generate_continuous` went (continuous.py)
        # Models with sliding-window layers keep the stock cache, which cannot start from stored states.
        probe = preallocated_cache(model.config, 1)
        self._seedable = bool(probe.layers) and all(hasattr(layer, "seed") for layer in probe.layers)
        # A bf16 CPU copy that only samples runs its linear layers on oneDNN-packed weights (packed_linear):
        # each decoding product ~1.8× faster; every weight push is packed as it arrives.
        self._packed = PackedLinears(model) if precision is None and can_pack(model) else None
        if self._packed is not None:
            self._packed.pack()

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def release_weights(self) -> bool:
        """Empty the model's parameters until `update_weights` fills them again: a sampling copy of the
        policy (bf16 beside fp32) between generation and the next weight push, while the learner's update
        holds its gradients and activations (0.25 GiB for the 135M model; rebuilding is the push that
        follows every update anyway, plus its allocation). Call it only on a model of the backend's own:
        the trainer does so when it pushes the policy's weights into it after each update."""
        if self._released is None:
            shapes = {}
            if self._packed is not None:  # the owned weights' shapes: their parameters are empty already
                shapes = self._packed.shapes
                self._packed.drop()
            self._released = {}
            for name, p in self.model.named_parameters():  # a tied weight once
                self._released[name] = shapes.get(name, p.shape)
                p.data = torch.empty(0, dtype=p.dtype, device=p.device)
        return True

    def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        if self.prefixes is not None:  # states computed with the old weights
            self.prefixes = PrefixStore(self.prefix_budget_bytes)
        packed = self._packed
        owned = packed.owned if packed is not None else {}
        if self._released is not None:
            missing = [k for k in self._released if k not in state_dict]
            if missing:
                raise KeyError(
                    f"released weights not brought back: {missing[:5]}{'…' if len(missing) > 5 else ''}"
                )
            for name, p in self.model.named_parameters():
                if name not in owned:  # an owned weight comes back packed, never plain
                    p.data = torch.empty(self._released[name], dtype=p.dtype, device=p.device)
            self._released = None
        own = self.model.state_dict()
        unknown = [k for k in state_dict if k not in own]
        if unknown:
            raise KeyError(
                f"weights not in the generation model: {unknown[:5]}{'…' if len(unknown) > 5 else ''}"
            )
        with torch.no_grad():
            for key, value in state_dict.items():
                if packed is not None and packed.load(key, value):
                    continue
                if (
                    own[key].data_ptr() != value.data_ptr()
                ):  # the same tensor when sharing the learner's model
                    own[key].copy_(value)
        if packed is not None:
            packed.pack_shared()

    def state_dict(self) -> dict[str, Any]:
        """The generation weights by name, plain (a packed weight unpacked): what `update_weights` took."""
        weights = dict(self.model.state_dict())
        if self._packed is not None and self._released is None:
            for key in self._packed.owned:
                weights[key] = self._packed.dense(key)
        return weights

    @torch.inference_mode()
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
        if not prompts or n < 1:
            return []
        stops = [s for s in (stop or []) if s]
        generator = None
        if seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(int(seed))
        was_training = self.model.training
        self.model.eval()
        try:
            with (
                self.precision.sampling(self.model) if self.precision is not None else nullcontext(),
                checking_cancel(self.model),
            ):
                return self._generate(
                    [self.prompt_token_ids(p) for p in prompts],
                    n,
                    max_new_tokens,
                    temperature,
                    top_p,
                    stops,
                    generator,
                    entropy_tokens,
                )
        finally:
            self.model.train(was_training)

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
        """A row whose turn ends leaves the decode batch at once, and the next turn `on_finish` returns joins
        it while the others decode (`trainers.rollout.backends.continuous`)."""
        if not self.continuous or not self._seedable:  # the stock cache cannot take rows mid-decode
            super().generate_continuous(
                requests,
                on_finish,
                temperature=temperature,
                top_p=top_p,
                stop=stop,
                seed=seed,
                entropy_tokens=entropy_tokens,
            )
            return
        was_training = self.model.training
        self.model.eval()
        try:
            decode_continuous(
                self,
                requests,
                on_finish,
                temperature=temperature,
                top_p=top_p,
                stops=[s for s in (stop or []) if s],
                seed=seed,
                entropy_tokens=entropy_tokens,
            )
        finally:
            self.model.train(was_training)

    @contextmanager
    def computing(self) -> Iterator[None]:
        """What the model's work in `generate_continuous` runs under, a stretch at a time, so that the
        environment steps between them run outside: inference mode, the learner's autocast, cancel checks."""
        with (
            torch.inference_mode(),
            self.precision.sampling(self.model) if self.precision is not None else nullcontext(),
            checking_cancel(self.model),
        ):
            yield

    @contextmanager
    def session(self) -> Iterator[None]:
        """Calls inside reuse the keys and values of token prefixes that earlier calls inside computed
        (trainers.rollout.backends.prefix_store): a multi-turn episode's next turn encodes only its new tokens,
        and prompts that share a long beginning (a system prompt with its tools and worked example)
        encode it once. The weights must not change inside; a nested session is the outer one."""
        if self.prefixes is not None or not self._seedable or self.prefix_budget_bytes <= 0:
            yield
            return
        self.prefixes = PrefixStore(self.prefix_budget_bytes)
        try:
            yield
        finally:
            self.last_session = (self.prefixes.reused_tokens, self.prefixes.encoded_tokens)
            self.prefixes = None

    def _generate(
        self,
        prompt_ids: list[list[int]],
        n: int,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        stops: list[str],
        generator: torch.Generator | None,
        entropy_tokens: int = 0,
    ) -> list[Completion]:
        waves = self._waves(prompt_ids, n, max_new_tokens)
        if len(waves) > 1:
            return [
                completion
                for wave in waves
                for completion in self._generate(
                    wave, n, max_new_tokens, temperature, top_p, stops, generator, entropy_tokens
                )
            ]
        device = self.device
        unique: dict[tuple[int, ...], int] = {}
        for ids in prompt_ids:
            unique.setdefault(tuple(ids), len(unique))
        unique_prompts = list(unique)
        # Row r of the decode batch is sample r % n of prompt r // n.
        sources = [unique[tuple(ids)] for ids in prompt_ids for _ in range(n)]
        row_source = torch.tensor(sources, device=device)
        total = len(row_source)

        cache, mask, positions, logits = self._prefill(unique_prompts, max_new_tokens)
        logits = logits[row_source]
        cache.batch_select_indices(row_source)
        mask = mask[row_source]
        next_position = positions[row_source, -1] + 1
        row_prompts = [unique_prompts[i] for i in sources]

        tokens: list[list[int]] = [[] for _ in range(total)]
        logprobs: list[list[float]] = [[] for _ in range(total)]
        entropies: list[list[float]] = [[] for _ in range(total)]
        finish: list[tuple[str, str | None] | None] = [None] * total
        active = list(range(total))  # original row index of each row still in the batch
        window = stop_window(stops)

        for step in range(max_new_tokens):
            check_cancel()  # every decode step: a cancel lands mid-turn (trainers.sdk.cancel; polled cheaply)
            chosen, chosen_logprobs = sample_next(logits, temperature, top_p, generator)
            if step < entropy_tokens:
                for row, value in zip(active, token_entropy(logits, temperature).tolist(), strict=True):
                    entropies[row].append(value)
            keep: list[int] = []
            for batch_row, (row, token, logprob) in enumerate(
                zip(active, chosen.tolist(), chosen_logprobs.tolist(), strict=True)
            ):
                tokens[row].append(token)
                logprobs[row].append(logprob)
                finish[row] = self.row_finish(tokens[row], max_new_tokens, stops, window)
                if finish[row] is None:
                    keep.append(batch_row)
            if self.prefixes is not None and len(keep) < len(active):
                kept = set(keep)
                for batch_row, row in enumerate(active):
                    if batch_row not in kept:
                        self._keep_states(cache, mask, batch_row, row_prompts[row] + tuple(tokens[row][:-1]))
            if not keep:
                break
            if len(keep) < len(active):
                index = torch.tensor(keep, device=device)
                cache.batch_select_indices(index)
                mask, next_position, chosen = mask[index], next_position[index], chosen[index]
                active = [active[i] for i in keep]
            mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype, device=device)], dim=1)
            out = self.model(
                input_ids=chosen[:, None],
                attention_mask=mask,
                position_ids=next_position[:, None],
                **cache_argument(self.model, cache),
                use_cache=True,
            )
            logits = out.logits[:, -1]
            next_position = next_position + 1

        return [
            self.completion(
                tokens[row], logprobs[row], finish[row], entropies[row] if entropy_tokens else None
            )
            for row in range(total)
        ]

    def row_finish(
        self, tokens: list[int], max_new_tokens: int, stops: list[str], window: int
    ) -> tuple[str, str | None] | None:
        """Why a row whose sampled `tokens` end with the token just sampled is finished: ("eos", None),
        ("stop", the stop string) or ("length", None); None while it goes on. `window`: tokens enough to
        hold any stop string (`stop_window`)."""
        if tokens[-1] in self.eos_ids:
            return ("eos", None)
        if stops and (hit := stop_index(self.tokenizer.decode(tokens[-window:]), stops)):
            return ("stop", hit[1])
        if len(tokens) >= max_new_tokens:
            return ("length", None)
        return None

    def completion(
        self,
        tokens: list[int],
        logprobs: list[float],
        finish: tuple[str, str | None] | None,
        entropies: list[float] | None,
    ) -> Completion:
        """The `Completion` of a finished row: its text cut right after the stop string that ended it."""
        reason, stop = finish or ("length", None)
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        if stop is not None and (hit := stop_index(text, [stop])):
            text = text[: hit[0]]
        return Completion(
            token_ids=tokens,
            text=text,
            finish_reason=reason,  # type: ignore[arg-type]
            logprobs=logprobs,
            stop=stop,
            entropies=entropies,
        )

    def _waves(self, prompt_ids: list[list[int]], n: int, max_new_tokens: int) -> list[list[list[int]]]:
        """`prompt_ids` in consecutive pieces whose KV cache fits `wave_bytes` (at least one prompt each)."""
        per_token = kv_bytes_per_token(self.model)
        longest = max(len(ids) for ids in prompt_ids)
        if not per_token or self.wave_bytes <= 0:
            return [prompt_ids]
        per_prompt = n * (longest + max_new_tokens) * per_token
        size = max(1, self.wave_bytes // per_prompt)
        return [prompt_ids[i : i + size] for i in range(0, len(prompt_ids), size)]

    def _prefill(
        self, prompts: list[tuple[int, ...]], max_new_tokens: int
    ) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Encode `prompts` into a fresh cache with room for `max_new_tokens` more; returns (cache, attention
        mask, the encoded tokens' positions, the logits after each prompt).

        In a session, each prompt starts from the longest stored prefix of it: those states are copied into
        the cache's first `width` slots, right-aligned, and only the rest of the prompt (left-padded to
        `depth`) runs through the model. The mask has holes where a row's stored part is shorter than
        `width` or its new part shorter than `depth`; positions count only the unmasked slots, so every
        token sees exactly its own prompt, as if it were encoded alone."""
        device = self.device
        store = self.prefixes
        stored: list[torch.Tensor | None] = [None] * len(prompts)
        cached = [0] * len(prompts)
        if store is not None:
            self._share_common_prefix(prompts)
            used = set()
            for i, prompt in enumerate(prompts):
                hit = store.longest(prompt)
                if hit is not None:
                    key, stored[i] = hit
                    cached[i] = len(key)
                    used.add(key)
            for key in used:  # the rows that extend it will store their longer prefixes
                store.drop(key)
        width = max(cached, default=0)
        new = [prompt[c:] for prompt, c in zip(prompts, cached, strict=True)]
        depth = max((len(ids) for ids in new), default=0)
        cache = preallocated_cache(self.model.config, width + depth + max_new_tokens)
        if width:
            like = next(states for states in stored if states is not None)
            same = all(s is like for s in stored)  # one stored prefix for every row: seeded by one copy
            for index, layer in enumerate(cache.layers):
                check_cancel()  # a wide batch's buffers take long to fill (trainers.sdk.cancel)
                rows = (
                    [like[index]] * len(stored) if same else [None if s is None else s[index] for s in stored]
                )
                layer.seed(rows, width, like[index])
            del rows, like
        # The cache holds the stored prefixes now: let go of the store's copies before the forward pass
        # (the demo's third turn: ~0.3 GB of bf16 states held twice at generation's peak otherwise).
        stored.clear()
        input_ids = torch.full((len(prompts), depth), self.pad_id, dtype=torch.long, device=device)
        mask = torch.zeros((len(prompts), width + depth), dtype=torch.long, device=device)
        for i, ids in enumerate(new):
            mask[i, width - cached[i] : width] = 1
            if ids:
                input_ids[i, depth - len(ids) :] = torch.tensor(ids, device=device)
                mask[i, width + depth - len(ids) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, width:]
        out = self.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            **cache_argument(self.model, cache),
            use_cache=True,
            logits_to_keep=1,
        )
        if store is not None:
            store.reused_tokens += sum(cached)
            store.encoded_tokens += sum(len(ids) for ids in new)
        return cache, mask, positions, out.logits[:, -1]

    def _share_common_prefix(self, prompts: list[tuple[int, ...]]) -> None:
        """Encode once, and store, the beginning that prompts without a stored prefix share (the
        groups of a step, the evaluation tasks: one system prompt, tools and worked example)."""
        assert self.prefixes is not None
        fresh = [p for p in prompts if self.prefixes.longest(p) is None]
        shared = common_prefix(fresh)
        if len(shared) < MIN_SHARED_PREFIX:
            return
        cache, mask, _, _ = self._prefill([shared], 0)
        self._keep_states(cache, mask, 0, shared)

    def _keep_states(self, cache: Any, mask: torch.Tensor, batch_row: int, key: tuple[int, ...]) -> None:
        """Store the cache row `batch_row` (its unmasked slots) as the states of the tokens `key`."""
        assert self.prefixes is not None
        slots = mask[batch_row].nonzero().squeeze(-1)
        if len(slots) != len(key):  # never expected; a wrong entry would be worse than none
            log.warning("prefix store: %d slots for %d tokens, not stored", len(slots), len(key))
            return
        self.prefixes.put(key, torch.stack([layer.row_states(batch_row, slots) for layer in cache.layers]))

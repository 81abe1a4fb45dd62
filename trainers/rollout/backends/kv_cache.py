"""The transformers backend's KV cache: preallocated buffers that rows can enter and leave mid-decode.

Row r of the batch keeps its keys and values in `_keys[r, :, slot]`; every row writes its next token at
the same slot (`length`), and an attention mask with holes says which slots belong to a row
(`TransformersBackend._prefill`: positions count only a row's unmasked slots, so where a row's tokens sit
does not change what it computes). That freedom is what continuous batching
(`trainers.rollout.backends.continuous`) builds on: a row joins by copying its prefilled slots into a free
buffer row, leaves by moving the last row into its place, and the rows are packed again when the holes
grow. Every slot below `length` holds finite numbers (states or zeros): a masked slot's value is multiplied
by an attention weight of 0, and 0 × NaN would still be NaN.
"""

from __future__ import annotations

from typing import Any

import torch


def kv_bytes_per_token(model: Any) -> int:
    """Bytes of keys and values one token takes in the cache of `model` (0 when its config does not say)."""
    config = getattr(model, "config", None)
    config = getattr(config, "get_text_config", lambda: config)()
    layers = getattr(config, "num_hidden_layers", 0)
    heads = getattr(config, "num_attention_heads", 0)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or (
        getattr(config, "hidden_size", 0) // heads if heads else 0
    )
    try:
        size = next(model.parameters()).element_size()
    except (StopIteration, AttributeError):
        return 0
    return int(layers * 2 * kv_heads * head_dim * size)


class RowMoves:
    """What continuous batching adds to the preallocated layer: rows enter, leave and are packed again while
    the others decode (the layer's buffers `_keys` / `_values`: rows × heads × slots × head dim)."""

    _keys: torch.Tensor
    _values: torch.Tensor
    length: int
    batch: int
    is_initialized: bool

    def _views(self) -> None:
        raise NotImplementedError

    def reserve(self, rows: int, slots: int) -> None:
        """Buffers of at least `rows` rows and `slots` slots, keeping what is in use."""
        have_rows, heads, have_slots, dim = self._keys.shape
        if rows <= have_rows and slots <= have_slots:
            return
        shape = (max(rows, have_rows), heads, max(slots, have_slots), dim)
        keys, values = self._keys.new_empty(shape), self._values.new_empty(shape)
        keys[: self.batch, :, : self.length] = self._keys[: self.batch, :, : self.length]
        values[: self.batch, :, : self.length] = self._values[: self.batch, :, : self.length]
        self._keys, self._values = keys, values
        self._views()

    def extend(self, length: int) -> None:
        """Make `length` slots current; the rows' new slots are zero (holes)."""
        if length > self.length:
            self.reserve(self.batch, length)
            self._keys[: self.batch, :, self.length : length].zero_()
            self._values[: self.batch, :, self.length : length].zero_()
            self.length = length
            self._views()

    def add_rows(self, source: Any, rows: torch.Tensor) -> None:
        """Append rows `rows` of the layer `source` (a prefill's) as new rows; their slots past the
        source's length are zero. Call `extend` first so that `length` ≥ the source's."""
        count, width = len(rows), source.length
        first = self.batch
        self.reserve(first + count, self.length)
        self._keys[first : first + count, :, :width] = source._keys[rows, :, :width]
        self._values[first : first + count, :, :width] = source._values[rows, :, :width]
        self._keys[first : first + count, :, width : self.length].zero_()
        self._values[first : first + count, :, width : self.length].zero_()
        self.batch += count
        self._views()

    def move_row(self, source: int, target: int) -> None:
        """Copy row `source` over row `target` (a row that left takes the last row's place)."""
        self._keys[target, :, : self.length] = self._keys[source, :, : self.length]
        self._values[target, :, : self.length] = self._values[source, :, : self.length]

    def drop_last_rows(self, count: int) -> None:
        self.batch -= count
        self._views()

    def pack(self, live: list[torch.Tensor], length: int) -> None:
        """Row i keeps only its slots `live[i]`, right-aligned in [0, `length`) (zero before them)."""
        for i, slots in enumerate(live):
            start = length - len(slots)
            self._keys[i, :, start:length] = self._keys[i].index_select(1, slots)
            self._values[i, :, start:length] = self._values[i].index_select(1, slots)
            self._keys[i, :, :start].zero_()
            self._values[i, :, :start].zero_()
        self.length = length
        self._views()


def preallocated_cache(config: Any, capacity: int) -> Any:
    """A DynamicCache whose layers write into preallocated buffers instead of concatenating.

    The stock DynamicLayer copies the whole cache at every decoded token (torch.cat): on 2 CPU cores
    that was about a fifth of a decode step. Models with sliding-window layers keep the stock cache.
    """
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    class PreallocatedLayer(RowMoves, DynamicLayer):
        def __init__(self) -> None:
            super().__init__()
            self.length = 0
            self.batch = 0  # rows in use: the first `batch` rows of the buffers

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            self.dtype, self.device = key_states.dtype, key_states.device
            batch, heads, _, dim = key_states.shape
            self._keys = key_states.new_empty((batch, heads, capacity, dim))
            self._values = value_states.new_empty((batch, heads, capacity, value_states.shape[-1]))
            self.length = 0
            self.batch = batch
            self.is_initialized = True

        def _views(self) -> None:
            self.keys = self._keys[: self.batch, :, : self.length]
            self.values = self._values[: self.batch, :, : self.length]

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            new = key_states.shape[-2]
            if self.length + new > self._keys.shape[-2]:  # more than planned: grow by doubling
                self.reserve(self._keys.shape[0], max(self.length + new, 2 * self._keys.shape[-2]))
            self._keys[: self.batch, :, self.length : self.length + new] = key_states
            self._values[: self.batch, :, self.length : self.length + new] = value_states
            self.length += new
            self._views()
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.length if self.is_initialized else 0

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self.is_initialized:
                self._keys = self._keys[indices]
                self._values = self._values[indices]
                self.batch = len(indices)
                self._views()

        def seed(self, rows: list[torch.Tensor | None], width: int, like: torch.Tensor) -> None:
            """Start from stored states: row i's (2, heads, length, dim) right-aligned in slots
            [width - length, width); slots before it are zero (they are masked out)."""
            batch = len(rows)
            _, heads, _, dim = like.shape
            self.dtype, self.device = like.dtype, like.device
            self._keys = like.new_empty((batch, heads, capacity, dim))
            self._values = like.new_empty((batch, heads, capacity, dim))
            self.batch = batch
            first = rows[0]
            if first is not None and first.shape[-2] == width and all(states is first for states in rows):
                # Every row starts from the same prefix (an evaluation's shared system prompt): one
                # broadcast copy instead of a zero fill and a copy per row.
                self._keys[:, :, :width] = first[0]
                self._values[:, :, :width] = first[1]
                self.length = width
                self.is_initialized = True
                self._views()
                return
            self._keys[:, :, :width].zero_()
            self._values[:, :, :width].zero_()
            for i, states in enumerate(rows):
                if states is not None:
                    length = states.shape[-2]
                    self._keys[i, :, width - length : width] = states[0]
                    self._values[i, :, width - length : width] = states[1]
            self.length = width
            self.is_initialized = True
            self._views()

        def row_states(self, row: int, slots: torch.Tensor) -> torch.Tensor:
            """Row `row`'s keys and values at `slots`, as (2, heads, len(slots), dim)."""
            return torch.stack(
                [self._keys[row].index_select(1, slots), self._values[row].index_select(1, slots)]
            )

    cache = DynamicCache(config=config)
    if all(type(layer) is DynamicLayer for layer in cache.layers) and cache.layers:
        cache.layers = [PreallocatedLayer() for _ in cache.layers]
    return cache

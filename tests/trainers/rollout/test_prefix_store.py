"""The store of KV states by token prefix: the longest usable prefix, the byte budget, shared beginnings."""

from __future__ import annotations

import torch

from trainers.rollout.backends.prefix_store import PrefixStore, common_prefix


def states(length: int) -> torch.Tensor:
    return torch.zeros((2, 2, 1, length, 4))  # layers, keys/values, heads, tokens, head dim


def test_the_longest_stored_prefix_wins_and_one_token_is_always_left_to_encode():
    store = PrefixStore(budget_bytes=1 << 20)
    store.put((1, 2), states(2))
    store.put((1, 2, 3, 4), states(4))
    store.put((9, 9, 9), states(3))
    key, found = store.longest([1, 2, 3, 4, 5])
    assert key == (1, 2, 3, 4) and found.shape[-2] == 4
    # The whole prompt stored is no use: its last token must run through the model for the next logits.
    assert store.longest([1, 2, 3, 4])[0] == (1, 2)
    assert store.longest([7, 1, 2]) is None


def test_the_budget_evicts_the_least_recently_stored_first():
    one = states(10)
    size = one.numel() * one.element_size()
    store = PrefixStore(budget_bytes=2 * size)
    store.put((1,), states(10))
    store.put((2,), states(10))
    store.put((3,), states(10))
    assert list(store.entries) == [(2,), (3,)] and store.bytes == 2 * size
    store.drop((2,))
    assert list(store.entries) == [(3,)] and store.bytes == size
    store.put((4,), torch.zeros((2, 2, 1, 40, 4)))  # larger than the whole budget: not kept
    assert list(store.entries) == [(3,)]


def test_common_prefix_leaves_every_prompt_a_token_of_its_own():
    assert common_prefix([(1, 2, 3, 4), (1, 2, 3, 5), (1, 2, 7)]) == (1, 2)
    assert common_prefix([(1, 2, 3), (1, 2, 3, 4)]) == (1, 2)
    assert common_prefix([(1, 2, 3)]) == ()

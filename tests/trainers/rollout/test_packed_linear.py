"""A bf16 sampling copy on a CPU runs its linear layers on oneDNN-packed weights
(trainers/rollout/backends/packed_linear.py): it must sample exactly what the plain layers sample, hold
the packed weights instead of the plain ones, follow every weight push, and never touch a model that
trains."""

from __future__ import annotations

import copy

import pytest
import torch

from trainers.rollout.backends import make_backend, transformers_backend
from trainers.rollout.backends.packed_linear import can_pack

CHAT = [{"role": "user", "content": "What is 2 + 3?"}]


def sampling_copy(model):
    """`model` as the trainer's bf16 sampling copy: its own weights, in bf16, never trained."""
    sampler = copy.deepcopy(model).to(torch.bfloat16).eval()
    for p in sampler.parameters():
        p.requires_grad_(False)
    return sampler


def samples(backend):
    return [
        (c.token_ids, c.logprobs)
        for c in backend.generate([CHAT], n=4, max_new_tokens=12, temperature=1.0, seed=3)
    ]


def held(backend) -> int:
    return sum(p.numel() for p in backend.model.parameters())


@pytest.fixture
def backends(tiny, monkeypatch):
    """(packed, plain): two backends on bf16 sampling copies of the tiny policy, one on packed weights."""
    policy, tokenizer = tiny
    if not can_pack(sampling_copy(policy)):
        pytest.skip("PyTorch's oneDNN has no bf16 kernels on this CPU: bf16 samples in fp32 here")
    packed = make_backend("transformers", model=sampling_copy(policy), tokenizer=tokenizer)
    monkeypatch.setattr(transformers_backend, "can_pack", lambda model: False)
    plain = make_backend("transformers", model=sampling_copy(policy), tokenizer=tokenizer)
    return packed, plain


def test_packed_layers_sample_exactly_what_the_plain_layers_sample_holding_no_plain_copy(backends):
    packed, plain = backends
    assert packed._packed.complete() and plain._packed is None
    assert samples(packed) == samples(plain)
    owned = sum(shape.numel() for shape in packed._packed.shapes.values())
    assert owned > 0 and held(packed) == held(plain) - owned  # the tied LM head keeps its plain weight
    assert all(torch.equal(packed.state_dict()[k], v) for k, v in plain.state_dict().items())


def test_every_weight_push_is_packed_as_it_arrives(tiny, backends):
    policy, _ = tiny
    packed, plain = backends
    before = samples(packed)
    changed = {key: value * 1.5 if value.ndim == 2 else value for key, value in policy.state_dict().items()}
    for backend in backends:  # the trainer's cycle: released during the update, then the whole push
        backend.release_weights()
        assert held(backend) == 0
        backend.update_weights(changed)
    assert samples(packed) == samples(plain) != before
    assert packed._packed.complete()
    one = next(iter(packed._packed.owned))  # a push of some weights only, without a release
    for backend in backends:
        backend.update_weights({one: changed[one] * -1})
    assert samples(packed) == samples(plain)
    assert all(torch.equal(packed.state_dict()[k], v) for k, v in plain.state_dict().items())
    with pytest.raises(ValueError, match="a weight of shape"):
        packed.update_weights({one: changed[one][:1]})


def test_a_model_that_trains_or_runs_in_fp32_keeps_its_own_layers(tiny):
    policy, tokenizer = tiny
    assert not can_pack(copy.deepcopy(policy).to(torch.bfloat16))  # requires grad: the policy itself
    assert not can_pack(sampling_copy(policy).float())
    assert make_backend("transformers", model=copy.deepcopy(policy), tokenizer=tokenizer)._packed is None

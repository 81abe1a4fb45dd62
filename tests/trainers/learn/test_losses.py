"""The clipped policy loss, KL and aggregation modes against values computed by hand."""

import math
import random

import pytest
import torch

from trainers.learn.losses import aggregate, k3_kl, policy_loss, truncated_importance_weights

MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
ADV = torch.tensor([2.0, -1.0])


def on_policy(values=None):
    logp = torch.zeros(2, 3, requires_grad=True) if values is None else values
    return logp, logp.detach().clone()


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (-2 - 2 + 1) / 3),
        ("seq-mean-token-mean", (-4 / 2 + 1 / 1) / 2),
        ("seq-mean-token-sum", (-4 + 1) / 2),
        ("seq-mean-token-sum-norm", (-4 + 1) / (2 * 4)),
    ],
)
def test_aggregation_modes(mode, expected):
    logp, old = on_policy()
    loss, stats = policy_loss(logp, old, ADV, MASK, loss_agg=mode, norm_constant=4)
    assert loss.item() == pytest.approx(expected)
    assert stats.tokens == 3 and stats.clipped_tokens == 0


def test_step_totals_override_micro_batch_counts():
    # Two micro-batches of one sequence each must add up to the full-batch loss.
    logp, old = on_policy()
    full, _ = policy_loss(logp, old, ADV, MASK, loss_agg="token-mean")
    parts = sum(
        policy_loss(
            logp[i : i + 1],
            old[i : i + 1],
            ADV[i : i + 1],
            MASK[i : i + 1],
            loss_agg="token-mean",
            num_tokens=3,
        )[0]
        for i in range(2)
    )
    assert parts.item() == pytest.approx(full.item())


def test_asymmetric_clip():
    old = torch.zeros(1, 1)
    up = torch.full((1, 1), math.log(1.5), requires_grad=True)
    one = torch.ones(1, 1)
    loss, stats = policy_loss(up, old, torch.tensor([1.0]), one, clip_low=0.2, clip_high=0.2)
    assert loss.item() == pytest.approx(-1.2) and stats.clipped_tokens == 1
    loss.backward()
    assert up.grad.item() == 0  # clipped: no gradient pushes the ratio further up
    loss, _ = policy_loss(up.detach(), old, torch.tensor([1.0]), one, clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(-1.28)
    down = torch.full((1, 1), math.log(0.5))
    loss, stats = policy_loss(down, old, torch.tensor([-1.0]), one, clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(0.8) and stats.clipped_tokens == 1
    loss, stats = policy_loss(down, old, torch.tensor([1.0]), one, clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(-0.5) and stats.clipped_tokens == 0


def test_k3_kl_and_its_weight():
    logp = torch.zeros(1, 1)
    ref = torch.full((1, 1), math.log(2.0))
    assert k3_kl(logp, ref).item() == pytest.approx(1 - math.log(2))
    loss, stats = policy_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 1), ref_logp=ref, kl_coef=0.5)
    assert loss.item() == pytest.approx(0.5 * (1 - math.log(2)))
    assert stats.kl_sum == pytest.approx(1 - math.log(2))


def test_masked_tool_tokens_get_exactly_zero_gradient():
    # Sequence 0: model, model, tool, tool, model; sequence 1: model, tool, padding.
    mask = torch.tensor([[1, 1, 0, 0, 1], [1, 0, 0, 0, 0]])
    logp = torch.randn(2, 5, requires_grad=True)
    ref = torch.randn(2, 5)
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"):
        logp.grad = None
        loss, _ = policy_loss(
            logp,
            logp.detach() - 0.1,
            torch.tensor([1.5, -0.7]),
            mask,
            loss_agg=mode,
            ref_logp=ref,
            kl_coef=0.1,
            norm_constant=8,
        )
        loss.backward()
        assert torch.all(logp.grad[mask == 0] == 0), mode
        assert torch.all(logp.grad[mask == 1] != 0), mode


def test_unknown_mode_and_missing_constant():
    with pytest.raises(ValueError):
        aggregate(torch.zeros(1, 1), torch.ones(1, 1), "sum")
    with pytest.raises(ValueError):
        aggregate(torch.zeros(1, 1), torch.ones(1, 1), "seq-mean-token-sum-norm")


def test_truncated_importance_weights_are_the_ratio_capped_and_masked():
    learner = torch.tensor([[-1.0, -1.0, -2.0], [-0.5, 0.0, 0.0]])
    behaviour = torch.tensor([[-1.5, -3.0, -2.0], [-0.5, 0.0, 0.0]])
    weights = truncated_importance_weights(learner, behaviour, MASK, cap=2.0)
    # exp(0.5) ≈ 1.65 kept, exp(2) ≈ 7.4 capped at 2, masked token 0, equal log-probs 1.
    assert torch.allclose(weights, torch.tensor([[math.exp(0.5), 2.0, 0.0], [1.0, 0.0, 0.0]]))
    assert not weights.requires_grad


def test_importance_weights_scale_each_tokens_surrogate_and_gradient():
    logp = torch.zeros(2, 3, requires_grad=True)
    weights = torch.tensor([[0.5, 2.0, 0.0], [1.5, 0.0, 0.0]])
    loss, _ = policy_loss(logp, logp.detach(), ADV, MASK, loss_agg="token-mean", is_weights=weights)
    # On-policy ratio 1: each token's surrogate is -A · w.
    assert loss.item() == pytest.approx((-2 * 0.5 - 2 * 2.0 + 1 * 1.5) / 3)
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-1 / 3, -4 / 3, 0.0], [1.5 / 3, 0.0, 0.0]]))


def shared_prompt_rollouts(rng, group, prompt_length, lengths, mask):
    """One group's rollouts of random token ids sharing one prompt: a completion of each of `lengths`,
    its loss mask `mask(position)`."""
    from trainers.rollout.episodes import Rollout
    from trainers.types import Task, Trajectory

    prompt = [rng.randint(100, 40000) for _ in range(prompt_length)]
    task = Task(id="t", prompt="x")
    return [
        Rollout(
            group=group,
            sample=sample,
            task=task,
            seed=0,
            trajectory=Trajectory(task=task, turns=[]),
            prompt_ids=prompt,
            completion_ids=[rng.randint(100, 40000) for _ in range(length)],
            loss_mask=[mask(i) for i in range(length)],
        )
        for sample, length in enumerate(lengths)
    ]


@pytest.mark.parametrize(("max_tokens", "recompute"), [(0, False), (50, False), (90, False), (50, True)])
def test_parts_give_the_log_probs_and_gradients_of_the_whole_batch(tiny, max_tokens, recompute):
    """Two prompts of four samples each: the learner's parts (a backward pass per part, then the prompt's)
    add up to the gradients of one graph over the whole batch, with the decoder layers checkpointed too
    (run again in the backward pass). Plumbing, so the tiny model (the bundled one took ~10 s a case)."""
    from trainers.learn.losses import completion_logprob_parts, completion_logprobs

    model, _ = tiny
    model.train()
    rng = random.Random(0)
    rollouts = [
        rollout
        for group in range(2)
        for rollout in shared_prompt_rollouts(
            rng, group, 60, [30 - 6 * sample for sample in range(4)], lambda i: 1 if (i // 7) % 2 == 0 else 0
        )
    ]
    masks = [r.loss_mask for r in rollouts]
    weights = torch.randn(len(rollouts), 30, generator=torch.Generator().manual_seed(1))

    def gradients() -> torch.Tensor:
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        model.zero_grad()
        return grads

    logp, _, entropy = completion_logprobs(model, rollouts, masks, with_entropy=True)
    (logp * weights[:, : logp.shape[1]]).sum().backward()
    whole = gradients()
    part_entropy = 0.0
    for part in completion_logprob_parts(
        model, rollouts, masks, with_entropy=True, max_tokens=max_tokens, recompute=recompute
    ):
        assert part.logp.shape[1] <= 30 and (
            max_tokens == 0 or len(part.rows) == 1 or part.logp.numel() <= max_tokens
        )
        assert torch.allclose(part.logp.detach(), logp.detach()[part.rows, : part.logp.shape[1]], atol=1e-5)
        (part.logp * weights[part.rows, : part.logp.shape[1]]).sum().backward()
        part_entropy += part.entropy
    assert float((gradients() - whole).norm() / whole.norm()) < 1e-4
    assert part_entropy == pytest.approx(entropy, rel=1e-5)


def test_recomputed_passes_keep_a_fraction_of_the_activations_for_the_same_gradients(tiny):
    """`activation_checkpointing`: the learner's passes keep for the backward pass only what the layers and
    the LM head's chunks take in (counted as autograd saves them: the parameters aside), and the backward
    passes, which compute the rest again, give the same gradients."""
    import copy

    from trainers.learn.losses import completion_logprob_parts

    model = copy.deepcopy(tiny[0]).train()
    rollouts = shared_prompt_rollouts(random.Random(0), 0, 40, [30, 24, 18], lambda i: 1)
    masks = [r.loss_mask for r in rollouts]
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def kept_and_gradients(recompute: bool) -> tuple[int, torch.Tensor]:
        storages: dict[int, int] = {}

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            storage = tensor.untyped_storage()
            if storage.data_ptr() not in parameters:
                storages[storage.data_ptr()] = storage.nbytes()
            return tensor

        kept = 0
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            for part in completion_logprob_parts(model, rollouts, masks, recompute=recompute):
                kept = max(kept, sum(storages.values()))
                storages.clear()
                part.logp.sum().backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        model.zero_grad()
        return kept, grads

    plain, plain_grads = kept_and_gradients(False)
    recomputed, recomputed_grads = kept_and_gradients(True)
    assert recomputed < plain / 5
    assert float((recomputed_grads - plain_grads).norm() / plain_grads.norm()) < 1e-5


def test_parts_put_samples_of_like_length_together_so_little_is_padding(tiny):
    """A group's samples come in any order; each part is padded to its longest row, so the learner cuts
    the parts from the shortest completion up: here 72 padded tokens instead of 116 in sampled order."""
    from trainers.learn.losses import completion_logprob_parts

    model = tiny[0]
    rollouts = shared_prompt_rollouts(random.Random(0), 0, 20, [30, 4, 28, 6], lambda i: 1)
    masks = [r.loss_mask for r in rollouts]
    with torch.no_grad():
        parts = list(completion_logprob_parts(model, rollouts, masks, max_tokens=60))
    assert [part.rows for part in parts] == [[1, 3], [2, 0]]
    assert sum(part.logp.numel() for part in parts) == 2 * 6 + 2 * 30

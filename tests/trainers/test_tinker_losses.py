"""The Tinker service's built-in losses give the formulas of Tinker's loss docs: sums over every token
of every datum, padding excluded; a request naming an unknown loss or missing an input is refused."""

from __future__ import annotations

import pytest
import torch

from trainers.tinker.losses import LOSS_FUNCTIONS, LossInputError, tinker_loss

LOGP = torch.tensor([[-0.5, -1.0, -2.0], [-0.2, -0.7, 0.0]])
SAMPLED = torch.tensor([[-0.6, -0.9, -2.5], [-0.2, -1.0, 0.0]])
ADVANTAGES = torch.tensor([[1.0, 1.0, 1.0], [-0.5, -0.5, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # the second datum is one token shorter


def loss_of(loss_fn: str, config: dict | None = None, **inputs: torch.Tensor) -> tuple[float, torch.Tensor]:
    logp = LOGP.clone().requires_grad_(True)
    outcome = tinker_loss(loss_fn, logp, inputs, MASK, config)
    outcome.loss.backward()
    return float(outcome.loss.detach()), logp.grad


def test_dro_is_the_log_prob_times_the_advantage_less_a_quadratic_pull_to_the_sampler():
    beta = 0.3
    loss, grad = loss_of("dro", {"beta": beta}, logprobs=SAMPLED, advantages=ADVANTAGES)
    expected = -((LOGP * ADVANTAGES - 0.5 * beta * (LOGP - SAMPLED) ** 2) * MASK).sum()
    assert loss == pytest.approx(float(expected))
    # d/dlogp: -(A - beta (logp - q)), zero on padding
    assert torch.allclose(grad, -(ADVANTAGES - beta * (LOGP - SAMPLED)) * MASK)


def test_dro_without_a_beta_takes_the_documented_default():
    with_default, _ = loss_of("dro", None, logprobs=SAMPLED, advantages=ADVANTAGES)
    explicit, _ = loss_of("dro", {"beta": 0.05}, logprobs=SAMPLED, advantages=ADVANTAGES)
    assert with_default == explicit


def test_the_other_losses_give_the_documented_sums():
    ce, _ = loss_of("cross_entropy", weights=MASK)
    assert ce == pytest.approx(float(-(LOGP * MASK).sum()))
    ratio = torch.exp(LOGP - SAMPLED)
    is_loss, _ = loss_of("importance_sampling", logprobs=SAMPLED, advantages=ADVANTAGES)
    assert is_loss == pytest.approx(float(-(ratio * ADVANTAGES * MASK).sum()))
    clipped = ratio.clamp(0.8, 1.2)
    ppo, _ = loss_of("ppo", logprobs=SAMPLED, advantages=ADVANTAGES)
    assert ppo == pytest.approx(float(-(torch.min(ratio * ADVANTAGES, clipped * ADVANTAGES) * MASK).sum()))
    cispo, _ = loss_of("cispo", logprobs=SAMPLED, advantages=ADVANTAGES)
    assert cispo == pytest.approx(float(-(clipped * LOGP * ADVANTAGES * MASK).sum()))


def test_an_unknown_loss_or_a_missing_input_is_refused_with_what_to_send():
    with pytest.raises(LossInputError, match="this service has cross_entropy.*dro"):
        tinker_loss("kl", LOGP, {}, MASK)
    with pytest.raises(LossInputError, match="needs loss_fn_inputs advantages"):
        tinker_loss("dro", LOGP, {"logprobs": SAMPLED}, MASK)
    assert "dro" in LOSS_FUNCTIONS

"""Advantage estimators against values computed by hand."""

import math

import pytest

from trainers.learn.algorithms import (
    advantages,
    dapo_advantages,
    dr_grpo_advantages,
    grpo_advantages,
    is_zero_variance,
    overlong_penalty,
    reinforce_pp_advantages,
    rloo_advantages,
)


def close(actual, expected, tol=1e-4):
    assert len(actual) == len(expected)
    for got_group, want_group in zip(actual, expected, strict=True):
        assert got_group == pytest.approx(want_group, abs=tol)


def test_grpo_divides_by_the_unbiased_group_std():
    # mean 0.5, sample std sqrt(1/3) = 0.57735 → ±0.5 / 0.57735 = ±0.866025
    close(grpo_advantages([[1, 0, 0, 1], [0, 0, 0]]), [[0.866025, -0.866025, -0.866025, 0.866025], [0, 0, 0]])


def test_dapo_uses_the_grpo_estimator():
    close(dapo_advantages([[2, 0]]), [[0.707107, -0.707107]])  # ±1 / sqrt(2)


def test_dr_grpo_only_subtracts_the_group_mean():
    close(dr_grpo_advantages([[1, 0, 0, 1], [3, 3]]), [[0.5, -0.5, -0.5, 0.5], [0, 0]])


def test_rloo_subtracts_the_mean_of_the_others():
    close(rloo_advantages([[1, 0, 0, 1], [3, 1]]), [[2 / 3, -2 / 3, -2 / 3, 2 / 3], [2, -2]])


def test_reinforce_pp_whitens_centred_rewards_over_the_batch():
    # centred: [0.5, -0.5], [-1, -1, 2]; batch std = sqrt(6.5 / 4) = 1.274755
    std = math.sqrt(6.5 / 4)
    close(
        reinforce_pp_advantages([[1, 0], [2, 2, 5]]), [[0.5 / std, -0.5 / std], [-1 / std, -1 / std, 2 / std]]
    )


def test_scale_override_and_single_member_groups():
    close(advantages([[1, 0, 0, 1]], "grpo", scale_rewards="none"), [[0.5, -0.5, -0.5, 0.5]])
    close(advantages([[4]], "grpo"), [[0.0]])
    close(advantages([[4]], "rloo"), [[0.0]])
    with pytest.raises(ValueError):
        advantages([[1, 2]], "ppo")


def test_zero_variance_groups():
    assert is_zero_variance([0, 0, 0]) and is_zero_variance([1.0]) and not is_zero_variance([0, 1e-3])


def test_overlong_penalty_ramps_over_the_buffer():
    assert [overlong_penalty(n, 100, 20) for n in (50, 80, 90, 100, 130)] == [0, 0, -0.5, -1, -1]
    assert overlong_penalty(95, 100, 20, penalty=2.0) == pytest.approx(-1.5)
    assert overlong_penalty(100, 100, 0) == 0

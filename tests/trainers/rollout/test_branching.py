"""Branching rollouts (ARPO/AEPO): the branch rule, the tree a group grows within its budget, the shared
prefix's credit and the entropy-balanced clip. Fast: the tiny 2-layer Llama with the bundled tokenizer and a
small real environment whose every answer but the last is a tool call (the tiny model's replies are noise,
so an environment that reads calls from the text would never give it a tool result)."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from tests.trainers.conftest import ToyEnv, _Step
from trainers.learn.branch_credit import hard_token_advantages, token_owners
from trainers.learn.learner import assign_advantages
from trainers.learn.losses import policy_loss
from trainers.rollout import branching
from trainers.rollout.branched import generate_branching_rollouts, generate_with_strategy
from trainers.rollout.chat import ChatFormat
from trainers.rollout.episodes import Rollout
from trainers.run_config import RunConfig
from trainers.types import Task, Trajectory


class EchoToolEnv(ToyEnv):
    """Every answer but the last runs the echo tool (its result comes back as a tool message); the last is
    graded by its length, so a group has reward variance."""

    max_turns = 4

    def step(self, text: str) -> _Step:
        self.turn += 1
        if self.turn < self.max_turns:
            return _Step(f"Result: {len(text)}", 0.0, False, {"tool_name": "echo", "tool_args": {}})
        return _Step(None, float(len(text) % 3), True, {"correct": len(text) % 3 == 0})


@pytest.fixture(scope="module")
def backend(tiny):
    from trainers.rollout.backends.transformers_backend import TransformersBackend

    model, tokenizer = tiny
    return TransformersBackend(model=model, tokenizer=tokenizer)


def grow(backend, config: RunConfig, *, groups: int = 2, seed: int = 3, monitor=None) -> list[list[Rollout]]:
    env = EchoToolEnv()
    size = config.group_size
    return generate_branching_rollouts(
        backend,
        ChatFormat(backend.tokenizer),
        EchoToolEnv,
        env.tasks("train", groups, 0),
        [[g * 100 + s for s in range(size)] for g in range(groups)],
        config=config,
        monitor=monitor or branching.EntropyMonitor(),
        max_turns=4,
        max_new_tokens=6,
        max_context_tokens=2048,
        temperature=1.0,
        top_p=1.0,
        generation_seed=seed,
        stop=(),
    )


def branching_config(**knobs: Any) -> RunConfig:
    return RunConfig.build({"rollout_strategy": "branching", "group_size": 8, **knobs})


# --- the rule ------------------------------------------------------------------------------------------


def test_the_branch_probability_rises_with_the_entropy_and_falls_with_each_branch_in_a_row():
    p = branching.branch_probability
    assert p(0.0, base=0.5, weight=0.2, penalty=0.0, consecutive=0) == 0.5
    assert p(1.0, base=0.5, weight=0.2, penalty=0.0, consecutive=0) == pytest.approx(0.7)
    assert p(10.0, base=0.5, weight=0.2, penalty=0.0, consecutive=0) == 1.0  # clipped
    assert p(1.0, base=0.5, weight=0.2, penalty=0.5, consecutive=2) == pytest.approx(0.7 * 0.25)
    assert branching.entropy_rise(3.0, 2.0) == pytest.approx(0.5)


def test_below_the_threshold_no_draw_branches():
    cfg = branching_config(branch_threshold=0.5, branch_base_probability=1.0)
    rng = random.Random(0)
    assert not any(branching.branch_decision(cfg, rng, 2.2, 2.0, 0).branch for _ in range(50))  # rise 0.1
    assert all(branching.branch_decision(cfg, rng, 4.0, 2.0, 0).branch for _ in range(50))  # rise 1.0


def test_the_pre_monitored_split_gives_an_uncertain_question_more_global_samples():
    assert branching.global_share(8, root_entropy=3.0, tool_entropy=1.0, least=2) > 4
    assert branching.global_share(8, root_entropy=1.0, tool_entropy=3.0, least=2) < 4
    assert branching.global_share(8, root_entropy=1.0, tool_entropy=None, least=2) == 4
    assert branching.global_share(8, root_entropy=0.0, tool_entropy=50.0, least=2) == 2


# --- the tree ------------------------------------------------------------------------------------------


def test_the_backend_reports_the_entropy_of_the_first_k_tokens(backend):
    [completion] = backend.generate([[1, 2, 3]], max_new_tokens=8, seed=0, entropy_tokens=3)
    assert completion.entropies is not None and len(completion.entropies) == min(3, len(completion.token_ids))
    vocab = backend.model.config.vocab_size
    assert all(0.0 <= h <= torch.log(torch.tensor(float(vocab))) + 1e-4 for h in completion.entropies)
    [plain] = backend.generate([[1, 2, 3]], max_new_tokens=8, seed=0)
    assert plain.entropies is None and plain.token_ids == completion.token_ids  # measuring changes nothing


def test_a_group_branches_within_its_budget_and_each_branch_shares_its_parents_prefix(backend):
    cfg = branching_config(branch_threshold=-1.0, branch_base_probability=0.7)
    groups = grow(backend, cfg)
    for group in groups:
        assert [r.sample for r in group] == list(range(8))  # the budget is spent exactly
        branches = [r for r in group if r.branch]
        assert branches, "some tool step branched"
        assert sum(1 for r in group if r.branch is None) >= branching.initial_samples(8, 0)
        for r in branches:
            parent = group[r.branch["parent"]]
            n = r.branch["prefix_tokens"]
            assert r.completion_ids[:n] == parent.completion_ids[:n]
            assert r.trajectory.turns[r.branch["turn"] - 1].role == "tool"  # it branched after a tool result
            shared = [t.text for t in r.trajectory.turns[: r.branch["turn"]]]
            assert shared == [t.text for t in parent.trajectory.turns[: r.branch["turn"]]]
            assert r.seed == parent.seed and r.group == parent.group
        assert all(r.trajectory.status in ("ok", "truncated") for r in group)


def test_the_same_seeds_grow_the_same_tree(backend):
    cfg = branching_config(branch_threshold=-1.0)
    first, second = grow(backend, cfg, seed=5), grow(backend, cfg, seed=5)
    assert [[r.branch for r in g] for g in first] == [[r.branch for r in g] for g in second]
    assert [[r.completion_ids for r in g] for g in first] == [[r.completion_ids for r in g] for g in second]


def test_with_no_branch_the_budget_is_filled_with_global_samples(backend):
    cfg = branching_config(branch_base_probability=0.0, branch_entropy_weight=0.0)
    for group in grow(backend, cfg):
        assert len(group) == 8 and all(r.branch is None for r in group)


def test_the_consecutive_branch_penalty_keeps_paths_from_branching_at_tool_step_after_tool_step(backend):
    def back_to_back(group: list[Rollout]) -> int:
        """Paths with branch points at two tool steps in a row (turn indices 2 apart: answer, tool)."""
        points: dict[int, list[int]] = {r.sample: [r.branch["turn"]] if r.branch else [] for r in group}
        for r in group:
            if r.branch:
                points[r.branch["parent"]].append(r.branch["turn"])
        return sum(
            any(b - a == 2 for a, b in zip(sorted(t), sorted(t)[1:], strict=False)) for t in points.values()
        )

    free = branching_config(branch_threshold=-1.0, branch_base_probability=1.0, branch_initial_samples=1)
    assert sum(back_to_back(g) for g in grow(backend, free)) > 0
    penalised = grow(backend, free.replace(branch_consecutive_penalty=1.0))
    assert sum(back_to_back(g) for g in penalised) == 0
    assert all(len(g) == 8 for g in penalised)  # the budget still spent (global samples fill it)


def test_aepo_pre_monitoring_starts_the_rest_of_the_global_share_after_the_first_answers(backend):
    monitor = branching.EntropyMonitor()
    monitor.observe(0.0)  # tool results have been near-certain: the question's entropy is the larger
    cfg = branching_config(branch_budget_split="entropy", branch_threshold=-1.0)
    for group in grow(backend, cfg, monitor=monitor):
        assert sum(1 for r in group if r.branch is None) == 8  # σ(H_root − 0) of 8 ≈ all global
    assert monitor.tool_steps > 1  # it went on measuring the steps after tool results


def test_evaluation_and_the_independent_strategy_never_branch(backend):
    env = EchoToolEnv()
    args = (backend, ChatFormat(backend.tokenizer), EchoToolEnv, env.tasks("eval", 1, 0), [[0, 1, 2, 3]])
    options = dict(
        max_turns=4,
        max_new_tokens=4,
        max_context_tokens=2048,
        temperature=1.0,
        top_p=1.0,
        generation_seed=0,
        stop=(),
    )
    cfg = RunConfig.build(
        {
            "rollout_strategy": "branching",
            "group_size": 4,
            "branch_threshold": -1.0,
            "branch_base_probability": 1.0,
        }
    )
    [evaluated] = generate_with_strategy(cfg, branching.EntropyMonitor(), *args, split="eval", **options)
    [independent] = generate_with_strategy(
        cfg.replace(rollout_strategy="independent"), None, *args, **options
    )
    [trained] = generate_with_strategy(cfg, branching.EntropyMonitor(), *args, **options)
    assert all(r.branch is None for r in evaluated + independent)
    assert any(r.branch for r in trained)


# --- credit --------------------------------------------------------------------------------------------


def rollout(sample: int, tokens: int, branch: dict | None = None) -> Rollout:
    task = Task(id="t", prompt="p")
    r = Rollout(
        group=0, sample=sample, task=task, seed=0, trajectory=Trajectory(task=task, turns=[]), prompt_ids=[1]
    )
    r.completion_ids, r.loss_mask, r.branch = list(range(tokens)), [1] * tokens, branch
    return r


def test_hard_attribution_gives_each_shared_token_the_mean_advantage_of_its_sharers():
    # 0 is a global sample; 1 branched from 0 after 2 tokens; 2 branched from 1 after 3 tokens.
    group = [
        rollout(0, 4),
        rollout(1, 5, {"parent": 0, "prefix_tokens": 2}),
        rollout(2, 4, {"parent": 1, "prefix_tokens": 3}),
    ]
    assert token_owners(group) == [[0, 0, 0, 0], [0, 0, 1, 1, 1], [0, 0, 1, 2]]
    for r, a in zip(group, (3.0, 0.0, -3.0), strict=True):
        r.advantage = a
    hard_token_advantages(group)
    assert group[0].token_advantages == [0.0, 0.0, 3.0, 3.0]
    assert group[1].token_advantages == [0.0, 0.0, -1.5, 0.0, 0.0]
    assert group[2].token_advantages == [0.0, 0.0, -1.5, -3.0]


def test_soft_attribution_is_plain_grpo_and_hard_is_chosen_by_the_knob():
    def scored() -> list[Rollout]:
        group = [rollout(0, 3), rollout(1, 3, {"parent": 0, "prefix_tokens": 2})]
        group[0].reward, group[1].reward = 1.0, 0.0
        return group

    soft = scored()
    assign_advantages([soft], branching_config(group_size=2))
    assert soft[0].advantage > 0 > soft[1].advantage and soft[0].token_advantages is None
    hard = scored()
    assign_advantages([hard], branching_config(group_size=2, branch_attribution="hard"))
    assert hard[0].token_advantages[:2] == pytest.approx([0.0, 0.0])  # the shared tokens: the mean, 0
    assert hard[0].token_advantages[2] == pytest.approx(hard[0].advantage)


def test_the_entropy_balanced_clip_keeps_a_gradient_on_tokens_clipped_above():
    old = torch.zeros(1, 2)
    logp = torch.tensor([[0.5, 0.0]], requires_grad=True)  # token 0: ratio e^0.5 ≈ 1.65, above 1.2
    adv, mask = torch.tensor([1.0]), torch.ones(1, 2)
    plain, _ = policy_loss(logp, old, adv, mask, 0.2, 0.2, "token-mean")
    (grad_plain,) = torch.autograd.grad(plain, logp)
    balanced, stats = policy_loss(logp, old, adv, mask, 0.2, 0.2, "token-mean", entropy_balanced=True)
    (grad_balanced,) = torch.autograd.grad(balanced, logp)
    assert float(balanced.detach()) == pytest.approx(float(plain.detach()))  # the same value
    assert grad_plain[0, 0] == 0.0 and grad_balanced[0, 0] == pytest.approx(
        -1.2 / 2
    )  # (1 + ε)·∇logπ / tokens
    assert grad_balanced[0, 1] == pytest.approx(grad_plain[0, 1])
    assert stats.clipped_tokens == 1.0

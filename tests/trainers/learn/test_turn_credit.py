"""Per-turn credit: judgements as per-turn rewards, and per-turn rewards as per-token advantages that the
loss takes — the bad turn's tokens are pushed down, the good turns' are not, and without per-turn rewards
every number is exactly what it was before."""

from __future__ import annotations

import pytest
import torch

from trainers.learn import turn_credit
from trainers.learn.losses import policy_loss
from trainers.rollout.episodes import Rollout
from trainers.types import Task, Trajectory, Turn


def rollout(turn_tokens: list[tuple[str, int]], *, prompt_turns: int = 2, advantage: float = 0.5) -> Rollout:
    """A rollout whose turns have the given (role, token count); the first `prompt_turns` are the prompt."""
    turns, ids = [], []
    for i, (role, n) in enumerate(turn_tokens):
        token_ids = list(range(100 * i, 100 * i + n))
        turns.append(
            Turn(role=role, text=role, token_ids=token_ids, loss_mask=[int(role == "assistant")] * n)
        )
        ids.append(token_ids)
    prompt = [t for chunk in ids[:prompt_turns] for t in chunk]
    completion = [t for chunk in ids[prompt_turns:] for t in chunk]
    mask = [m for t in turns[prompt_turns:] for m in t.loss_mask or []]
    return Rollout(
        group=0,
        sample=0,
        task=Task(id="t", prompt="p"),
        seed=0,
        trajectory=Trajectory(task=Task(id="t", prompt="p"), turns=turns),
        prompt_ids=prompt,
        completion_ids=completion,
        loss_mask=mask,
        advantage=advantage,
    )


# A system and user prompt, then assistant #2, tool #3, assistant #4, tool #5, assistant #6.
TURNS = [
    ("system", 3),
    ("user", 2),
    ("assistant", 4),
    ("tool", 2),
    ("assistant", 3),
    ("tool", 2),
    ("assistant", 5),
]


def test_a_wrong_mark_credits_the_turns_before_it_and_blames_it_and_what_follows():
    assert turn_credit.wrong_mark_labels([2, 4, 6], 4) == {2: 1.0, 4: -1.0, 6: -1.0}
    # Two annotators disagree on where it went wrong; a turn preference adds its own label.
    rewards = turn_credit.judged_turn_rewards([2, 4, 6], wrong_marks=[4, 6], won=[2], lost=[6])
    assert rewards == {2: 1.0, 4: 0.0, 6: -1.0}
    # Labels on turns that are not assistant turns (a stale index) are ignored.
    assert turn_credit.judged_turn_rewards([2], won=[3], lost=[9]) == {}


def test_the_tokens_of_the_bad_turn_get_a_lower_advantage_than_the_good_turns():
    r = rollout(TURNS)
    group = [turn_credit.judged_turn_rewards([2, 4, 6], wrong_marks=[6]), {}]
    steps = turn_credit.step_advantages(group)
    tokens = turn_credit.rollout_token_advantages(r, steps[0], weight=1.0)
    assert tokens is not None and len(tokens) == len(r.completion_ids) == len(r.loss_mask)
    # completion: assistant #2 (4 tokens), tool #3 (2), assistant #4 (3), tool #5 (2), assistant #6 (5)
    good, bad = tokens[0], tokens[-1]
    assert bad < r.advantage < good
    assert tokens[:4] == [good] * 4 and tokens[6:9] == [good] * 3 and tokens[11:] == [bad] * 5
    assert tokens[4:6] == [r.advantage] * 2  # tool output: no per-turn reward, no loss anyway
    # The other sample had no per-turn rewards: its tokens keep the trajectory advantage.
    assert turn_credit.rollout_token_advantages(rollout(TURNS), steps[1], weight=1.0) is None


def test_without_per_turn_rewards_the_advantages_are_exactly_todays():
    r = rollout(TURNS)
    for steps, weight in (({}, 1.0), ({2: 1.0}, 0.0)):
        assert turn_credit.rollout_token_advantages(r, steps, weight) is None
    # Equal per-turn rewards across the group carry no relative credit: nothing changes.
    assert turn_credit.step_advantages([{2: 1.0, 4: 1.0}, {2: 1.0}]) == [{}, {}]
    tensor = turn_credit.advantage_tensor([0.5, -1.25], [None, None], width=7)
    assert tensor.shape == (2,) and torch.equal(tensor, torch.tensor([0.5, -1.25]))


def test_turns_that_do_not_tile_the_tokens_are_not_credited():
    r = rollout(TURNS)
    r.completion_ids = r.completion_ids[:-1]  # a trainer that reported its turns' tokens wrongly
    assert turn_credit.rollout_token_advantages(r, {6: -1.0}, weight=1.0) is None


def test_the_loss_takes_per_token_advantages_and_pushes_the_bad_turn_down():
    r = rollout(TURNS)
    other = rollout([("system", 3), ("user", 2), ("assistant", 6)], advantage=-0.5)
    r.token_advantages = turn_credit.rollout_token_advantages(r, {2: 1.0, 4: 1.0, 6: -2.0}, weight=1.0)
    width = max(len(r.completion_ids), len(other.completion_ids))
    adv = turn_credit.advantage_tensor(
        [r.advantage, other.advantage], [r.token_advantages, other.token_advantages], width
    )
    assert adv.shape == (2, width)
    assert adv[1].tolist() == [-0.5] * width  # a row without per-token values repeats its advantage
    mask = torch.zeros(2, width)
    mask[0, : len(r.loss_mask)] = torch.tensor(r.loss_mask, dtype=torch.float)
    mask[1, :6] = 1.0
    logp = torch.zeros(2, width, requires_grad=True)
    loss, _ = policy_loss(logp, logp.detach(), adv, mask)
    loss.backward()
    grad = logp.grad[0]
    # Gradient descent raises log-probs where the gradient is negative: the good turns' tokens go up,
    # the bad turn's tokens go down, tool tokens (masked) are untouched.
    assert (grad[:4] < 0).all() and (grad[6:9] < 0).all() and (grad[11:16] > 0).all()
    assert (grad[4:6] == 0).all()


def test_a_per_sequence_tensor_and_its_per_token_copy_give_the_same_loss():
    logp = torch.randn(2, 5)
    old = logp + 0.1 * torch.randn(2, 5)
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0]])
    per_sequence = torch.tensor([0.7, -0.3])
    per_token = turn_credit.advantage_tensor([0.7, -0.3], [[0.7] * 5, None], width=5)
    for agg in ("token-mean", "seq-mean-token-mean"):
        a, _ = policy_loss(logp, old, per_sequence, mask, loss_agg=agg)
        b, _ = policy_loss(logp, old, per_token, mask, loss_agg=agg)
        assert a.item() == pytest.approx(b.item(), abs=1e-7)


# --- in the trainer ------------------------------------------------------------------------------------


class TurnScoringRubric:
    """A rubric that scores each trajectory 1, 2, 3… and its first assistant turn by its position in the
    group: per-turn rewards with variance, and a trajectory reward with variance too."""

    def score_group(self, trajectories):
        from trainers.rubrics.scoring import ComponentScore, RubricScore

        scores = []
        for i, t in enumerate(trajectories):
            first = next(k for k, turn in enumerate(t.turns) if turn.role == "assistant")
            component = ComponentScore(
                "rank", "python", float(i), 1.0, float(i), "position", turn_rewards={first: -i}
            )
            scores.append(RubricScore(float(i), [component], {first: float(-i)}))
        return scores


def _step(tiny, toy_env, weight: float):
    import copy

    from trainers.recipes.grpo import Trainer
    from trainers.sdk.events import MemorySink

    model, tokenizer = tiny
    config = {
        "max_steps": 1,
        "group_size": 3,
        "prompts_per_step": 1,
        "max_new_tokens": 6,
        "max_turns": 1,
        "eval_tasks": 0,
        "checkpoint_every": 0,
        "seed": 5,
        "turn_advantage_weight": weight,
    }
    trainer = Trainer(
        config,
        sink=MemorySink(),
        env_factory=toy_env,
        rubric=TurnScoringRubric(),
        model=copy.deepcopy(model),
        tokenizer=tokenizer,
    )
    trainer.setup()
    seen = []
    update = trainer.update
    trainer.update = lambda rollouts, timings: seen.extend(rollouts) or update(rollouts, timings)
    try:
        metrics = trainer.train_step()
    finally:
        trainer.rollouts.close()
    return metrics, seen


def test_the_trainer_credits_turns_only_when_asked(tiny, toy_env):
    plain, rollouts = _step(tiny, toy_env, 0.0)
    assert rollouts and all(r.token_advantages is None for r in rollouts)
    credited, rollouts = _step(tiny, toy_env, 1.0)
    # The same samples (same seeds): the trajectory advantages agree; the tokens of the sample whose turn
    # scored lowest get less than its trajectory advantage, those of the highest more.
    assert [r.token_advantages is not None for r in rollouts] == [True] * 3
    worst, best = rollouts[-1], rollouts[0]
    assert max(worst.token_advantages) < worst.advantage and min(best.token_advantages) > best.advantage
    assert credited["grad_norm"] != pytest.approx(plain["grad_norm"])  # a different gradient

"""The curriculum from failures on the real arithmetic environment's generator: what a step's outcomes do to
the task pool (variants of failures with their lineage, the band, the replay buffer) and what the next
step draws."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trainers.config import resolve_run_config
from trainers.envs.arithmetic import ArithmeticCalculatorEnv
from trainers.learn.curriculum import TaskPool, difficulty_of, environment_variants
from trainers.run_config import RunConfig


def make_env():
    return ArithmeticCalculatorEnv(min_digits=1, max_digits=3, max_operands=3, curriculum=False)


def group(task, wins: list[bool]):
    return [
        SimpleNamespace(
            task=task, reward=float(w), trajectory=SimpleNamespace(info={"correct": w}, env_reward=float(w))
        )
        for w in wins
    ]


def pool(**knobs):
    config = RunConfig.build(
        resolve_run_config("grpo", {"curriculum": "from_failures", "prompts_per_step": 2, **knobs})
    )
    stream = iter(make_env().tasks("train", 100, 0))
    return TaskPool(
        config, base=lambda n: [next(stream) for _ in range(n)], variants=environment_variants(make_env)
    )


def test_a_failure_seeds_variants_near_its_difficulty_and_they_are_drawn_next():
    p = pool(curriculum_variants=3)
    hard, easy = p.next_tasks(2)
    assert p.drawn == {"tasks": 2, "frontier": 0, "replay": 0}
    p.observe(1, [group(hard, [False] * 4), group(easy, [True] * 4)])
    born = [e for e in p.entries.values() if e.parent == hard.id]
    assert len(born) == 3 and all(e.generator == "environment" and e.born == 1 for e in born)
    # the environment's own generator, the nearest of its fresh tasks in difficulty
    assert all(abs(difficulty_of(e.task)[0] - difficulty_of(hard)[0]) < 0.35 for e in born)
    assert p.entries[hard.id].state == "failed" and p.entries[easy.id].state == "mastered"
    assert p.replay == {easy.id: 1.0}

    drawn = p.next_tasks(4)  # one replayed success (a quarter), the rest from the frontier
    assert p.drawn == {"tasks": 0, "frontier": 3, "replay": 1}
    assert [t.id for t in drawn[:3]] == [e.task.id for e in born] and drawn[3].id == easy.id
    p.next_tasks(2)  # the frontier is empty: the run's own, and half a replay owed
    assert p.drawn == {"tasks": 2, "frontier": 0, "replay": 0}
    p.next_tasks(2)
    assert p.drawn == {"tasks": 1, "frontier": 0, "replay": 1}


def test_the_band_keeps_generated_tasks_the_policy_sometimes_solves():
    p = pool(curriculum_variants=2, curriculum_band_low=0.25, curriculum_band_high=0.75)
    first, _ = p.next_tasks(2)
    p.observe(1, [group(first, [False] * 4)])
    a, b = [e.task for e in p.entries.values() if e.parent == first.id]
    p.next_tasks(2)
    p.observe(2, [group(a, [True, False, False, True]), group(b, [True] * 4)])
    assert p.entries[a.id].state == "frontier" and p.frontier == [a.id]  # in the band: kept
    assert p.entries[b.id].state == "mastered"  # above it: replay only
    report = p.report(2)
    assert report["size"] == len(p.entries) and report["replay"] == 2
    row = next(r for r in report["entries"] if r["id"] == a.id)
    assert row["parent"] == first.id and row["rate"] == 0.5 and row["difficulty"]


def test_the_replay_buffer_evicts_the_most_confidently_solved_first():
    p = pool(curriculum_replay_size=1)
    x, y = p.next_tasks(2)
    p.observe(1, [group(x, [True] * 4), group(y, [True, False, False, False])])
    assert p.replay == {y.id: 0.25}


def test_a_reward_threshold_makes_the_rubric_the_outcome_reward_model():
    p = pool(curriculum_success="reward", curriculum_success_threshold=0.8)
    task = p.next_tasks(1)[0]
    samples = group(task, [True, True])
    samples[0].reward = 0.5  # correct by the environment, but the ORM (the rubric's reward) says no
    assert p.success_rate(samples) == 0.5


@pytest.mark.slow
def test_a_run_draws_from_the_pool_and_reports_it(tiny):
    """Any run can use it: a GRPO run on the arithmetic environment with a (tiny, always failing) model —
    step 1's failures seed step 2's tasks, and each step's pool reaches the dashboard as a task_pool event."""
    from trainers.learn.trainer import train

    from trainers.sdk import wire_check
    from trainers.sdk.events import MemorySink

    model, tokenizer = tiny
    sink = MemorySink()
    config = {
        "environment": {"kind": "arithmetic_calculator", "config": {"curriculum": False, "max_digits": 3}},
        "curriculum": "from_failures",
        "max_steps": 2,
        "group_size": 2,
        "prompts_per_step": 2,
        "max_new_tokens": 4,
        "max_turns": 1,
        "eval_tasks": 0,
        "checkpoint_every": 0,
    }
    assert train(config, sink=sink, model=model, tokenizer=tokenizer).status == "SUCCEEDED"
    assert wire_check.check_batch({"events": sink.events}) == {}
    pools = [e for e in sink.events if e["type"] == "task_pool"]
    assert [p["step"] for p in pools] == [1, 2]
    assert pools[0]["drawn"] == {"tasks": 2, "frontier": 0, "replay": 0}
    assert pools[1]["drawn"]["frontier"] == 2
    failed = {e["id"] for e in pools[0]["entries"] if e["state"] == "failed"}
    born = [e for e in pools[1]["entries"] if e["parent"] and e["born"] == 1]
    assert failed and born and {e["parent"] for e in born} <= failed
    step2 = {
        i["task_id"]
        for e in sink.events
        if e["type"] == "trajectories" and e["step"] == 2
        for i in e["items"]
    }
    assert step2 <= {e["id"] for e in born}
    # they failed too: retired (too hard), and they seeded the next generation, with its lineage
    assert any(e["parent"] in step2 and e["born"] == 2 for e in pools[1]["entries"])

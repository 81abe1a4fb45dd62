"""The `reasoning_gym` kind on the real reasoning-gym package: generated tasks, disjoint splits, its own grading."""

from __future__ import annotations

import pytest

from trainers.envs.base import run_episode
from trainers.registry import environment_kind

SUMS = {
    "dataset": "basic_arithmetic",
    "dataset_config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
    "pool_size": 500,
}


def build(config):
    return environment_kind("reasoning_gym").build(config)


def test_train_and_eval_never_share_a_task_and_eval_does_not_depend_on_the_seed():
    env = build(SUMS)
    train = env.tasks("train", 200, seed=0)
    evals = env.tasks("eval", 20, seed=0)
    assert not {t.prompt for t in train} & {t.prompt for t in evals}
    assert {t.id for t in env.tasks("eval", 1000, seed=1)} == {t.id for t in env.tasks("eval", 1000, seed=0)}
    assert [t.id for t in build(SUMS).tasks("train", 20, seed=0)] == [t.id for t in train[:20]]
    assert train[0].prompt.startswith("Calculate") and train[0].meta["entry"]["metadata"]["num_terms"] == 2


def test_the_generators_own_score_answer_grades():
    env = build(SUMS)
    task = env.tasks("eval", 1, seed=0)[0]
    right = run_episode(env, task, 0, lambda m: f"Easy. <answer>{task.answer}</answer>")
    wrong = run_episode(env, task, 0, lambda m: "<answer>1000</answer>")
    assert right.env_reward == 1.0 and right.info["last_step"]["correct"]
    assert (
        wrong.env_reward < 1.0 and not wrong.info["last_step"]["correct"]
    )  # partial credit is the generator's call
    assert "<answer>" in env.system_prompt()


def test_the_answer_tag_can_be_required():
    env = build({**SUMS, "require_answer_tag": True})
    task = env.tasks("eval", 1, seed=0)[0]
    assert run_episode(env, task, 0, lambda m: str(task.answer)).env_reward == 0.0
    loose = build(SUMS)
    assert run_episode(loose, task, 0, lambda m: str(task.answer)).env_reward == 1.0


def test_another_generator_and_its_options():
    env = build(
        {"dataset": "leg_counting", "dataset_config": {"min_animals": 1, "max_animals": 2}, "pool_size": 200}
    )
    task = env.tasks("train", 1, seed=0)[0]
    assert "legs" in task.prompt
    assert run_episode(env, task, 0, lambda m: f"<answer>{task.answer}</answer>").env_reward == 1.0


def test_an_unknown_generator_or_option_fails_when_built():
    with pytest.raises(ValueError, match="Task generator must be one of: 'ab', 'acre'"):
        build({"dataset": "no_such_generator"})  # not in reasoning-gym's list: refused with the valid names
    with pytest.raises(ValueError, match="cannot make 'basic_arithmetic'"):
        build({"dataset": "basic_arithmetic", "dataset_config": {"bogus_option": 1}})


def test_the_dataset_is_picked_from_reasoning_gyms_own_list_and_a_typo_gets_the_valid_names():
    from trainers.envs import REASONING_GYM_DATASETS
    from trainers.registry import environment_kind

    reasoning_gym = pytest.importorskip("reasoning_gym")
    assert REASONING_GYM_DATASETS == sorted(reasoning_gym.factory.DATASETS)
    kind = environment_kind("reasoning_gym")
    assert kind.config_schema["properties"]["dataset"]["enum"] == REASONING_GYM_DATASETS
    (message,) = kind.validate({"dataset": "basic_arithmetc"})["dataset"]
    assert "(got 'basic_arithmetc'). Did you mean 'basic_arithmetic' or " in message
    assert "'leg_counting'" in message and "'chain_sum'" in message  # every valid name is listed

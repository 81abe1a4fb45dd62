"""Each ecosystem kind trains unchanged: a 2-step GRPO run through trainers.recipes.grpo.train on the bundled model."""

from __future__ import annotations

import pytest

from trainers.envs.openenv_server import stop_managed_servers
from trainers.recipes.grpo import train
from trainers.sdk.events import MemorySink

pytestmark = pytest.mark.slow

TINY = {
    "max_steps": 2,
    "group_size": 2,
    "prompts_per_step": 1,
    "max_new_tokens": 8,
    "max_turns": 2,
    "eval_tasks": 0,
    "checkpoint_every": 0,
    "learning_rate": 1e-5,
}

KINDS = {
    "openenv": (
        {"server_app": "tests.fixtures.openenv_guess.server:app", "system_prompt": "Guess a number."},
        None,
    ),
    "openenv_tools": (
        {"server_app": "tests.fixtures.openenv_guess.server:mcp_app", "action_format": "tools"},
        None,
    ),
    "verifiers": (
        {"environment": "vf-word-tools"},
        {
            "criteria": [
                {
                    "name": "correct_answer",
                    "kind": "verifiers_rubric",
                    "weight": 1.0,
                    "params": {"function": "correct_answer"},
                },
                {
                    "name": "few_tool_calls",
                    "kind": "verifiers_rubric",
                    "weight": 0.2,
                    "params": {"function": "few_tool_calls"},
                },
            ]
        },
    ),
    "reasoning_gym": (
        {
            "dataset": "basic_arithmetic",
            "dataset_config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
        },
        {
            "criteria": [
                {"name": "env", "kind": "env_reward"},
                {"name": "math", "kind": "math_verify", "weight": 0.5},
            ]
        },
    ),
    "textarena": ({"game": "GuessTheNumber-v0"}, None),
}


@pytest.fixture(autouse=True, scope="module")
def _stop_servers():
    yield
    stop_managed_servers()


@pytest.mark.parametrize("name", sorted(KINDS))
def test_two_grpo_steps_on_the_kind(name, policy_copy):
    if name == "verifiers":
        pytest.importorskip("vf_word_tools")
    model, tokenizer = policy_copy
    env_config, rubric = KINDS[name]
    kind = "openenv" if name.startswith("openenv") else name
    sink = MemorySink()
    result = train(
        {**TINY, "environment": {"kind": kind, "config": env_config}, "rubric": rubric},
        sink=sink,
        model=model,
        tokenizer=tokenizer,
    )

    assert result.status == "SUCCEEDED" and result.step == 2, result
    items = [i for batch in sink.of_type("trajectories") for i in batch["items"]]
    assert len(items) == 4
    assert all(i["status"] in ("ok", "truncated") for i in items), [
        i.get("info", {}).get("error") for i in items
    ]
    for item in items:
        assert item["turns"][2]["role"] == "assistant" and item["env_state"] is not None
        assert item["reward"] == pytest.approx(sum(c["weighted"] for c in item["components"]))
    metrics = [e["values"] for e in sink.of_type("metrics") if e["split"] == "train"]
    assert len(metrics) == 2 and all("loss" in m for m in metrics)
    if rubric:
        names = {c["name"] for c in items[0]["components"]}
        assert names == {c["name"] for c in rubric["criteria"]}

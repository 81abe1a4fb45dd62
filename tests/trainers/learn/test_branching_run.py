"""A branching run end to end (slow: the bundled SmolLM2-135M on the calculator environment): two steps
of `rollout_strategy: branching` with hard attribution and the entropy-balanced clip; groups branch after
tool results, every group spends exactly its budget, what the dashboard receives passes the wire check,
and the update trains on the tree."""

from __future__ import annotations

import math

import pytest

from trainers.recipes.grpo import Trainer
from trainers.sdk import wire_check
from trainers.sdk.events import MemorySink

pytestmark = pytest.mark.slow


def test_a_branching_run_branches_after_tool_results_within_the_group_budget(policy_copy):
    model, tokenizer = policy_copy
    sink = MemorySink()
    config = {
        "max_steps": 2,
        "group_size": 4,
        "prompts_per_step": 2,
        "max_new_tokens": 40,
        "max_turns": 3,
        "eval_tasks": 0,
        "checkpoint_every": 0,
        "learning_rate": 1e-5,
        "environment": {"kind": "arithmetic_calculator", "config": {"max_digits": 1}},
        "rollout_strategy": "branching",
        "branch_initial_samples": 2,
        "branch_threshold": -1.0,  # every tool step draws (ARPO's reference code)
        "branch_base_probability": 1.0,
        "branch_attribution": "hard",
        "entropy_balanced_clip": True,
    }
    result = Trainer(config, sink=sink, model=model, tokenizer=tokenizer).run()
    assert result.status == "SUCCEEDED" and result.step == 2
    items = [item for e in sink.of_type("trajectories") for item in e["items"] if item["split"] == "train"]
    for item in items:
        assert not wire_check.check_item(item), item.get("branch")
    groups: dict[tuple[int, int], list[dict]] = {}
    for e in sink.of_type("trajectories"):
        for item in e["items"]:
            groups.setdefault((e["step"], item["group"]), []).append(item)
    assert len(groups) == 4
    assert all(sorted(i["sample"] for i in g) == [0, 1, 2, 3] for g in groups.values())  # budget: 4 each
    branches = [i for i in items if i["branch"]]
    assert branches, "the 135M model called the calculator and some group branched after the result"
    for b in branches:
        group = next(g for g in groups.values() if b in g)
        parent = next(i for i in group if i["sample"] == b["branch"]["parent"])
        turn = b["branch"]["turn"]
        assert [t["text"] for t in b["turns"][:turn]] == [t["text"] for t in parent["turns"][:turn]]
        assert b["turns"][turn - 1]["role"] == "tool"
        assert math.isfinite(b["branch"]["entropy"]) and b["branch"]["initial_entropy"] > 0
    train = [e["values"] for e in sink.of_type("metrics") if e["split"] == "train"]
    assert len(train) == 2 and all(math.isfinite(m["loss"]) for m in train)

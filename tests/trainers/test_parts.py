"""The registry of training parts (trainers/parts.py): the built-ins and the example package's parts
(tests/fixtures/rs_example_parts, installed editable by the Makefile) side by side, a broken plugin as a
warning, runs refused for parts this machine lacks, and a run trained with the example's parts."""

from __future__ import annotations

from importlib.metadata import EntryPoint
from types import SimpleNamespace

import pytest

from trainers.config import resolve_run_config, validate_run_config
from trainers.parts import (
    BUILTIN_PARTS,
    PART_KINDS,
    PARTS_ENTRY_POINTS,
    build_part,
    collect_parts,
    part_catalogue,
    registered_parts,
)
from trainers.run_config import RunConfig


def run_config(**knobs):
    return RunConfig.build(resolve_run_config("grpo", knobs))


def test_every_kind_has_its_built_ins_and_the_example_package_adds_its_own():
    parts = registered_parts()
    assert set(parts) == set(PART_KINDS)
    assert {"grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp"} <= set(parts["advantage_estimator"])
    assert "ppo_clip" in parts["loss"]
    assert "independent" in parts["rollout_strategy"]
    assert {"tasks", "from_failures"} <= set(parts["task_source"])
    median = parts["advantage_estimator"]["median_baseline"]
    ladder = parts["rollout_strategy"]["temperature_ladder"]
    assert (median.source, median.version) == ("rs-example-parts", "0.2.0")
    assert parts["advantage_estimator"]["grpo"].source == "rollout-studio"
    # what a worker reports: names, versions, docstrings and a JSON schema per part
    described = {(p["kind"], p["name"]): p for p in part_catalogue()}
    assert "median" in described["advantage_estimator", "median_baseline"]["description"]
    assert ladder.options_schema["properties"]["spread"]["default"] == 0.5
    assert described["rollout_strategy", "temperature_ladder"]["options_schema"] == dict(
        ladder.options_schema
    )


def test_a_broken_plugin_is_a_warning_and_the_rest_still_loads():
    broken = EntryPoint(name="broken", value="no_such_parts_module:PART", group=PARTS_ENTRY_POINTS)
    clash = EntryPoint(name="clash", value="trainers.parts:BUILTIN_PARTS", group=PARTS_ENTRY_POINTS)
    with pytest.warns(RuntimeWarning) as caught:
        parts = collect_parts(BUILTIN_PARTS, [broken, clash])
    messages = [str(w.message) for w in caught]
    assert any("'broken'" in m and "did not load" in m and "no_such_parts_module" in m for m in messages)
    assert any("'clash'" in m and "'grpo'" in m and "already has" in m for m in messages)
    assert "grpo" in parts["advantage_estimator"] and "independent" in parts["rollout_strategy"]


def test_a_run_naming_a_part_this_machine_lacks_is_refused_with_the_nearest_name():
    errors = validate_run_config(resolve_run_config("grpo", {"algorithm": "median_baselin"}))
    assert errors["algorithm"] == [
        "Advantage estimator 'median_baselin' is not installed on this machine. Did you mean "
        "'median_baseline'? Installed: dapo, dr_grpo, grpo, median_baseline, reinforce_pp, rloo."
    ]
    errors = validate_run_config(resolve_run_config("grpo", {"rollout_strategy": "branchy"}))
    assert errors["rollout_strategy"][0].startswith(
        "Rollout strategy 'branchy' is not installed on this machine. Did you mean 'branching'?"
    )
    assert validate_run_config(resolve_run_config("grpo", {"rollout_strategy": "branching"})) == {}


def test_a_parts_options_are_checked_against_its_own_schema():
    config = resolve_run_config(
        "grpo",
        {"rollout_strategy": "temperature_ladder", "part_options": {"rollout_strategy": {"spread": 2}}},
    )
    assert validate_run_config(config) == {
        "part_options.rollout_strategy.spread": ["Spread must be 1 or less (got 2)."]
    }
    config["part_options"] = {"advantage_estimator": {"scale": True}}  # grpo takes no options
    assert validate_run_config(config) == {"part_options.advantage_estimator": ["Unknown field(s): 'scale'"]}


def test_the_trainer_resolves_the_estimator_the_config_names():
    from trainers.learn.learner import assign_advantages

    median = build_part("advantage_estimator", run_config(algorithm="median_baseline"))
    assert median.group_local
    assert median.advantages([[0.0, 1.0, 1.0, 5.0]]) == [[-1.0, 0.0, 0.0, 4.0]]
    scaled = build_part(
        "advantage_estimator",
        run_config(algorithm="median_baseline", part_options={"advantage_estimator": {"scale": True}}),
    )
    assert scaled.advantages([[0.0, 2.0]])[0] == pytest.approx([-1.0, 1.0])
    batch = build_part("advantage_estimator", RunConfig.build(resolve_run_config("reinforce_pp", {})))
    assert not batch.group_local  # whitened over the batch: groups wait for the whole batch

    group = [
        SimpleNamespace(
            reward=r, turn_rewards={}, trajectory=SimpleNamespace(turns=[]), prompt_ids=[], completion_ids=[]
        )
        for r in (0.0, 1.0, 3.0)
    ]
    assign_advantages([group], run_config(algorithm="median_baseline"))
    assert [r.advantage for r in group] == [-1.0, 0.0, 2.0]


def test_the_temperature_ladder_spreads_a_groups_temperatures():
    from rs_example_parts import ladder

    assert ladder(1.0, 0.5, 3) == [0.5, 1.0, 1.5]
    assert ladder(0.7, 0.5, 1) == [0.7]


@pytest.mark.slow
def test_a_run_trains_with_the_example_packages_estimator_and_strategy(tiny):
    """Two steps of a GRPO-family run whose advantages come from `median_baseline` and whose groups are
    sampled by `temperature_ladder`: the run's rollouts use the ladder, and each trained sample carries
    the advantage the median gives it."""
    from rs_example_parts import MedianBaseline, TemperatureLadder

    from trainers.recipes.grpo import Trainer
    from trainers.sdk.events import MemorySink

    model, tokenizer = tiny
    sink = MemorySink()
    config = {
        "environment": {"kind": "arithmetic_calculator", "config": {"curriculum": False, "max_digits": 2}},
        "algorithm": "median_baseline",
        "rollout_strategy": "temperature_ladder",
        "part_options": {"rollout_strategy": {"spread": 0.5}},
        "max_steps": 2,
        "group_size": 3,
        "prompts_per_step": 2,
        "max_new_tokens": 4,
        "max_turns": 1,
        "eval_tasks": 0,
        "checkpoint_every": 0,
    }
    trainer = Trainer(config, sink=sink, model=model, tokenizer=tokenizer)
    assert trainer.run().status == "SUCCEEDED"
    assert isinstance(trainer.rollouts.strategy, TemperatureLadder)
    assert trainer.rollouts.strategy.spread == 0.5
    assert isinstance(trainer.reporter.estimator, MedianBaseline)
    groups: dict[tuple[int, int], list[dict]] = {}
    for event in (e for e in sink.events if e["type"] == "trajectories"):
        for item in event["items"]:
            groups.setdefault((event["step"], item["group"]), []).append(item)
    assert len(groups) == 4 and all(len(g) == 3 for g in groups.values())
    for group in groups.values():
        assert sorted(i["sample"] for i in group) == [0, 1, 2]
        median = sorted(i["reward"] for i in group)[1]
        assert [i["advantage"] for i in group] == pytest.approx([i["reward"] - median for i in group])

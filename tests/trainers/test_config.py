"""The run config: presets layer correctly, validation names the bad field, no torch in the web path."""

import subprocess
import sys

import pytest

from trainers.config import (
    PRESETS,
    RUN_CONFIG_SCHEMA,
    default_run_config,
    resolve_run_config,
    validate_run_config,
)
from trainers.run_config import RunConfig


def _errors_outside_environment(config: dict) -> dict:
    return {k: v for k, v in validate_run_config(config).items() if not k.startswith("environment")}


def test_every_knob_documents_itself():
    for name, prop in RUN_CONFIG_SCHEMA["properties"].items():
        assert prop.get("title"), name
        assert "description" in prop, name
        assert "default" in prop or name == "environment", name
        if prop.get("type") in ("integer", "number"):
            assert "minimum" in prop or "exclusiveMinimum" in prop, name
            assert "maximum" in prop, name


def test_defaults_are_valid_and_complete():
    config = default_run_config()
    assert config["model"] == "smollm2-135m"
    assert config["group_size"] == 8
    assert config["kl_coef"] == 0
    assert config["mask_tool_tokens"] is True
    assert config["lora"]["enabled"] is False and config["lora"]["r"] == 16
    assert set(config) == set(RUN_CONFIG_SCHEMA["properties"])
    assert _errors_outside_environment(config) == {}


def test_presets_set_the_published_algorithms():
    grpo = resolve_run_config("grpo", {})
    assert (grpo["scale_rewards"], grpo["loss_agg"], grpo["clip_low"], grpo["clip_high"]) == (
        "group",
        "seq-mean-token-mean",
        0.2,
        0.2,
    )
    dr = resolve_run_config("dr_grpo", {})
    assert (dr["scale_rewards"], dr["loss_agg"], dr["clip_high"]) == ("none", "seq-mean-token-sum-norm", 0.2)
    dapo = resolve_run_config("dapo", {})
    assert (dapo["clip_low"], dapo["clip_high"], dapo["loss_agg"]) == (0.2, 0.28, "token-mean")
    assert dapo["dynamic_sampling"] is True and dapo["overlong_buffer"] > 0
    for name in ("grpo", "dr_grpo", "dapo"):
        assert name in PRESETS
        assert _errors_outside_environment(resolve_run_config(name, {})) == {}


def test_overrides_win_over_the_preset_and_nested_lora_merges():
    config = resolve_run_config(
        "dapo", {"clip_high": 0.3, "lora": {"enabled": True, "r": 4}, "group_size": 4}
    )
    assert config["clip_high"] == 0.3
    assert config["dynamic_sampling"] is True  # from the preset
    assert config["lora"] == {**default_run_config()["lora"], "enabled": True, "r": 4}
    assert config["preset"] == "dapo"


def test_environment_override_replaces_the_config_of_another_kind():
    config = resolve_run_config("grpo", {"environment": {"kind": "other", "config": {"x": 1}}})
    assert config["environment"] == {"kind": "other", "config": {"x": 1}}
    config = resolve_run_config("grpo", {"environment": {"kind": "arithmetic_calculator"}})
    assert config["environment"]["config"] == {}


def test_preset_from_overrides_and_unknown_preset():
    assert resolve_run_config(None, {"preset": "dr_grpo"})["preset"] == "dr_grpo"
    with pytest.raises(ValueError, match="unknown preset"):
        resolve_run_config("ppo", {})


def test_validation_names_each_bad_field():
    config = resolve_run_config("grpo", {})
    config.update(
        clip_low=3, temperature=-1, loss_agg="mean", surprise=1, max_turns_schedule=[[5, 2], [1, 3]]
    )
    config["lora"]["r"] = 0
    errors = validate_run_config(config)
    assert "clip_low" in errors and "temperature" in errors and "loss_agg" in errors
    assert "lora.r" in errors
    assert "max_turns_schedule" in errors
    assert any("surprise" in m for m in errors[""])


def test_cross_field_rules():
    errors = validate_run_config(resolve_run_config("rloo", {"group_size": 1, "max_staleness": 1}))
    assert "group_size" in errors and "max_staleness" in errors
    errors = validate_run_config(
        resolve_run_config("grpo", {"num_learner_workers": 2, "lora": {"enabled": True}})
    )
    assert "num_learner_workers" in errors


def test_a_stored_config_with_one_step_off_policy_still_resolves():
    """Runs stored before max_staleness replaced the boolean keep loading: true means one version ahead."""
    old = {"num_rollout_workers": 1, "one_step_off_policy": True}
    config = resolve_run_config("grpo", old)
    assert "one_step_off_policy" not in config and config["max_staleness"] == 1
    assert validate_run_config(config) == {}
    assert resolve_run_config("grpo", {"one_step_off_policy": False})["max_staleness"] == 0
    # An explicit new knob wins over the old one.
    assert resolve_run_config("grpo", {**old, "max_staleness": 2})["max_staleness"] == 2


def test_unknown_environment_kind_is_reported_on_the_kind():
    errors = validate_run_config(resolve_run_config("grpo", {"environment": {"kind": "no_such_kind"}}))
    assert "environment.kind" in errors


def test_max_turns_schedule_grows_the_horizon():
    config = resolve_run_config("grpo", {"max_turns": 1, "max_turns_schedule": [[10, 2], [20, 4]]})
    assert [RunConfig.build(config).max_turns_at(s) for s in (0, 9, 10, 19, 20, 500)] == [1, 1, 2, 2, 4, 4]


def test_config_module_does_not_import_torch():
    code = "import sys, trainers.config; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_environment_config_is_validated_by_its_kind():
    config = resolve_run_config(
        "grpo", {"environment": {"kind": "arithmetic_calculator", "config": {"max_digits": 99, "bogus": 1}}}
    )
    errors = validate_run_config(config)
    assert "environment.config.max_digits" in errors
    assert any("bogus" in m for m in errors["environment.config"])
    assert validate_run_config(resolve_run_config("dapo", {})) == {}


def test_the_overlong_knobs_configure_the_rubrics_criterion_instead_of_adding_a_second_penalty():
    rubric = {
        "aggregation": "weighted_sum",
        "criteria": [
            {"name": "correct", "kind": "numeric_match", "weight": 1.0, "params": {}},
            {
                "name": "short",
                "kind": "overlong_penalty",
                "weight": 0.5,
                "params": {"max_len": 999, "buffer": 9},
            },
        ],
    }
    config = resolve_run_config(
        "dapo", {"max_new_tokens": 64, "overlong_buffer": 16, "overlong_penalty": 2.0, "rubric": rubric}
    )
    spec = RunConfig.build(config).effective_rubric()
    overlong = [c for c in spec["criteria"] if c["kind"] == "overlong_penalty"]
    assert len(overlong) == 1 and overlong[0]["name"] == "short"
    assert overlong[0]["weight"] == 2.0
    assert overlong[0]["params"] == {
        "max_len": 64,
        "buffer": 16,
        "unit": "tokens",
        "scope": "longest_message",
    }
    assert rubric["criteria"][1]["params"] == {
        "max_len": 999,
        "buffer": 9,
    }  # the run's own spec is not changed

    without = RunConfig.build({**config, "rubric": {"criteria": rubric["criteria"][:1]}}).effective_rubric()
    assert [c["name"] for c in without["criteria"]] == ["correct", "overlong"]
    bare = RunConfig.build({**config, "rubric": None}).effective_rubric()
    assert [c["kind"] for c in bare["criteria"]] == [
        "env_reward",
        "overlong_penalty",
    ]  # the env's reward, penalised
    assert RunConfig.build({**config, "overlong_buffer": 0}).effective_rubric() == config["rubric"]


def test_the_overlong_criterion_and_the_knob_compute_the_same_penalty_at_every_buffer():
    from trainers.learn.algorithms import overlong_penalty
    from trainers.rubrics.criteria import OverlongPenalty

    for buffer in (0, 1, 16, 64):
        criterion = OverlongPenalty(max_len=64, buffer=buffer, unit="tokens")
        for length in (0, 32, 48, 63, 64, 65, 200):
            assert criterion.penalty(length) == overlong_penalty(length, 64, buffer)
    assert overlong_penalty(64, 64, 0) == 0.0 and overlong_penalty(65, 64, 0) == -1.0

"""The typed run config (trainers.run_config): it agrees with the schema the form and the API validate
(names, types, defaults), it round-trips what a run stores, and a wrong key fails when it is built."""

import dataclasses
import types
import typing
from collections.abc import Mapping

import pytest

from trainers.config import PRESETS, RUN_CONFIG_SCHEMA, default_run_config, resolve_run_config
from trainers.run_config import EnvironmentChoice, LoraConfig, RunConfig, RunConfigError

KNOBS = RUN_CONFIG_SCHEMA["properties"]


def json_types(annotation) -> set[str]:
    """The JSON schema types a Python annotation stands for."""
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        return set().union(*(json_types(a) for a in typing.get_args(annotation)))
    if annotation is type(None):
        return {"null"}
    if annotation is bool:
        return {"boolean"}
    if annotation is int:
        return {"integer"}
    if annotation is float:
        return {"number"}
    if annotation is str:
        return {"string"}
    if origin is tuple:
        return {"array"}
    if annotation in (LoraConfig, EnvironmentChoice) or origin is Mapping:
        return {"object"}
    raise AssertionError(f"no JSON type for {annotation!r}")


def schema_types(prop: dict) -> set[str]:
    declared = prop["type"]
    return {declared} if isinstance(declared, str) else set(declared)


def typed_configs() -> list[type]:
    """RunConfig and the subclasses recipes declare for their own knobs (every recipe module imported)."""
    import importlib
    import importlib.util
    import pkgutil

    if importlib.util.find_spec("trainers.recipes") is not None:
        recipes = importlib.import_module("trainers.recipes")
        for module in pkgutil.iter_modules(recipes.__path__):
            importlib.import_module(f"trainers.recipes.{module.name}")
    found, todo = [], [RunConfig]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def field_names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_the_typed_configs_have_the_schemas_knobs():
    # Every knob of the schema is a field of RunConfig or of the config a recipe declares for its own.
    assert set().union(*(field_names(cls) for cls in typed_configs())) == set(KNOBS)
    assert field_names(LoraConfig) == set(KNOBS["lora"]["properties"])
    assert field_names(EnvironmentChoice) == set(KNOBS["environment"]["properties"])


@pytest.mark.parametrize(
    "cls, properties",
    [
        *((cls, KNOBS) for cls in typed_configs()),
        (LoraConfig, KNOBS["lora"]["properties"]),
        (EnvironmentChoice, KNOBS["environment"]["properties"]),
    ],
)
def test_each_field_has_the_type_the_schema_declares(cls, properties):
    hints = typing.get_type_hints(cls)
    mismatched = {
        name: (sorted(json_types(hints[name])), sorted(schema_types(properties[name])))
        for name in field_names(cls)
        if json_types(hints[name]) != schema_types(properties[name])
    }
    assert mismatched == {}


def test_the_typed_configs_defaults_are_the_schemas():
    defaults = default_run_config()
    for cls in typed_configs():
        assert cls().as_dict() == {k: v for k, v in defaults.items() if k in field_names(cls)}, cls
    assert LoraConfig().as_dict() == defaults["lora"]


def test_every_knob_has_its_help_text_from_the_schema():
    for f in dataclasses.fields(RunConfig):
        assert f.metadata["help"] == KNOBS[f.name]["description"] != "", f.name
        assert f"    {f.name}: " in RunConfig.__doc__
    assert "k3 KL" in RunConfig.help("kl_coef")


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_a_resolved_config_round_trips(preset):
    resolved = resolve_run_config(
        preset,
        {
            "max_turns_schedule": [[10, 2]],
            "lora": {"enabled": True, "r": 4},
            "environment": {"kind": "countdown", "config": {"max_turns": 3}},
            "rubric": {"criteria": [{"name": "c", "kind": "env_reward", "weight": 1.0, "params": {}}]},
        },
    )
    config = RunConfig.build(resolved)
    assert config.as_dict() == {k: v for k, v in resolved.items() if k in field_names(RunConfig)}
    assert config.lora.r == 4 and config.lora.target_modules == ("q_proj", "k_proj", "v_proj", "o_proj")
    assert config.environment.kind == "countdown" and config.environment.config == {"max_turns": 3}
    assert config.max_turns_schedule == ((10, 2),) and config.max_turns_at(10) == 2
    assert RunConfig.build(config) is config


def test_a_misspelt_knob_fails_when_the_config_is_built_naming_the_knob_it_meant():
    with pytest.raises(RunConfigError, match=r"no knob 'learnin_rate' \(did you mean 'learning_rate'\?\)"):
        RunConfig.build({**resolve_run_config("grpo"), "learnin_rate": 1e-5})
    with pytest.raises(RunConfigError, match=r"no knob 'lora\.alpah' \(did you mean 'alpha'\?\)"):
        RunConfig.build({"lora": {"alpah": 8}})
    with pytest.raises(RunConfigError, match=r"no knob 'environment\.kinds'"):
        RunConfig.build({"environment": {"kinds": "countdown"}})


def test_a_value_of_the_wrong_type_fails_when_the_config_is_built():
    with pytest.raises(RunConfigError, match="group_size: expected integer, got str '8'"):
        RunConfig.build({"group_size": "8"})
    with pytest.raises(RunConfigError, match="mask_truncated: expected boolean"):
        RunConfig.build({"mask_truncated": 1})
    with pytest.raises(RunConfigError, match="max_steps: expected integer, got bool"):
        RunConfig.build({"max_steps": True})
    with pytest.raises(RunConfigError, match="learning_rate: expected number, got NoneType"):
        RunConfig.build({"learning_rate": None})
    assert RunConfig.build({"learning_rate": 1, "max_steps": 3.0}).max_steps == 3  # YAML's 3.0 is 3
    assert RunConfig.build({"loss_norm_constant": None}).loss_norm_constant is None


def test_the_config_is_frozen():
    config = RunConfig.build(resolve_run_config("grpo"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.learning_rate = 1.0  # type: ignore[misc]
    changed = config.replace(learning_rate=2e-5)
    assert (changed.learning_rate, config.learning_rate) == (2e-5, 1e-6)
    with pytest.raises(RunConfigError):
        config.replace(learning_rat=2e-5)


def test_the_trainer_reads_a_typed_config():
    # The Trainer builds it once from the resolved dict; its parts read attributes.
    from trainers.recipes.grpo import Trainer

    trainer = Trainer({"max_steps": 3, "eval_tasks": 0})
    assert isinstance(trainer.config, RunConfig) and trainer.config.max_steps == 3
    assert Trainer(trainer.config).config == trainer.config

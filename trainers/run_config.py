"""The run config as the trainer reads it: one frozen, typed object built once from the resolved dict.

`trainers.config.RUN_CONFIG_SCHEMA` stays the single declaration of the knobs, their defaults and limits
(the form, the API and the CLI validate against it; a run stores the dict `resolve_run_config` returns).
`RunConfig.build(resolved)` turns that dict into a `RunConfig`: each knob an attribute with its type, its
default taken from the schema and its help text the schema's description (`RunConfig.help("kl_coef")`,
`dataclasses.fields(RunConfig)[i].metadata["help"]`, and the class docstring list them all), as TRL's
`GRPOConfig` does. The trainer, the sampler, the learner, the learner shards and the Ray rollout workers
read `config.learning_rate`, never `config["learning_rate"]`: a misspelt knob in the code is a type error
(mypy) instead of a `KeyError` mid-run, and a misspelt or mistyped key in the dict is refused when the
config is built, naming the key and the nearest knob.

tests/trainers/test_run_config.py proves the dataclasses and the schema agree: the same names, types that
match the schema's types, the same defaults.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from trainers.config import RUN_CONFIG_SCHEMA

_KNOBS: dict[str, Any] = RUN_CONFIG_SCHEMA["properties"]
_LORA_KNOBS: dict[str, Any] = _KNOBS["lora"]["properties"]

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "string": (str,),
    "array": (list, tuple),
    "object": (Mapping,),
    "null": (type(None),),
}


# The criterion the overlong knobs add to a rubric that has none (`RunConfig.effective_rubric`).
OVERLONG_CRITERION = "overlong"
# `token_stats: auto` sends token statistics for models up to this size: their cost (a per-token entropy
# from logits the learner computes anyway, ~12 bytes a token on the wire) is small next to a step there.
TOKEN_STATS_AUTO_MAX_PARAMS = 2e9


class RunConfigError(ValueError):
    """The run config names a knob that does not exist or gives one a value of the wrong type."""


def knob(name: str, properties: Mapping[str, Any] = _KNOBS) -> Any:
    """A dataclass field for the schema's knob `name`: its default and its help text come from the schema.

    A recipe with knobs of its own declares them in the schema (`trainers.config`) and reads them from a
    subclass of `RunConfig` with a `knob(...)` field each, which its trainer names as `config_class`."""
    prop = properties[name]
    metadata = {"help": prop.get("description", ""), "title": prop.get("title", name)}
    default = prop.get("default")
    if isinstance(default, list):
        return field(default=_frozen(default), metadata=metadata)
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def _frozen(value: Any) -> Any:
    """Lists as tuples, all the way down (a frozen config holds no list someone could append to)."""
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


def _thawed(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_thawed(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _thawed(v) for k, v in value.items()}
    return value


def _check(path: str, value: Any, prop: Mapping[str, Any]) -> None:
    types = prop.get("type")
    if types is None:
        return
    allowed = tuple(t for name in ([types] if isinstance(types, str) else types) for t in _JSON_TYPES[name])
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(value, bool) and bool not in allowed:  # True is an int to Python, not to the schema
        ok = False
    elif int in allowed and float not in allowed and isinstance(value, float):
        ok = value.is_integer()  # 2.0 from a YAML file is the integer 2
    else:
        ok = isinstance(value, allowed) or (numeric and float in allowed)
    if not ok:
        raise RunConfigError(f"run config {path}: expected {types}, got {type(value).__name__} {value!r}")


def _unknown(path: str, given: Mapping[str, Any], known: Mapping[str, Any]) -> None:
    for key in given:
        if key not in known:
            close = difflib.get_close_matches(str(key), list(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise RunConfigError(f"run config has no knob '{path}{key}'{hint}")


T = TypeVar("T")
C = TypeVar("C", bound="RunConfig")


def _build(
    cls: type[T], given: Mapping[str, Any], properties: Mapping[str, Any], prefix: str
) -> dict[str, Any]:
    """The keyword arguments of `cls` from `given` (schema defaults for what it leaves out), checked. A key
    the schema lacks is an error; a knob of the schema that `cls` has no field for (another recipe's) is
    left out."""
    _unknown(prefix, given, properties)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in given:
            value = given[f.name]
            _check(prefix + f.name, value, properties[f.name])
            if properties[f.name].get("type") == "integer" and isinstance(value, float):
                value = int(value)
            values[f.name] = _frozen(value)
    return values


@dataclass(frozen=True)
class LoraConfig:
    """The `lora` object: train low-rank adapters (peft) instead of all weights."""

    enabled: bool = knob("enabled", _LORA_KNOBS)
    r: int = knob("r", _LORA_KNOBS)
    alpha: float = knob("alpha", _LORA_KNOBS)
    dropout: float = knob("dropout", _LORA_KNOBS)
    target_modules: tuple[str, ...] = knob("target_modules", _LORA_KNOBS)

    @classmethod
    def build(cls, given: Mapping[str, Any]) -> LoraConfig:
        return cls(**_build(cls, given, _LORA_KNOBS, "lora."))

    def as_dict(self) -> dict[str, Any]:
        return {f.name: _thawed(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclass(frozen=True)
class EnvironmentChoice:
    """The `environment` object: a registered kind and its config (validated by the kind's own schema)."""

    kind: str = _KNOBS["environment"]["default"]["kind"]
    config: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def build(cls, given: Mapping[str, Any]) -> EnvironmentChoice:
        _unknown("environment.", given, _KNOBS["environment"]["properties"])
        kind = given.get("kind", cls.kind)
        if not isinstance(kind, str):
            raise RunConfigError(f"run config environment.kind: expected a string, got {kind!r}")
        config = given.get("config") or {}
        if not isinstance(config, Mapping):
            raise RunConfigError(f"run config environment.config: expected an object, got {config!r}")
        return cls(kind, dict(config))

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "config": _thawed(self.config)}


_NESTED = {"lora": LoraConfig, "environment": EnvironmentChoice}


@dataclass(frozen=True)
class RunConfig:
    """A resolved run config, typed. Build it with `RunConfig.build(resolve_run_config(...))`; the knobs'
    meanings are the schema's descriptions (listed below, and in `dataclasses.fields(...)[i].metadata`)."""

    preset: str = knob("preset")
    # --- model & hardware
    model: str = knob("model")
    backend: str = knob("backend")
    device: str = knob("device")
    dtype: str = knob("dtype")
    generation_dtype: str = knob("generation_dtype")
    torch_threads: int = knob("torch_threads")
    # --- algorithm
    algorithm: str = knob("algorithm")  # the advantage estimator: a registered part (trainers.parts)
    policy_loss: str = knob("policy_loss")  # a registered part (trainers.parts)
    part_options: Mapping[str, Any] = knob("part_options")  # {kind: the chosen part's options}
    scale_rewards: str = knob("scale_rewards")
    advantage_epsilon: float = knob("advantage_epsilon")
    turn_advantage_weight: float = knob("turn_advantage_weight")
    group_size: int = knob("group_size")
    prompts_per_step: int = knob("prompts_per_step")
    kl_coef: float = knob("kl_coef")
    clip_low: float = knob("clip_low")
    clip_high: float = knob("clip_high")
    loss_agg: str = knob("loss_agg")
    loss_norm_constant: int | None = knob("loss_norm_constant")
    updates_per_batch: int = knob("updates_per_batch")
    dynamic_sampling: bool = knob("dynamic_sampling")
    dynamic_sampling_max_rounds: int = knob("dynamic_sampling_max_rounds")
    overlong_buffer: int = knob("overlong_buffer")
    overlong_penalty: float = knob("overlong_penalty")
    mask_truncated: bool = knob("mask_truncated")
    mask_tool_tokens: bool = knob("mask_tool_tokens")
    # --- optimisation
    max_steps: int = knob("max_steps")
    learning_rate: float = knob("learning_rate")
    warmup_steps: int = knob("warmup_steps")
    weight_decay: float = knob("weight_decay")
    adam_beta1: float = knob("adam_beta1")
    adam_beta2: float = knob("adam_beta2")
    max_grad_norm: float = knob("max_grad_norm")
    grad_accum_steps: int = knob("grad_accum_steps")
    micro_batch_tokens: int = knob("micro_batch_tokens")
    activation_checkpointing: bool = knob("activation_checkpointing")
    seed: int = knob("seed")
    # --- sampling
    temperature: float = knob("temperature")
    top_p: float = knob("top_p")
    max_new_tokens: int = knob("max_new_tokens")
    rollout_strategy: str = knob("rollout_strategy")  # a registered part (trainers.parts)
    max_context_tokens: int = knob("max_context_tokens")
    # --- multi-turn
    max_turns: int = knob("max_turns")
    tool_format: str = knob("tool_format")
    max_turns_schedule: tuple[tuple[int, int], ...] = knob("max_turns_schedule")
    token_stats: str = knob("token_stats")
    # --- evaluation & checkpoints
    eval_every: int = knob("eval_every")
    eval_tasks: int = knob("eval_tasks")
    eval_temperature: float = knob("eval_temperature")
    checkpoint_every: int = knob("checkpoint_every")
    keep_best_n: int = knob("keep_best_n")
    best_metric: str = knob("best_metric")
    best_metric_mode: str = knob("best_metric_mode")
    auto_resume: int = knob("auto_resume")
    stop_on_hacking_alarm: bool = knob("stop_on_hacking_alarm")
    # --- task source (WebRL's curriculum from failures: trainers.learn.curriculum)
    curriculum: str = knob("curriculum")
    curriculum_variants: int = knob("curriculum_variants")
    curriculum_band_low: float = knob("curriculum_band_low")
    curriculum_band_high: float = knob("curriculum_band_high")
    curriculum_replay_share: float = knob("curriculum_replay_share")
    curriculum_replay_size: int = knob("curriculum_replay_size")
    curriculum_success: str = knob("curriculum_success")
    curriculum_success_threshold: float = knob("curriculum_success_threshold")
    curriculum_generator: str = knob("curriculum_generator")
    curriculum_generator_model: str = knob("curriculum_generator_model")
    curriculum_generator_base_url: str = knob("curriculum_generator_base_url")
    curriculum_generator_api_key_secret: str = knob("curriculum_generator_api_key_secret")
    curriculum_generator_max_new_tokens: int = knob("curriculum_generator_max_new_tokens")
    # --- branching rollouts (ARPO/AEPO, `rollout_strategy: branching`: trainers.rollout.branching)
    branch_initial_samples: int = knob("branch_initial_samples")
    branch_entropy_tokens: int = knob("branch_entropy_tokens")
    branch_threshold: float = knob("branch_threshold")
    branch_base_probability: float = knob("branch_base_probability")
    branch_entropy_weight: float = knob("branch_entropy_weight")
    branch_factor: int = knob("branch_factor")
    branch_attribution: str = knob("branch_attribution")
    branch_budget_split: str = knob("branch_budget_split")
    branch_consecutive_penalty: float = knob("branch_consecutive_penalty")
    entropy_balanced_clip: bool = knob("entropy_balanced_clip")
    # --- distribution
    num_rollout_workers: int = knob("num_rollout_workers")
    max_staleness: int = knob("max_staleness")
    tis_cap: float = knob("tis_cap")
    num_learner_workers: int = knob("num_learner_workers")
    # --- task
    environment: EnvironmentChoice = field(
        default_factory=EnvironmentChoice, metadata={"help": _KNOBS["environment"]["description"]}
    )
    rubric: Mapping[str, Any] | None = knob("rubric")
    lora: LoraConfig = field(default_factory=LoraConfig, metadata={"help": _KNOBS["lora"]["description"]})

    @classmethod
    def build(cls: type[C], resolved: Mapping[str, Any] | RunConfig) -> C:
        """The typed config of `resolved` (what `resolve_run_config` returns; knobs it leaves out take their
        schema defaults). RunConfigError names an unknown key (and the knob it was probably meant to be)
        or a value of the wrong type."""
        if isinstance(resolved, cls):
            return resolved
        if isinstance(resolved, RunConfig):
            resolved = resolved.as_dict()
        flat = {k: v for k, v in resolved.items() if k not in _NESTED}
        values = _build(cls, flat, _KNOBS, "")
        for name, nested in _NESTED.items():
            if name in resolved:
                given = resolved[name]
                if not isinstance(given, Mapping):
                    raise RunConfigError(f"run config {name}: expected an object, got {given!r}")
                values[name] = nested.build(given)  # type: ignore[attr-defined]
        if isinstance(values.get("rubric"), Mapping):
            values["rubric"] = dict(resolved["rubric"])
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        """The plain, JSON-able dict (what a run stores and a checkpoint's run_config.json holds)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.as_dict() if hasattr(value, "as_dict") else _thawed(value)
        return out

    def replace(self: C, **changes: Any) -> C:
        """A copy with `changes` (checked as `build` checks them)."""
        return type(self).build({**self.as_dict(), **changes})

    @staticmethod
    def help(name: str) -> str:
        """The schema's description of the knob `name`."""
        return str(_KNOBS[name].get("description", ""))

    # --- rules read off the config (one home each) ---------------------------------------------------

    def max_turns_at(self, step: int) -> int:
        """The max-turns horizon in force at `step` (0-based), from `max_turns_schedule` or `max_turns`."""
        turns = self.max_turns
        for start, value in self.max_turns_schedule:
            if step >= start:
                turns = value
        return turns

    def effective_rubric(self) -> dict[str, Any] | None:
        """The rubric spec the trainer scores with: the run's rubric, with the overlong knobs applied to its
        `overlong_penalty` criterion (one is added when it has none). With the knobs off, the rubric as
        given (None when the run has none: the environment's reward is the score)."""
        spec = _thawed(self.rubric) if self.rubric else None
        if not self.overlong_buffer:
            return spec
        params = {
            "max_len": self.max_new_tokens,
            "buffer": min(self.overlong_buffer, self.max_new_tokens),
            "unit": "tokens",
            "scope": "longest_message",
        }
        criteria = [dict(c) for c in (spec or {}).get("criteria", [])] or [
            {"name": "environment", "kind": "env_reward", "weight": 1.0, "params": {}}
        ]
        existing = next((c for c in criteria if c.get("kind") == "overlong_penalty"), None)
        if existing is not None:
            existing["params"] = {**existing.get("params", {}), **params}
            existing["weight"] = self.overlong_penalty
        else:
            criteria.append(
                {
                    "name": OVERLONG_CRITERION,
                    "kind": "overlong_penalty",
                    "weight": self.overlong_penalty,
                    "params": params,
                }
            )
        return {**(spec or {"aggregation": "weighted_sum"}), "criteria": criteria}

    def token_stats_enabled(self, parameters: float | None) -> bool:
        """Whether the run reports per-token statistics (`token_stats`); `parameters`: the policy's size."""
        if self.token_stats == "auto":
            return parameters is not None and parameters <= TOKEN_STATS_AUTO_MAX_PARAMS
        return self.token_stats == "on"


def _document(cls: type) -> None:
    """Append each knob's help text to the class docstring (what `help(RunConfig)` shows)."""
    lines = [f"    {f.name}: {f.metadata.get('help', '')}" for f in dataclasses.fields(cls)]
    cls.__doc__ = f"{cls.__doc__}\n\n    Knobs:\n" + "\n".join(lines)


for _cls in (RunConfig, LoraConfig):
    _document(_cls)

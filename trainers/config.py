"""The run configuration: its schema (the flat knobs are declared in `trainers.knobs`), the algorithm
presets, resolving and validating a config; the typed view the trainer reads is `trainers.run_config`.

The dashboard imports this module to render the run form and to validate what users type, so it
must stay free of torch (and of anything else heavy). The trainer reads the same schema, so the form
and the engine cannot disagree about a default.

A run config is a flat dict of knobs plus three nested objects: `lora`, `environment` (`{kind,
config}`, validated by that kind's own schema from `trainers.registry`) and `rubric` (the caller's
rubric spec, passed through to `trainers.rubrics`). `resolve_run_config` layers defaults, then a
preset, then the user's overrides; the result is what a run stores and what the trainer runs.
"""

from __future__ import annotations

import copy
from typing import Any

from trainers.knobs import KNOBS, knob_property
from trainers.learn.curriculum import CURRICULUM_KNOBS, curriculum_errors
from trainers.learn.experience import TRAINING_FREE_KNOBS
from trainers.models import DEFAULT_MODEL
from trainers.parts import part_errors
from trainers.registry import UnknownKind, environment_kind, validate_config
from trainers.rollout.branching import BRANCHING_KNOBS

_LORA_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "LoRA",
    "description": "Train low-rank adapters instead of all weights (peft). The reference model for KL is then "
    "the base model with adapters disabled, which costs no extra memory.",
    "x-group": "lora",
    "additionalProperties": False,
    "properties": {
        "enabled": knob_property(
            "boolean", "Use LoRA", "Train adapters only; otherwise full fine-tuning.", False, "lora"
        ),
        "r": knob_property(
            "integer", "Rank", "Rank of the adapter matrices.", 16, "lora", minimum=1, maximum=512
        ),
        "alpha": knob_property(
            "number",
            "Alpha",
            "Adapter scaling numerator (scale = alpha / r).",
            32,
            "lora",
            minimum=0,
            maximum=4096,
        ),
        "dropout": knob_property(
            "number", "Dropout", "Dropout on the adapter input.", 0.05, "lora", minimum=0, maximum=0.9
        ),
        "target_modules": {
            "type": "array",
            "title": "Target modules",
            "description": 'Module names to wrap with adapters ("all-linear" as the only item wraps every linear layer).',
            "default": ["q_proj", "k_proj", "v_proj", "o_proj"],
            "items": {"type": "string", "minLength": 1},
            "minItems": 1,
            "x-group": "lora",
        },
    },
    "default": {},
}

_ENVIRONMENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "Environment",
    "description": "A registered environment kind and its config (validated by the kind's own schema).",
    "x-group": "task",
    "required": ["kind"],
    "additionalProperties": False,
    "properties": {
        "kind": {
            "type": "string",
            "title": "Kind",
            "description": "Registered environment kind.",
            "minLength": 1,
        },
        "config": {"type": "object", "title": "Config", "description": "The kind's config.", "default": {}},
    },
    "default": {"kind": "arithmetic_calculator", "config": {}},
}

_PROPERTIES: dict[str, Any] = {
    "preset": knob_property(
        "string",
        "Preset",
        "Algorithm preset applied over the defaults (see PRESETS).",
        "grpo",
        "algorithm",
        enum=["grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp", "training_free_grpo"],
    ),
    **KNOBS,
    # --- task --------------------------------------------------------------------------------
    "environment": _ENVIRONMENT_SCHEMA,
    "rubric": {
        "type": ["object", "null"],
        "title": "Rubric",
        "description": "Rubric spec (criteria, weights, aggregation) scored by trainers.rubrics; null uses "
        "the environment's own reward.",
        "default": None,
        "x-group": "task",
    },
    "lora": _LORA_SCHEMA,
    **TRAINING_FREE_KNOBS,
    **CURRICULUM_KNOBS,
    **BRANCHING_KNOBS,
}

RUN_CONFIG_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Run config",
    "type": "object",
    "additionalProperties": False,
    "properties": _PROPERTIES,
}

# Form sections, in display order.
KNOB_GROUPS: dict[str, str] = {
    "model": "Model & hardware",
    "task": "Environment & rubric",
    "algorithm": "Algorithm",
    "optimization": "Optimisation",
    "sampling": "Sampling",
    "multi_turn": "Multi-turn",
    "lora": "LoRA",
    "evaluation": "Evaluation",
    "checkpoints": "Checkpoints",
    "distributed": "Distributed",
    "training_free": "Training-Free GRPO",
    "curriculum": "Curriculum from failures",
    "branching": "Branching rollouts (ARPO, AEPO)",
}

# Knob overrides per preset. Only what differs from the defaults matters, but each preset spells out
# the algorithmic knobs in full so that the table in docs/trainers.md reads straight from here.
PRESETS: dict[str, dict[str, Any]] = {
    # DeepSeekMath GRPO: (r - mean) / std within the group, per-sequence token mean, symmetric clip.
    "grpo": {
        "algorithm": "grpo",
        "scale_rewards": "group",
        "loss_agg": "seq-mean-token-mean",
        "clip_low": 0.2,
        "clip_high": 0.2,
        "dynamic_sampling": False,
        "overlong_buffer": 0,
    },
    # Dr.GRPO ("Understanding R1-Zero-like training"): no std division (difficulty bias) and no
    # per-length normalisation (length bias): token sums divided by one constant.
    "dr_grpo": {
        "algorithm": "dr_grpo",
        "scale_rewards": "none",
        "loss_agg": "seq-mean-token-sum-norm",
        "clip_low": 0.2,
        "clip_high": 0.2,
        "dynamic_sampling": False,
        "overlong_buffer": 0,
    },
    # DAPO: clip-higher, dynamic sampling, token-level loss, soft overlong punishment.
    "dapo": {
        "algorithm": "dapo",
        "scale_rewards": "group",
        "loss_agg": "token-mean",
        "clip_low": 0.2,
        "clip_high": 0.28,
        "dynamic_sampling": True,
        "overlong_buffer": 32,
        "overlong_penalty": 1.0,
    },
    # RLOO: leave-one-out baseline, no std scaling.
    "rloo": {
        "algorithm": "rloo",
        "scale_rewards": "none",
        "loss_agg": "seq-mean-token-mean",
        "clip_low": 0.2,
        "clip_high": 0.2,
        "dynamic_sampling": False,
        "overlong_buffer": 0,
    },
    # REINFORCE++ (baseline variant): group mean baseline, normalised by the batch std.
    "reinforce_pp": {
        "algorithm": "reinforce_pp",
        "scale_rewards": "batch",
        "loss_agg": "token-mean",
        "clip_low": 0.2,
        "clip_high": 0.2,
        "dynamic_sampling": False,
        "overlong_buffer": 0,
    },
}

# Training-Free GRPO (Tencent youtu-agent): no optimizer step; the groups' contrasts edit an experience library
# in the prompt instead (trainers.recipes.training_free_grpo). Its advantages are GRPO's, shown on the page.
PRESETS["training_free_grpo"] = {**PRESETS["grpo"], "group_size": 5, "temperature": 0.7}

PRESET_TITLES: dict[str, str] = {
    "grpo": "GRPO",
    "dr_grpo": "Dr. GRPO",
    "dapo": "DAPO",
    "rloo": "RLOO",
    "reinforce_pp": "REINFORCE++",
    "training_free_grpo": "Training-Free GRPO (no weight updates)",
}


def default_run_config() -> dict[str, Any]:
    """Every knob at its schema default (nested objects filled in too)."""
    config: dict[str, Any] = {}
    for key, prop in _PROPERTIES.items():
        if prop.get("type") == "object" and "properties" in prop:
            value = copy.deepcopy(prop.get("default", {}))
            for sub_key, sub_prop in prop["properties"].items():
                if "default" in sub_prop and sub_key not in value:
                    value[sub_key] = copy.deepcopy(sub_prop["default"])
            config[key] = value
        else:
            config[key] = copy.deepcopy(prop.get("default"))
    return config


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        # `lora` merges key by key (override r only, keep the rest); the environment's config is
        # the kind's business and is replaced whole, since keys of one kind mean nothing to another.
        if key == "lora" and isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **copy.deepcopy(value)}
        elif key == "environment" and isinstance(value, dict) and isinstance(merged.get(key), dict):
            env = copy.deepcopy(value)
            if env.get("kind", merged[key].get("kind")) == merged[key].get("kind") and "config" not in env:
                env["config"] = merged[key].get("config", {})
            merged[key] = {"config": {}, **env}
        else:
            merged[key] = copy.deepcopy(value)
    return merged


# Knobs that were replaced: old name -> function of its stored value giving the new knobs. A stored run
# config (a run to resume, a saved experiment) with the old name still resolves.
RENAMED_KNOBS: dict[str, Any] = {
    "one_step_off_policy": lambda value: {"max_staleness": 1} if value else {},
}


def upgrade_run_config(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with replaced knobs mapped onto their successors (an explicit new knob wins)."""
    config = dict(config)
    for old, upgrade in RENAMED_KNOBS.items():
        if old in config:
            for key, value in upgrade(config.pop(old)).items():
                config.setdefault(key, value)
    return config


def resolve_run_config(preset: str | None = None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """defaults ← preset ← overrides. The returned dict is complete: every knob has a value.

    `preset` None takes `overrides["preset"]`, else "grpo". An unknown preset raises ValueError.
    """
    overrides = upgrade_run_config(dict(overrides or {}))
    name = preset or overrides.get("preset") or "grpo"
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    overrides.pop("preset", None)
    config = _merge(default_run_config(), PRESETS[name])
    config["preset"] = name
    return _merge(config, overrides)


def validate_run_config(
    config: dict[str, Any], parts: list[dict[str, Any]] | None = None, parts_where: str = ""
) -> dict[str, list[str]]:
    """{dotted path: [messages]} for everything wrong with `config` ({} when valid).

    Checks the schema, the environment kind and its config, the chosen parts (advantage estimator, loss,
    rollout strategy, task source) and their options, and the rules that tie knobs together. `parts`: the
    catalogue the parts must be in (`trainers.parts.part_errors`; None: this process's registry), and
    `parts_where` who has it, as the messages name them.
    """
    errors = validate_config(RUN_CONFIG_SCHEMA, config)
    if not isinstance(config, dict):
        return errors

    def add(path: str, message: str) -> None:
        errors.setdefault(path, []).append(message)

    for path, messages in part_errors(config, parts, parts_where).items():
        if path not in errors:
            errors[path] = messages

    env = config.get("environment")
    if isinstance(env, dict) and isinstance(env.get("kind"), str) and "environment.kind" not in errors:
        try:
            spec = environment_kind(env["kind"])
        except UnknownKind as exc:
            add("environment.kind", str(exc))
        except ImportError as exc:  # the environments package is not importable (yet)
            add("environment.kind", f"environment kinds unavailable: {exc}")
        else:
            env_config = env.get("config", {})
            if isinstance(env_config, dict):
                for path, messages in spec.validate(env_config).items():
                    errors.setdefault("environment.config" + (f".{path}" if path else ""), []).extend(
                        messages
                    )

    if config.get("max_steps") == 0 and config.get("eval_tasks") == 0:
        add(
            "max_steps",
            "0 steps only evaluates the starting policy: give it held-out tasks (eval_tasks above 0).",
        )

    group_size = config.get("group_size")
    algorithm = config.get("algorithm")
    if isinstance(group_size, int) and group_size < 2 and algorithm == "rloo":
        add("group_size", "RLOO needs at least 2 completions per prompt.")
    schedule = config.get("max_turns_schedule")
    if isinstance(schedule, list) and "max_turns_schedule" not in errors:
        steps = [entry[0] for entry in schedule if isinstance(entry, list) and entry]
        if steps != sorted(steps) or len(set(steps)) != len(steps):
            add("max_turns_schedule", "Steps must be strictly increasing.")
    if (config.get("max_staleness") or 0) > 0 and config.get("num_rollout_workers", 0) < 1:
        add("max_staleness", "Generating ahead (max staleness above 0) needs at least one rollout worker.")
    lora = config.get("lora")
    if (config.get("num_learner_workers") or 1) > 1 and isinstance(lora, dict) and lora.get("enabled"):
        add("num_learner_workers", "A sharded learner trains all weights: turn LoRA off or use 1 process.")
    for knob, message in curriculum_errors(config):
        add(knob, message)
    if config.get("rollout_strategy") == "branching" and isinstance(group_size, int) and group_size < 2:
        add("group_size", "Branching rollouts need a group of at least 2 samples to branch into.")
    if config.get("preset") == "training_free_grpo":
        if (config.get("num_rollout_workers") or 0) > 0:
            add(
                "num_rollout_workers",
                "Training-Free GRPO generates in the worker's process: use 0 rollout workers.",
            )
        if (config.get("num_learner_workers") or 1) > 1:
            add("num_learner_workers", "Training-Free GRPO trains no weights: use 1 learner process.")
    batch = config.get("group_size"), config.get("prompts_per_step"), config.get("grad_accum_steps")
    group, prompts, accum = batch
    if (
        isinstance(group, int)
        and isinstance(prompts, int)
        and isinstance(accum, int)
        and group * prompts < accum
    ):
        add("grad_accum_steps", "More micro-batches than completions in a step.")
    return errors


# --- recommended knobs per model size ------------------------------------------------------------------
# The one home of "what to start a model of this size with". The run form fills these when the model is
# named and shows `why`; the knob defaults above stay the general ones.

BUNDLED_MODEL_PARAMS = 135e6  # DEFAULT_MODEL is SmolLM2-135M-Instruct

# (largest size in parameters, size label, knobs, why). Only measured settings go here, with where.
_RECOMMENDATIONS: tuple[tuple[float, str, dict[str, Any], str], ...] = (
    (
        500e6,
        "under 500M parameters",
        {"learning_rate": 2e-5, "max_new_tokens": 48, "eval_tasks": 16, "eval_every": 10},
        "Measured on SmolLM2-135M by bench/learning.py (trainers/examples/arithmetic_grpo.yaml: lr 2e-5, "
        "48 new tokens, evaluation every 10 steps; 2 CPU threads): held-out accuracy 50% → 100% after 10 "
        "steps, where lr 1e-6 and 128 tokens did not learn. 16 evaluation tasks (the bench used 32) halve "
        "the time of each evaluation pass.",
    ),
)


def model_parameter_count(model_name: str) -> float | None:
    """Parameters of a model as its name tells them ("smollm2-135m", "Qwen/Qwen2.5-0.5B-Instruct",
    "meta-llama/Llama-3.1-8B"), or None when the name does not say. The bundled model is 135M."""
    import re

    name = (model_name or "").strip()
    if not name:
        return None
    if name == DEFAULT_MODEL:
        return BUNDLED_MODEL_PARAMS
    found = re.findall(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)([mb])(?![a-z])", name.lower().replace("_", "-"))
    if not found:
        return None
    number, unit = found[-1]
    return float(number) * (1e6 if unit == "m" else 1e9)


def recommended_knobs(model_name: str) -> dict[str, Any]:
    """What to start `model_name` with: {"model", "size", "knobs", "why"}. `knobs` is {} (and `why`
    says so) for a model whose size is unknown or for which nothing was measured: the defaults apply."""
    params = model_parameter_count(model_name)
    for limit, size, knobs, why in _RECOMMENDATIONS:
        if params is not None and params <= limit:
            return {"model": model_name, "size": size, "knobs": copy.deepcopy(knobs), "why": why}
    if params is None:
        why = "The model's size is not in its name, so the general defaults apply."
    else:
        why = "No settings were measured for a model of this size here, so the general defaults apply."
    return {"model": model_name, "size": "", "knobs": {}, "why": why}

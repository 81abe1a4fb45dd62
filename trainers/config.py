"""The run configuration: every knob, its default and limits, the algorithm presets.

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

from trainers.learn.curriculum import CURRICULUM_KNOBS
from trainers.learn.experience import TRAINING_FREE_KNOBS
from trainers.models import DEFAULT_MODEL
from trainers.registry import UnknownKind, environment_kind, validate_config
from trainers.rollout.toolformats import TOOL_FORMAT_CHOICES

ALGORITHMS = ("grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp")
LOSS_AGGREGATIONS = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
SCALE_REWARDS = ("auto", "group", "batch", "none")


def _knob(
    type_: str | list[str], title: str, description: str, default: Any, group: str, **extra: Any
) -> dict:
    return {
        "type": type_,
        "title": title,
        "description": description,
        "default": default,
        "x-group": group,
        **extra,
    }


_LORA_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "LoRA",
    "description": "Train low-rank adapters instead of all weights (peft). The reference model for KL is then "
    "the base model with adapters disabled, which costs no extra memory.",
    "x-group": "lora",
    "additionalProperties": False,
    "properties": {
        "enabled": _knob(
            "boolean", "Use LoRA", "Train adapters only; otherwise full fine-tuning.", False, "lora"
        ),
        "r": _knob("integer", "Rank", "Rank of the adapter matrices.", 16, "lora", minimum=1, maximum=512),
        "alpha": _knob(
            "number",
            "Alpha",
            "Adapter scaling numerator (scale = alpha / r).",
            32,
            "lora",
            minimum=0,
            maximum=4096,
        ),
        "dropout": _knob(
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
    "preset": _knob(
        "string",
        "Preset",
        "Algorithm preset applied over the defaults (see PRESETS).",
        "grpo",
        "algorithm",
        enum=["grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp", "training_free_grpo"],
    ),
    # --- model & hardware -------------------------------------------------------------------
    "model": _knob(
        "string",
        "Model",
        f'"{DEFAULT_MODEL}" is the bundled SmolLM2-135M-Instruct GGUF (converted once to a cached '
        "safetensors copy); otherwise a Hugging Face id (from the local cache) or a local directory.",
        DEFAULT_MODEL,
        "model",
        minLength=1,
    ),
    "backend": _knob(
        "string",
        "Generation backend",
        "transformers works everywhere; vllm runs the vLLM engine "
        "in process (the gpu extra on a GPU, `make venv-vllm` on a CPU).",
        "transformers",
        "model",
        enum=["transformers", "vllm"],
    ),
    "device": _knob(
        "string",
        "Device",
        '"auto" picks cuda when available, else cpu; or an explicit torch device such as "cpu" or "cuda:0".',
        "auto",
        "model",
        pattern=r"^(auto|cpu|cuda(:\d+)?|mps)$",
    ),
    "dtype": _knob(
        "string",
        "Weights dtype",
        '"auto": float32 weights, gradients and AdamW moments on every device; on a GPU the forward and '
        "backward passes run under bfloat16 autocast (mixed precision). bfloat16 stores the policy in "
        "bf16 (half the memory), but bf16 cannot move a weight by less than about 1/256 of its size: "
        "most updates at usual learning rates are rounded away (one step at lr 2e-5 changed 4 % of the "
        'weights). float16 resolves 1/2048, in a narrow range. "mixed": float32 weights with the passes '
        "under bfloat16 autocast on a CPU too, where it has bf16 matrix units (AVX512-BF16/AMX: the "
        "demo's learner ~25 % faster); float32 passes on a CPU without them.",
        "auto",
        "model",
        enum=["auto", "mixed", "float32", "bfloat16", "float16"],
    ),
    "generation_dtype": _knob(
        "string",
        "Generation dtype",
        'Weights dtype of the copy that samples rollouts. "auto": the policy itself '
        "(no copy), in the learner's precision: fp32 on a CPU, under the learner's bfloat16 autocast "
        "on a GPU (Ray rollout workers: a copy in the learner's compute dtype). bfloat16 on a CPU "
        "with AVX512-BF16 decodes about 2× faster (bench/trainer_vs_trl.py); the "
        "learner still scores every token in the training precision.",
        "auto",
        "model",
        enum=["auto", "float32", "bfloat16", "float16"],
    ),
    "torch_threads": _knob(
        "integer",
        "Torch threads",
        "CPU threads for torch (0 keeps torch's default).",
        0,
        "model",
        minimum=0,
        maximum=512,
    ),
    # --- algorithm ---------------------------------------------------------------------------
    "algorithm": _knob(
        "string",
        "Advantage estimator",
        "grpo: group mean baseline scaled by the group std; dr_grpo: group mean baseline, no std; "
        "dapo: as grpo; rloo: leave-one-out mean baseline; reinforce_pp: group mean baseline "
        "scaled by the batch std (REINFORCE++-baseline).",
        "grpo",
        "algorithm",
        enum=list(ALGORITHMS),
    ),
    "scale_rewards": _knob(
        "string",
        "Advantage scaling",
        "Divide centred rewards by the std of the group, of the whole batch, or not at all. "
        '"auto" uses the estimator\'s own choice.',
        "auto",
        "algorithm",
        enum=list(SCALE_REWARDS),
    ),
    "advantage_epsilon": _knob(
        "number",
        "Advantage epsilon",
        "Added to the std before dividing.",
        1e-6,
        "algorithm",
        minimum=0,
        maximum=1,
    ),
    "turn_advantage_weight": _knob(
        "number",
        "Per-turn advantage weight",
        "0 keeps one advantage per trajectory. Above 0, where the rubric scores turns (per-turn "
        "criteria, a learned reward scored per turn), each turn's tokens get the trajectory's advantage "
        "plus this weight times the turn's reward standardised within its group: the turn that went "
        "wrong is pushed down, the turns before it are not.",
        0.0,
        "algorithm",
        minimum=0,
        maximum=10,
    ),
    "group_size": _knob(
        "integer",
        "Group size",
        "Completions sampled per prompt; advantages compare siblings.",
        8,
        "algorithm",
        minimum=1,
        maximum=1024,
    ),
    "prompts_per_step": _knob(
        "integer",
        "Prompts per step",
        "Groups in one optimizer step.",
        2,
        "algorithm",
        minimum=1,
        maximum=4096,
    ),
    "kl_coef": _knob(
        "number",
        "KL coefficient",
        "Weight of the k3 KL estimate to the reference (initial) policy. "
        "0 skips the reference model entirely.",
        0.0,
        "algorithm",
        minimum=0,
        maximum=10,
    ),
    "clip_low": _knob(
        "number", "Clip low", "Ratio clip below 1 (PPO epsilon).", 0.2, "algorithm", minimum=0, maximum=1
    ),
    "clip_high": _knob(
        "number",
        "Clip high",
        "Ratio clip above 1; DAPO's clip-higher raises it to 0.28.",
        0.2,
        "algorithm",
        minimum=0,
        maximum=10,
    ),
    "loss_agg": _knob(
        "string",
        "Loss aggregation",
        "token-mean: mean over all loss tokens of the step; seq-mean-token-mean: mean per sequence, "
        "then over sequences; seq-mean-token-sum: sum per sequence, mean over sequences; "
        "seq-mean-token-sum-norm (Dr.GRPO): token sum divided by a constant.",
        "seq-mean-token-mean",
        "algorithm",
        enum=list(LOSS_AGGREGATIONS),
    ),
    "loss_norm_constant": _knob(
        ["integer", "null"],
        "Loss normalisation constant",
        "Divisor for seq-mean-token-sum-norm; null means the generation budget (max_new_tokens × max_turns).",
        None,
        "algorithm",
        minimum=1,
    ),
    "updates_per_batch": _knob(
        "integer",
        "Updates per batch",
        "Optimizer passes over each batch of rollouts (μ); above 1 the clip matters.",
        1,
        "algorithm",
        minimum=1,
        maximum=16,
    ),
    "dynamic_sampling": _knob(
        "boolean",
        "Dynamic sampling",
        "Drop groups whose rewards all agree (no signal) and sample more prompts to refill the batch (DAPO).",
        False,
        "algorithm",
    ),
    "dynamic_sampling_max_rounds": _knob(
        "integer",
        "Dynamic sampling rounds",
        "Extra generation rounds allowed to refill a batch.",
        3,
        "algorithm",
        minimum=0,
        maximum=64,
    ),
    "overlong_buffer": _knob(
        "integer",
        "Overlong buffer",
        "Soft overlong penalty: the last this-many tokens of each message's budget (max new "
        "tokens) are penalised linearly (DAPO); 0 disables. It configures the rubric's "
        "overlong_penalty criterion (adding one named 'overlong' if the rubric has none), so "
        "the penalty shows as a component and is never applied twice.",
        0,
        "algorithm",
        minimum=0,
        maximum=65536,
    ),
    "overlong_penalty": _knob(
        "number",
        "Overlong penalty",
        "Penalty reached at the full budget: the weight of the overlong criterion.",
        1.0,
        "algorithm",
        minimum=0,
        maximum=100,
    ),
    "mask_truncated": _knob(
        "boolean", "Mask truncated", "Exclude truncated trajectories from the loss.", False, "algorithm"
    ),
    "mask_tool_tokens": _knob(
        "boolean",
        "Mask tool tokens",
        "Tool output and other environment tokens carry no gradient.",
        True,
        "algorithm",
    ),
    # --- optimisation ------------------------------------------------------------------------
    "max_steps": _knob(
        "integer", "Max steps", "Optimizer steps to run.", 100, "optimization", minimum=1, maximum=10_000_000
    ),
    "learning_rate": _knob(
        "number",
        "Learning rate",
        "AdamW learning rate (constant after warmup). The "
        "default suits 1B+ models; the bundled 135M model learns at about 2e-5.",
        1e-6,
        "optimization",
        exclusiveMinimum=0,
        maximum=1,
    ),
    "warmup_steps": _knob(
        "integer",
        "Warmup steps",
        "Linear learning-rate warmup.",
        0,
        "optimization",
        minimum=0,
        maximum=1_000_000,
    ),
    "weight_decay": _knob(
        "number", "Weight decay", "AdamW decoupled weight decay.", 0.0, "optimization", minimum=0, maximum=1
    ),
    "adam_beta1": _knob("number", "Adam β1", "", 0.9, "optimization", minimum=0, maximum=0.9999),
    "adam_beta2": _knob("number", "Adam β2", "", 0.999, "optimization", minimum=0, maximum=0.99999),
    "max_grad_norm": _knob(
        "number",
        "Max grad norm",
        "Clip the global gradient norm (0 disables).",
        1.0,
        "optimization",
        minimum=0,
        maximum=1e6,
    ),
    "grad_accum_steps": _knob(
        "integer",
        "Gradient accumulation",
        "Split each step's batch into this many micro-batches (saves memory, same result).",
        1,
        "optimization",
        minimum=1,
        maximum=4096,
    ),
    "micro_batch_tokens": _knob(
        "integer",
        "Learner tokens per pass",
        "The learner takes a forward and backward pass per part of a prompt's samples holding at most "
        "this many completion tokens (the prompt itself is encoded once for all of them): bounds the "
        "learner's activation memory, same result. 0: one pass per prompt.",
        512,
        "optimization",
        minimum=0,
        maximum=1_000_000,
    ),
    "activation_checkpointing": _knob(
        "boolean",
        "Recompute activations",
        "The learner's passes keep only each decoder layer's input and run the layer again in the backward "
        "pass (activation checkpointing): the learner's activations shrink ~20× (SmolLM2-135M: 1.6 MiB to "
        "69 KiB a token in fp32) for one more forward pass per update; same result.",
        False,
        "optimization",
    ),
    "seed": _knob(
        "integer",
        "Seed",
        "Seeds task order, sampling and initialisation; CPU runs are reproducible.",
        0,
        "optimization",
        minimum=0,
        maximum=2**31 - 1,
    ),
    # --- sampling ----------------------------------------------------------------------------
    "temperature": _knob(
        "number",
        "Temperature",
        "Sampling temperature for training rollouts.",
        1.0,
        "sampling",
        minimum=0,
        maximum=10,
    ),
    "top_p": _knob("number", "Top-p", "Nucleus sampling.", 1.0, "sampling", exclusiveMinimum=0, maximum=1),
    "max_new_tokens": _knob(
        "integer", "Max new tokens", "Tokens per model turn.", 128, "sampling", minimum=1, maximum=131072
    ),
    "max_context_tokens": _knob(
        "integer",
        "Max context tokens",
        "A trajectory stops (truncated) when its context would exceed this.",
        2048,
        "sampling",
        minimum=16,
        maximum=1_048_576,
    ),
    # --- multi-turn --------------------------------------------------------------------------
    "max_turns": _knob(
        "integer",
        "Max turns",
        "Model turns per episode, at most: the smaller of this and the environment's own Max turns "
        "applies (0 = the environment's own).",
        4,
        "multi_turn",
        minimum=0,
        maximum=1024,
    ),
    "tool_format": _knob(
        "string",
        "Tool-call format",
        "How tools are shown and calls are written. auto: the model's native format when its chat "
        "template renders tools (Qwen/Hermes <tool_call>, Llama 3 JSON, Mistral [TOOL_CALLS], Qwen3 "
        "with <think>, Qwen3-Coder XML, gpt-oss harmony), else studio (the run's log says which and why); "
        "native: the same, but fail when the template has no tool support; hermes / llama3 / mistral / "
        "qwen3 / qwen3_coder / harmony: force that family's parser; studio: tools described in the "
        "system prompt, calls as <tool_call>{json}</tool_call> (any model, e.g. the bundled "
        "SmolLM2).",
        "auto",
        "multi_turn",
        enum=list(TOOL_FORMAT_CHOICES),
    ),
    "max_turns_schedule": {
        "type": "array",
        "title": "Max turns schedule",
        "description": "Grow the horizon: [[step, max_turns], ...]; from each step on, that many turns.",
        "default": [],
        "items": {
            "type": "array",
            "prefixItems": [{"type": "integer", "minimum": 0}, {"type": "integer", "minimum": 1}],
            "minItems": 2,
            "maxItems": 2,
        },
        "x-group": "multi_turn",
    },
    "token_stats": _knob(
        "string",
        "Token statistics",
        "Send each model turn's per-token statistics (sampling log-prob, entropy, advantage × loss "
        "mask, learner − sampler log-prob gap) for the trajectory page's token view: about 12 bytes a "
        "token, packed. auto: on for models up to 2B parameters.",
        "auto",
        "evaluation",
        enum=["auto", "on", "off"],
    ),
    # --- evaluation & checkpoints ------------------------------------------------------------
    "eval_every": _knob(
        "integer",
        "Eval every",
        "Evaluate on the held-out set every this many steps "
        "(0 = only before and after training when eval_tasks > 0).",
        0,
        "evaluation",
        minimum=0,
        maximum=1_000_000,
    ),
    "eval_tasks": _knob(
        "integer",
        "Eval tasks",
        "Size of the fixed held-out set (fixed seed).",
        32,
        "evaluation",
        minimum=0,
        maximum=100_000,
    ),
    "eval_temperature": _knob(
        "number", "Eval temperature", "0 = greedy.", 0.0, "evaluation", minimum=0, maximum=10
    ),
    "checkpoint_every": _knob(
        "integer",
        "Checkpoint every",
        "Save every this many steps (0 = only at the end).",
        50,
        "checkpoints",
        minimum=0,
        maximum=1_000_000,
    ),
    "keep_best_n": _knob(
        "integer",
        "Keep best N",
        "Checkpoints kept by best_metric (the latest is always kept; 0 keeps all).",
        3,
        "checkpoints",
        minimum=0,
        maximum=1000,
    ),
    "best_metric": _knob(
        "string", "Best metric", "Metric that ranks checkpoints.", "reward/mean", "checkpoints", minLength=1
    ),
    "best_metric_mode": _knob("string", "Best metric mode", "", "max", "checkpoints", enum=["max", "min"]),
    "auto_resume": _knob(
        "integer",
        "Automatic resumes",
        "When the run's worker dies (the run is marked LOST), queue a resume from its latest "
        "checkpoint by itself, at most this many times in a row (0: leave it to you). Each "
        "resume is a new run in the lineage.",
        0,
        "checkpoints",
        minimum=0,
        maximum=100,
    ),
    # --- distribution ------------------------------------------------------------------------
    "num_rollout_workers": _knob(
        "integer",
        "Rollout workers",
        "Ray actors that generate rollouts (0 = generate in the learner process).",
        0,
        "distributed",
        minimum=0,
        maximum=1024,
    ),
    "max_staleness": _knob(
        "integer",
        "Max staleness",
        "Bounded async: rollout workers generate up to this many batches ahead of the learner, so a "
        "batch may be sampled by a policy at most this many versions old (0 = synchronous; 1 = "
        "step n+1 generates while step n learns). Stale tokens are corrected with truncated "
        "importance weights (see tis_cap). Needs rollout workers. Replaces one_step_off_policy "
        "(true = 1).",
        0,
        "distributed",
        minimum=0,
        maximum=16,
    ),
    "tis_cap": _knob(
        "number",
        "Importance weight cap",
        "Truncated importance sampling (TIS) for async batches: each token's loss is weighted by "
        "min(π_learner / π_behaviour, cap), from the log-probs the rollout worker recorded while "
        "sampling (the cap bounds the variance). 0 turns the correction off.",
        2.0,
        "distributed",
        minimum=0,
        maximum=1000,
    ),
    "num_learner_workers": _knob(
        "integer",
        "Learner processes",
        "1: the policy trains in the run's own process. N > 1: N Ray processes shard it with "
        "torch FSDP2 (gloo on CPU, NCCL on GPU), each holding 1/N of the weights, gradients "
        "and optimizer state; the updated weights are gathered after every step and pushed to "
        "the rollout workers. Full fine-tuning only (no LoRA).",
        1,
        "distributed",
        minimum=1,
        maximum=1024,
    ),
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


def validate_run_config(config: dict[str, Any]) -> dict[str, list[str]]:
    """{dotted path: [messages]} for everything wrong with `config` ({} when valid).

    Checks the schema, the environment kind and its config, and the rules that tie knobs together.
    """
    errors = validate_config(RUN_CONFIG_SCHEMA, config)
    if not isinstance(config, dict):
        return errors

    def add(path: str, message: str) -> None:
        errors.setdefault(path, []).append(message)

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
    low, high = config.get("curriculum_band_low"), config.get("curriculum_band_high")
    if isinstance(low, (int, float)) and isinstance(high, (int, float)) and low > high:
        add("curriculum_band_low", "The band's low end must not be above its high end.")
    if config.get("curriculum") == "from_failures" and (config.get("num_rollout_workers") or 0) > 0:
        add("curriculum", "The curriculum draws tasks step by step: use 0 rollout workers.")
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


OVERLONG_CRITERION = "overlong"


def effective_rubric(config: dict[str, Any]) -> dict[str, Any] | None:
    """The rubric spec the trainer scores with: the run's rubric, with the overlong knobs applied to its
    `overlong_penalty` criterion (one is added when it has none). With the knobs off, the rubric as given
    (None when the run has none: the environment's reward is the score)."""
    spec = config.get("rubric") or None
    if not config.get("overlong_buffer"):
        return spec
    params = {
        "max_len": config["max_new_tokens"],
        "buffer": min(config["overlong_buffer"], config["max_new_tokens"]),
        "unit": "tokens",
        "scope": "longest_message",
    }
    criteria = [dict(c) for c in (spec or {}).get("criteria", [])] or [
        {"name": "environment", "kind": "env_reward", "weight": 1.0, "params": {}}
    ]
    existing = next((c for c in criteria if c.get("kind") == "overlong_penalty"), None)
    if existing is not None:
        existing["params"] = {**existing.get("params", {}), **params}
        existing["weight"] = config["overlong_penalty"]
    else:
        criteria.append(
            {
                "name": OVERLONG_CRITERION,
                "kind": "overlong_penalty",
                "weight": config["overlong_penalty"],
                "params": params,
            }
        )
    return {**(spec or {"aggregation": "weighted_sum"}), "criteria": criteria}


def max_turns_at(config: dict[str, Any], step: int) -> int:
    """The max-turns horizon in force at `step` (0-based), from `max_turns_schedule` or `max_turns`."""
    turns = config.get("max_turns", 0)
    for start, value in config.get("max_turns_schedule") or []:
        if step >= start:
            turns = value
    return turns


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


# `token_stats: auto` sends token statistics for models up to this size: their cost (a per-token entropy
# from logits the learner computes anyway, ~12 bytes a token on the wire) is small next to a step there.
TOKEN_STATS_AUTO_MAX_PARAMS = 2e9


def token_stats_enabled(config: dict[str, Any], parameters: float | None) -> bool:
    """Whether a run reports per-token statistics (`token_stats`); `parameters`: the policy's size."""
    choice = config.get("token_stats", "auto")
    if choice == "auto":
        return parameters is not None and parameters <= TOKEN_STATS_AUTO_MAX_PARAMS
    return choice == "on"


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

"""The run's flat knobs, as the run form shows them by group (model & hardware, algorithm, optimisation,
sampling, multi-turn, evaluation & checkpoints, distribution): each one's type, title, description,
default and limits. `trainers.config` puts them into the run config's schema with the nested objects
(environment, rubric, LoRA) and the preset; the typed config (`trainers.run_config`) reads them from there.
"""

from __future__ import annotations

from typing import Any

from trainers.models import DEFAULT_MODEL
from trainers.rollout.toolformats import TOOL_FORMAT_CHOICES

LOSS_AGGREGATIONS = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
SCALE_REWARDS = ("auto", "group", "batch", "none")


def knob_property(
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


KNOBS: dict[str, Any] = {
    # --- model & hardware -------------------------------------------------------------------
    "model": knob_property(
        "string",
        "Model",
        f'"{DEFAULT_MODEL}" is the bundled SmolLM2-135M-Instruct GGUF (converted once to a cached '
        "safetensors copy); otherwise a Hugging Face id (from the local cache) or a local directory.",
        DEFAULT_MODEL,
        "model",
        minLength=1,
    ),
    "backend": knob_property(
        "string",
        "Generation backend",
        "transformers works everywhere; vllm runs the vLLM engine "
        "in process (the gpu extra on a GPU, `make venv-vllm` on a CPU).",
        "transformers",
        "model",
        enum=["transformers", "vllm"],
    ),
    "device": knob_property(
        "string",
        "Device",
        '"auto" picks cuda when available, else cpu; or an explicit torch device such as "cpu" or "cuda:0".',
        "auto",
        "model",
        pattern=r"^(auto|cpu|cuda(:\d+)?|mps)$",
    ),
    "dtype": knob_property(
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
    "generation_dtype": knob_property(
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
    "torch_threads": knob_property(
        "integer",
        "Torch threads",
        "CPU threads for torch (0 keeps torch's default).",
        0,
        "model",
        minimum=0,
        maximum=512,
    ),
    # --- algorithm ---------------------------------------------------------------------------
    "algorithm": knob_property(
        "string",
        "Advantage estimator",
        "grpo: group mean baseline scaled by the group std; dr_grpo: group mean baseline, no std; "
        "dapo: as grpo; rloo: leave-one-out mean baseline; reinforce_pp: group mean baseline "
        "scaled by the batch std (REINFORCE++-baseline).",
        "grpo",
        "algorithm",
        minLength=1,
        **{"x-part": "advantage_estimator"},
    ),
    "policy_loss": knob_property(
        "string",
        "Loss",
        "The policy loss: ppo_clip is the clipped surrogate (clip_low, clip_high, kl_coef, loss_agg); an "
        'installed part package can add others (docs/trainers.md, "Your own parts").',
        "ppo_clip",
        "algorithm",
        minLength=1,
        **{"x-part": "loss"},
    ),
    "rollout_strategy": knob_property(
        "string",
        "Rollout strategy",
        "How a group's samples are generated: independent — each sample a whole episode from the task's "
        "start; branching — ARPO/AEPO's entropy-adaptive tree within the group's budget (the Branching "
        "rollouts knobs; evaluation stays independent); an installed part package can add others.",
        "independent",
        "sampling",
        minLength=1,
        **{"x-part": "rollout_strategy"},
    ),
    "part_options": knob_property(
        "object",
        "Part options",
        'Options of the chosen parts, by kind: {"advantage_estimator": {...}, "rollout_strategy": {...}}, '
        "each checked against that part's own JSON schema (the built-ins take none: the knobs above "
        "configure them).",
        {},
        "algorithm",
    ),
    "scale_rewards": knob_property(
        "string",
        "Advantage scaling",
        "Divide centred rewards by the std of the group, of the whole batch, or not at all. "
        '"auto" uses the estimator\'s own choice.',
        "auto",
        "algorithm",
        enum=list(SCALE_REWARDS),
    ),
    "advantage_epsilon": knob_property(
        "number",
        "Advantage epsilon",
        "Added to the std before dividing.",
        1e-6,
        "algorithm",
        minimum=0,
        maximum=1,
    ),
    "turn_advantage_weight": knob_property(
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
    "group_size": knob_property(
        "integer",
        "Group size",
        "Completions sampled per prompt; advantages compare siblings.",
        8,
        "algorithm",
        minimum=1,
        maximum=1024,
    ),
    "prompts_per_step": knob_property(
        "integer",
        "Prompts per step",
        "Groups in one optimizer step.",
        2,
        "algorithm",
        minimum=1,
        maximum=4096,
    ),
    "kl_coef": knob_property(
        "number",
        "KL coefficient",
        "Weight of the k3 KL estimate to the reference (initial) policy. "
        "0 skips the reference model entirely.",
        0.0,
        "algorithm",
        minimum=0,
        maximum=10,
    ),
    "clip_low": knob_property(
        "number", "Clip low", "Ratio clip below 1 (PPO epsilon).", 0.2, "algorithm", minimum=0, maximum=1
    ),
    "clip_high": knob_property(
        "number",
        "Clip high",
        "Ratio clip above 1; DAPO's clip-higher raises it to 0.28.",
        0.2,
        "algorithm",
        minimum=0,
        maximum=10,
    ),
    "loss_agg": knob_property(
        "string",
        "Loss aggregation",
        "token-mean: mean over all loss tokens of the step; seq-mean-token-mean: mean per sequence, "
        "then over sequences; seq-mean-token-sum: sum per sequence, mean over sequences; "
        "seq-mean-token-sum-norm (Dr.GRPO): token sum divided by a constant.",
        "seq-mean-token-mean",
        "algorithm",
        enum=list(LOSS_AGGREGATIONS),
    ),
    "loss_norm_constant": knob_property(
        ["integer", "null"],
        "Loss normalisation constant",
        "Divisor for seq-mean-token-sum-norm; null means the generation budget (max_new_tokens × max_turns).",
        None,
        "algorithm",
        minimum=1,
    ),
    "updates_per_batch": knob_property(
        "integer",
        "Updates per batch",
        "Optimizer passes over each batch of rollouts (μ); above 1 the clip matters.",
        1,
        "algorithm",
        minimum=1,
        maximum=16,
    ),
    "dynamic_sampling": knob_property(
        "boolean",
        "Dynamic sampling",
        "Drop groups whose rewards all agree (no signal) and sample more prompts to refill the batch (DAPO).",
        False,
        "algorithm",
    ),
    "dynamic_sampling_max_rounds": knob_property(
        "integer",
        "Dynamic sampling rounds",
        "Extra generation rounds allowed to refill a batch.",
        3,
        "algorithm",
        minimum=0,
        maximum=64,
    ),
    "overlong_buffer": knob_property(
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
    "overlong_penalty": knob_property(
        "number",
        "Overlong penalty",
        "Penalty reached at the full budget: the weight of the overlong criterion.",
        1.0,
        "algorithm",
        minimum=0,
        maximum=100,
    ),
    "mask_truncated": knob_property(
        "boolean", "Mask truncated", "Exclude truncated trajectories from the loss.", False, "algorithm"
    ),
    "mask_tool_tokens": knob_property(
        "boolean",
        "Mask tool tokens",
        "Tool output and other environment tokens carry no gradient.",
        True,
        "algorithm",
    ),
    # --- optimisation ------------------------------------------------------------------------
    "max_steps": knob_property(
        "integer",
        "Max steps",
        "Optimizer steps to run. 0: only evaluate the starting policy (the base model, or a checkpoint's with "
        "Start from checkpoint) on the held-out tasks; nothing is trained or saved.",
        100,
        "optimization",
        minimum=0,
        maximum=10_000_000,
    ),
    "learning_rate": knob_property(
        "number",
        "Learning rate",
        "AdamW learning rate (constant after warmup). The "
        "default suits 1B+ models; the bundled 135M model learns at about 2e-5.",
        1e-6,
        "optimization",
        exclusiveMinimum=0,
        maximum=1,
    ),
    "warmup_steps": knob_property(
        "integer",
        "Warmup steps",
        "Linear learning-rate warmup.",
        0,
        "optimization",
        minimum=0,
        maximum=1_000_000,
    ),
    "weight_decay": knob_property(
        "number", "Weight decay", "AdamW decoupled weight decay.", 0.0, "optimization", minimum=0, maximum=1
    ),
    "adam_beta1": knob_property(
        "number",
        "Adam β1",
        "AdamW's decay of the gradient's running mean.",
        0.9,
        "optimization",
        minimum=0,
        maximum=0.9999,
    ),
    "adam_beta2": knob_property(
        "number",
        "Adam β2",
        "AdamW's decay of the squared gradient's running mean.",
        0.999,
        "optimization",
        minimum=0,
        maximum=0.99999,
    ),
    "max_grad_norm": knob_property(
        "number",
        "Max grad norm",
        "Clip the global gradient norm (0 disables).",
        1.0,
        "optimization",
        minimum=0,
        maximum=1e6,
    ),
    "grad_accum_steps": knob_property(
        "integer",
        "Gradient accumulation",
        "Split each step's batch into this many micro-batches (saves memory, same result).",
        1,
        "optimization",
        minimum=1,
        maximum=4096,
    ),
    "micro_batch_tokens": knob_property(
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
    "activation_checkpointing": knob_property(
        "boolean",
        "Recompute activations",
        "The learner's passes keep only each decoder layer's input and run the layer again in the backward "
        "pass (activation checkpointing): the learner's activations shrink ~20× (SmolLM2-135M: 1.6 MiB to "
        "69 KiB a token in fp32) for one more forward pass per update; same result.",
        False,
        "optimization",
    ),
    "seed": knob_property(
        "integer",
        "Seed",
        "Seeds task order, sampling and initialisation; CPU runs are reproducible.",
        0,
        "optimization",
        minimum=0,
        maximum=2**31 - 1,
    ),
    # --- sampling ----------------------------------------------------------------------------
    "temperature": knob_property(
        "number",
        "Temperature",
        "Sampling temperature for training rollouts.",
        1.0,
        "sampling",
        minimum=0,
        maximum=10,
    ),
    "top_p": knob_property(
        "number", "Top-p", "Nucleus sampling.", 1.0, "sampling", exclusiveMinimum=0, maximum=1
    ),
    "max_new_tokens": knob_property(
        "integer", "Max new tokens", "Tokens per model turn.", 128, "sampling", minimum=1, maximum=131072
    ),
    "max_context_tokens": knob_property(
        "integer",
        "Max context tokens",
        "A trajectory stops (truncated) when its context would exceed this.",
        2048,
        "sampling",
        minimum=16,
        maximum=1_048_576,
    ),
    # --- multi-turn --------------------------------------------------------------------------
    "max_turns": knob_property(
        "integer",
        "Max turns",
        "Model turns per episode, at most: the smaller of this and the environment's own Max turns "
        "applies (0 = the environment's own).",
        4,
        "multi_turn",
        minimum=0,
        maximum=1024,
    ),
    "tool_format": knob_property(
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
    "token_stats": knob_property(
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
    "eval_every": knob_property(
        "integer",
        "Eval every",
        "Evaluate on the held-out set every this many steps "
        "(0 = only before and after training when eval_tasks > 0).",
        0,
        "evaluation",
        minimum=0,
        maximum=1_000_000,
    ),
    "eval_tasks": knob_property(
        "integer",
        "Eval tasks",
        "Size of the fixed held-out set (fixed seed).",
        32,
        "evaluation",
        minimum=0,
        maximum=100_000,
    ),
    "eval_temperature": knob_property(
        "number", "Eval temperature", "0 = greedy.", 0.0, "evaluation", minimum=0, maximum=10
    ),
    "stop_on_hacking_alarm": knob_property(
        "boolean",
        "Stop on the reward-hacking alarm",
        "Stop the run (cancelled, with a checkpoint) when a judge's or reward model's reward rises or "
        "stays high while a verifiable criterion, the environment's verifier or held-out accuracy falls "
        "(the run page's alarm; trainers/rubrics/alarms.py).",
        False,
        "evaluation",
    ),
    "checkpoint_every": knob_property(
        "integer",
        "Checkpoint every",
        "Save every this many steps (0 = only at the end).",
        50,
        "checkpoints",
        minimum=0,
        maximum=1_000_000,
    ),
    "keep_best_n": knob_property(
        "integer",
        "Keep best N",
        "Checkpoints kept by best_metric (the latest is always kept; 0 keeps all).",
        3,
        "checkpoints",
        minimum=0,
        maximum=1000,
    ),
    "best_metric": knob_property(
        "string", "Best metric", "Metric that ranks checkpoints.", "reward/mean", "checkpoints", minLength=1
    ),
    "best_metric_mode": knob_property(
        "string",
        "Best metric mode",
        "max: a higher best metric is better; min: a lower one.",
        "max",
        "checkpoints",
        enum=["max", "min"],
    ),
    "auto_resume": knob_property(
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
    "num_rollout_workers": knob_property(
        "integer",
        "Rollout workers",
        "Ray actors that generate rollouts (0 = generate in the learner process).",
        0,
        "distributed",
        minimum=0,
        maximum=1024,
    ),
    "max_staleness": knob_property(
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
    "tis_cap": knob_property(
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
    "num_learner_workers": knob_property(
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
}

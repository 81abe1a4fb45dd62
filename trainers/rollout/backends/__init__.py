"""Generation backends: `transformers` (CPU or GPU, in process) and `vllm` (optional: a GPU or a CPU build)."""

from __future__ import annotations

from typing import Any

from trainers.rollout.backends.base import Completion, FinishReason, GenerationBackend, Prompt, stop_index

__all__ = ["Completion", "FinishReason", "GenerationBackend", "Prompt", "stop_index", "make_backend"]


def make_backend(kind: str, **kwargs: Any) -> GenerationBackend:
    """Build a backend by its config name ("transformers" or "vllm")."""
    if kind == "transformers":
        from trainers.rollout.backends.transformers_backend import TransformersBackend

        return TransformersBackend(**kwargs)
    if kind == "vllm":
        from trainers.rollout.backends.vllm_backend import VLLMBackend

        return VLLMBackend(**kwargs)
    raise ValueError(f"unknown generation backend {kind!r}; known: transformers, vllm")

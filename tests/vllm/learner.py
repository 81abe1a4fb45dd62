"""What the vLLM tier compares the engine against: the learner's own log-probs."""

from __future__ import annotations

from typing import Any

import torch

# Largest gap allowed between a log-prob vLLM reports and the learner's for the same token (nats), fp32 on
# both sides. Measured on a 2-core CPU: at most 4e-5 over 16 samples of 48 tokens (other kernels, same math).
LOGPROB_TOLERANCE = 1e-3

CHAT = [
    {"role": "system", "content": "Answer in <answer></answer> tags."},
    {"role": "user", "content": "What is 3 + 4?"},
]


def learner_logprobs(
    model: Any, prompt: list[int], tokens: list[int], temperature: float = 1.0
) -> torch.Tensor:
    """log-softmax(logits / T) of each completion token: what the learner computes for the ratio."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)


def max_gap(logprobs: list[float], expected: torch.Tensor) -> float:
    return float((torch.tensor(logprobs) - expected).abs().max())

"""update_weights: after a real optimizer step on the learner, vLLM samples from the new weights."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.vllm.learner import CHAT, LOGPROB_TOLERANCE, learner_logprobs, max_gap
from trainers.rollout.backends import make_backend

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def one_adamw_step_towards(model, prompt: list[int], target: list[int], lr: float = 1e-3) -> None:
    """A real optimizer step: raise the likelihood of `target` after `prompt`."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    logits = model(input_ids=torch.tensor([prompt + target])).logits[0, len(prompt) - 1 : -1]
    torch.nn.functional.cross_entropy(logits, torch.tensor(target)).backward()
    optimizer.step()
    model.eval()


# A prompt of several KV-cache blocks (128 tokens each on a CPU): only full blocks enter the prefix cache.
RULES = " ".join(f"Rule {i}: answer briefly, in <answer></answer> tags, with digits only." for i in range(30))
LONG_CHAT = [{"role": "system", "content": RULES}, CHAT[1]]


def test_pushed_weights_change_the_next_samples_and_their_logprobs(engine, policy):
    model, tokenizer = policy
    learner = copy.deepcopy(model)
    prompt = engine.prompt_token_ids(LONG_CHAT)
    assert len(prompt) > 3 * 128
    target = tokenizer("<answer>7</answer>", add_special_tokens=False)["input_ids"]
    # The same prompt again and again: its blocks sit in vLLM's prefix cache, computed with the old weights.
    before = engine.generate([LONG_CHAT, LONG_CHAT], max_new_tokens=16, temperature=1.0, seed=11)
    greedy_before = engine.generate([LONG_CHAT], max_new_tokens=len(target), temperature=0.0)[0]

    one_adamw_step_towards(learner, prompt, target)
    engine.update_weights({k: v.detach() for k, v in learner.state_dict().items()})

    after = engine.generate([LONG_CHAT, LONG_CHAT], max_new_tokens=16, temperature=1.0, seed=11)
    assert [c.token_ids for c in after] != [c.token_ids for c in before]
    for sample in after:
        # Scored like the updated learner, prompt included (a stale cached prompt would show here), and
        # no longer like the model before the step.
        assert (
            max_gap(sample.logprobs, learner_logprobs(learner, prompt, sample.token_ids)) <= LOGPROB_TOLERANCE
        )
        assert (
            max_gap(sample.logprobs, learner_logprobs(model, prompt, sample.token_ids))
            > 10 * LOGPROB_TOLERANCE
        )
    # Greedy decoding follows the learner's: what the transformers backend says on the updated model.
    greedy_after = engine.generate([LONG_CHAT], max_new_tokens=len(target), temperature=0.0)[0]
    learners = make_backend("transformers", model=learner, tokenizer=tokenizer).generate(
        [LONG_CHAT], max_new_tokens=len(target), temperature=0.0
    )[0]
    assert greedy_after.token_ids == learners.token_ids != greedy_before.token_ids

    engine.update_weights({k: v.detach() for k, v in model.state_dict().items()})  # back to the base model
    again = engine.generate([LONG_CHAT], max_new_tokens=len(target), temperature=0.0)[0]
    assert again.token_ids == greedy_before.token_ids


def test_a_push_vllm_would_half_apply_is_refused(engine, policy):
    model, _ = policy
    greedy = engine.generate([CHAT], max_new_tokens=8, temperature=0.0)[0]
    with pytest.raises(KeyError, match="not.a.weight"):
        engine.update_weights({"not.a.weight": torch.zeros(1)})
    # q, k and v are one fused matrix in vLLM: half of it cannot be loaded alone.
    with pytest.raises(ValueError, match="push them together"):
        engine.update_weights({"model.layers.0.self_attn.q_proj.weight": torch.zeros(576, 576)})
    # Whole layers may come alone, and nothing was touched by the refused pushes.
    layer = "model.layers.0.mlp."
    engine.update_weights({k: v for k, v in model.state_dict().items() if k.startswith(layer)})
    assert engine.generate([CHAT], max_new_tokens=8, temperature=0.0)[0].token_ids == greedy.token_ids

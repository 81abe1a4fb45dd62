"""The generation backends: sampling, stop strings, log-probs, reproducibility, the vLLM guard."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from trainers.backends import make_backend, stop_index
from trainers.backends.transformers_backend import sample_next

CHAT = [
    {"role": "system", "content": "Answer in <answer></answer> tags."},
    {"role": "user", "content": "What is 3 + 4?"},
]


def test_stop_index_finds_the_earliest_stop():
    assert stop_index("a</answer>b</tool_call>", ["</tool_call>", "</answer>"]) == (10, "</answer>")
    assert stop_index("nothing", ["</answer>"]) is None


def test_top_p_keeps_the_nucleus():
    logits = torch.tensor([[5.0, 4.0, -10.0, -10.0]])
    generator = torch.Generator().manual_seed(0)
    picks = {int(sample_next(logits, 1.0, 0.5, generator)[0]) for _ in range(50)}
    assert picks == {0}
    picks = {int(sample_next(logits, 1.0, 0.99, generator)[0]) for _ in range(200)}
    assert picks == {0, 1}
    token, logprob = sample_next(logits, 0.0, 1.0, None)
    assert int(token) == 0 and float(logprob) == pytest.approx(float(torch.log_softmax(logits, -1)[0, 0]))


@pytest.mark.slow
def test_transformers_backend_samples_groups_reproducibly(smollm):
    model, tokenizer = smollm
    backend = make_backend("transformers", model=model, tokenizer=tokenizer)
    completions = backend.generate(
        [CHAT, CHAT[1:]], n=3, max_new_tokens=16, temperature=1.0, seed=7, stop=["</answer>"]
    )
    assert len(completions) == 6
    again = backend.generate(
        [CHAT, CHAT[1:]], n=3, max_new_tokens=16, temperature=1.0, seed=7, stop=["</answer>"]
    )
    assert [c.token_ids for c in completions] == [c.token_ids for c in again]
    for c in completions:
        assert 1 <= len(c.token_ids) <= 16 and len(c.logprobs) == len(c.token_ids)
        assert c.finish_reason in ("stop", "eos", "length")
        if c.finish_reason == "stop":
            assert c.text.endswith("</answer>")
        if c.finish_reason == "length":
            assert len(c.token_ids) == 16
    # The reported log-probs are the policy's: check one against a plain forward pass.
    prompt = backend.prompt_token_ids(CHAT)
    sample = completions[0]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + sample.token_ids])).logits[0]
    expected = (
        torch.log_softmax(logits[len(prompt) - 1 : -1].float(), -1)
        .gather(-1, torch.tensor(sample.token_ids)[:, None])
        .squeeze(-1)
    )
    assert torch.allclose(torch.tensor(sample.logprobs), expected, atol=1e-3)


@pytest.mark.slow
def test_greedy_stops_on_the_stop_string(smollm):
    model, tokenizer = smollm
    backend = make_backend("transformers", model=model, tokenizer=tokenizer)
    prompt = (
        backend.prompt_token_ids(CHAT)
        + tokenizer("<answer>7</answer> and more", add_special_tokens=False)["input_ids"][:3]
    )
    # Whatever greedy decoding says, a stop string in the output ends the completion right there.
    completion = backend.generate(
        [prompt], n=1, max_new_tokens=24, temperature=0.0, stop=["</answer>", "\n"]
    )[0]
    if completion.finish_reason == "stop":
        assert completion.text.endswith(completion.stop)
        assert completion.text.count(completion.stop) == 1


@pytest.mark.slow
def test_update_weights_rejects_unknown_keys(smollm):
    model, tokenizer = smollm
    backend = make_backend("transformers", model=model, tokenizer=tokenizer)
    backend.update_weights({"model.norm.weight": model.model.norm.weight})  # the same tensor: a no-op
    with pytest.raises(KeyError):
        backend.update_weights({"not.a.weight": torch.zeros(1)})


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_backend_explains_what_is_missing():
    from trainers.backends.vllm_backend import VLLMNotInstalled

    with pytest.raises(VLLMNotInstalled, match="rollout-studio\\[gpu\\]"):
        make_backend("vllm", model_name="smollm2-135m")
    with pytest.raises(ValueError, match="unknown generation backend"):
        make_backend("onnx")

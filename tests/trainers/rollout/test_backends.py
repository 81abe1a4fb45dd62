"""The generation backends: sampling, stop strings, log-probs, reproducibility, the vLLM guard."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from trainers.rollout.backends import make_backend, stop_index
from trainers.rollout.backends.transformers_backend import sample_next

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


def test_a_released_copy_holds_no_weights_until_all_of_them_come_back(tiny):
    import copy

    policy, tokenizer = tiny
    backend = make_backend("transformers", model=copy.deepcopy(policy), tokenizer=tokenizer)
    assert backend.release_weights() is True
    assert sum(p.numel() for p in backend.model.parameters()) == 0
    weights = policy.state_dict()
    with pytest.raises(KeyError, match="released weights not brought back"):
        backend.update_weights({k: v for k, v in weights.items() if k != "model.norm.weight"})
    backend.update_weights(weights)
    for key, value in backend.model.state_dict().items():
        assert torch.equal(value, weights[key]), key
    assert backend.generate([CHAT], n=1, max_new_tokens=4, seed=0)[0].token_ids


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_backend_explains_what_is_missing():
    from trainers.rollout.backends.vllm_backend import VLLMNotInstalled

    with pytest.raises(VLLMNotInstalled, match="rollout-studio\\[gpu\\]"):
        make_backend("vllm", model_name="smollm2-135m")
    with pytest.raises(ValueError, match="unknown generation backend"):
        make_backend("onnx")


@pytest.mark.slow
def test_a_session_encodes_each_turn_once_and_samples_what_a_fresh_encoding_samples(smollm):
    """Three turns of three prompts that share a long system prompt: inside a session each turn encodes
    only what was added since the last, and the samples are the tokens (and, to rounding, the log-probs)
    of encoding every turn from scratch."""
    model, tokenizer = smollm
    backend = make_backend("transformers", model=model, tokenizer=tokenizer)
    system = {"role": "system", "content": "You are a careful assistant; check every step twice. " * 6}
    prompts = [
        backend.prompt_token_ids([system, {"role": "user", "content": f"What is {a} + {a + 3}?"}])
        for a in (11, 23, 37)
    ]
    reply = tokenizer(
        "<|im_end|>\n<|im_start|>user\nThe tool says 42.<|im_end|>\n<|im_start|>assistant\n",
        add_special_tokens=False,
    )["input_ids"]

    def three_turns() -> list[list]:
        turns, current, n = [], prompts, 2
        for turn in range(3):
            completions = backend.generate(current, n=n, max_new_tokens=12, temperature=1.0, seed=turn)
            turns.append(completions)
            current = [current[i // n] + c.token_ids + reply for i, c in enumerate(completions)]
            n = 1
        return turns

    fresh = three_turns()
    with backend.session():
        reused = three_turns()
    for fresh_turn, reused_turn in zip(fresh, reused, strict=True):
        for a, b in zip(fresh_turn, reused_turn, strict=True):
            assert a.token_ids == b.token_ids
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    reused_tokens, encoded_tokens = backend.last_session
    assert reused_tokens > 4 * encoded_tokens  # the system prompt once, then only each turn's new tokens
    assert backend.prefixes is None  # nothing is kept outside a session


@pytest.mark.slow
def test_new_weights_inside_a_session_drop_the_stored_states(policy_copy):
    model, tokenizer = policy_copy
    backend = make_backend("transformers", model=model, tokenizer=tokenizer)
    with backend.session():
        backend.generate([CHAT], n=2, max_new_tokens=4, temperature=1.0, seed=0)
        assert len(backend.prefixes) > 0
        backend.update_weights({k: v.clone() for k, v in model.state_dict().items()})
        assert len(backend.prefixes) == 0


@pytest.mark.slow
def test_a_wide_call_runs_in_waves_that_sample_what_one_wave_samples(smollm):
    """A call whose KV cache would pass `wave_bytes` (an evaluation of many tasks) runs as several waves,
    each within the budget, and greedy decoding gives the tokens of one wide wave, in the prompts' order."""
    from trainers.rollout.backends.transformers_backend import kv_bytes_per_token

    model, tokenizer = smollm
    system = {"role": "system", "content": "You are a careful assistant; check every step twice. " * 6}
    whole = make_backend("transformers", model=model, tokenizer=tokenizer, wave_bytes=0)
    prompts = [
        whole.prompt_token_ids([system, {"role": "user", "content": f"What is {a} + {a + 3}?"}])
        for a in (11, 23, 37, 41, 53)
    ]
    per_prompt = (max(map(len, prompts)) + 6) * kv_bytes_per_token(model)
    waves = make_backend("transformers", model=model, tokenizer=tokenizer, wave_bytes=2 * per_prompt)
    assert [len(w) for w in waves._waves(prompts, 1, 6)] == [2, 2, 1]
    with whole.session():
        one = whole.generate(prompts, n=1, max_new_tokens=6, temperature=0.0)
    with waves.session():
        several = waves.generate(prompts, n=1, max_new_tokens=6, temperature=0.0)
    assert [c.token_ids for c in several] == [c.token_ids for c in one]

"""Token-level conversation building: what the model sees equals the chat template's rendering."""

from __future__ import annotations

import pytest

from trainers.rollout import ChatFormat


@pytest.fixture(scope="module")
def tokenizer():
    from trainers.models import load_tokenizer

    return load_tokenizer("smollm2-135m")


@pytest.mark.parametrize("ended_with_eos", [False, True])
def test_appended_pieces_render_like_the_chat_template(tokenizer, ended_with_eos):
    chat = ChatFormat(tokenizer)
    system, user = "You can use tools.", "What is 12 + 7?"
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "12 + 7"}}</tool_call>'
    system_ids, user_ids = chat.prompt(system, user)
    sampled = chat.encode(call) + ([tokenizer.eos_token_id] if ended_with_eos else [])
    tool_ids = chat.continuation("tool", "Result: 19", ended_with_eos=ended_with_eos)
    answer_ids = chat.encode("<answer>19</answer>")
    ids = system_ids + user_ids + sampled + tool_ids + answer_ids
    expected = tokenizer.apply_chat_template(
        [{"role": "system", "content": system}, {"role": "user", "content": user},
         {"role": "assistant", "content": call}, {"role": "tool", "content": "Result: 19"},
         {"role": "assistant", "content": "<answer>19</answer>"}], tokenize=False)
    assert expected.startswith(tokenizer.decode(ids))
    assert tokenizer.decode(ids) + tokenizer.eos_token + "\n" == expected


def test_system_prompt_is_its_own_turn(tokenizer):
    chat = ChatFormat(tokenizer)
    system_ids, user_ids = chat.prompt("Be brief.", "Hi")
    assert tokenizer.decode(system_ids).endswith("Be brief.<|im_end|>\n")
    assert tokenizer.decode(user_ids).endswith("<|im_start|>assistant\n")

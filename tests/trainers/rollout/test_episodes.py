"""Token-level conversation building: what the model sees equals the chat template's rendering."""

from __future__ import annotations

import pytest

from trainers.rollout.chat import ChatFormat


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
        [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
            {"role": "assistant", "content": call},
            {"role": "tool", "content": "Result: 19"},
            {"role": "assistant", "content": "<answer>19</answer>"},
        ],
        tokenize=False,
    )
    assert expected.startswith(tokenizer.decode(ids))
    assert tokenizer.decode(ids) + tokenizer.eos_token + "\n" == expected


def test_system_prompt_is_its_own_turn(tokenizer):
    chat = ChatFormat(tokenizer)
    system_ids, user_ids = chat.prompt("Be brief.", "Hi")
    assert tokenizer.decode(system_ids).endswith("Be brief.<|im_end|>\n")
    assert tokenizer.decode(user_ids).endswith("<|im_start|>assistant\n")


def test_few_shot_examples_sit_between_system_and_task(tokenizer):
    chat = ChatFormat(tokenizer)
    examples = [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "<answer>4</answer>"},
    ]
    prefix_ids, user_ids = chat.prompt("Be brief.", "What is 3 + 3?", examples)
    expected = tokenizer.apply_chat_template(
        [
            {"role": "system", "content": "Be brief."},
            *examples,
            {"role": "user", "content": "What is 3 + 3?"},
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert tokenizer.decode(prefix_ids + user_ids) == expected
    assert "What is 2 + 2?" in tokenizer.decode(prefix_ids)
    assert tokenizer.decode(user_ids).startswith("<|im_start|>user\nWhat is 3 + 3?")


@pytest.mark.slow
def test_the_trainer_shows_the_environments_worked_example_but_keeps_it_out_of_the_turns(smollm):
    from trainers.registry import environment_kind
    from trainers.rollout.backends.transformers_backend import TransformersBackend
    from trainers.rollout.episodes import generate_rollouts

    model, tokenizer = smollm
    kind = environment_kind("arithmetic_calculator")
    task = kind.build({"max_digits": 1}).tasks("eval", 1, seed=0)[0]
    [[rollout]] = generate_rollouts(
        TransformersBackend(model=model, tokenizer=tokenizer),
        ChatFormat(tokenizer),
        lambda: kind.build({"max_digits": 1}),
        [task],
        [[0]],
        max_turns=1,
        max_new_tokens=4,
        max_context_tokens=1024,
        temperature=1.0,
        top_p=1.0,
        generation_seed=0,
    )
    example = rollout.trajectory.info["prompt_examples"]
    assert [m["role"] for m in example] == ["user", "assistant", "tool", "assistant"]
    assert example[0]["content"] in tokenizer.decode(rollout.prompt_ids)
    assert [t.role for t in rollout.trajectory.turns[:2]] == ["system", "user"]
    assert rollout.trajectory.turns[1].text == task.prompt
    assert sum(1 for t in rollout.trajectory.turns if t.role == "assistant") == 1


@pytest.mark.slow
def test_an_environment_that_cannot_start_fails_its_episode_and_the_group_goes_on(smollm):
    """A dead remote environment (reset raises) becomes an `error` trajectory with the reason, and
    its siblings roll out as usual; nothing hangs or crashes the step."""
    from trainers.registry import environment_kind
    from trainers.rollout.backends.transformers_backend import TransformersBackend
    from trainers.rollout.episodes import generate_rollouts
    from trainers.sdk import wire_check

    model, tokenizer = smollm
    kind = environment_kind("arithmetic_calculator")
    task = kind.build({"max_digits": 1}).tasks("eval", 1, seed=0)[0]

    def make_env():
        env = kind.build({"max_digits": 1})
        built = len(made)
        made.append(env)
        if built == 1:

            def dead(task, seed):
                raise ConnectionError("environment server at 127.0.0.1:9 refused the connection")

            env.reset = dead
        return env

    made: list = []
    [[first, second]] = generate_rollouts(
        TransformersBackend(model=model, tokenizer=tokenizer),
        ChatFormat(tokenizer),
        make_env,
        [task],
        [[0, 1]],
        max_turns=1,
        max_new_tokens=4,
        max_context_tokens=1024,
        temperature=1.0,
        top_p=1.0,
        generation_seed=0,
    )
    assert second.trajectory.status == "error"
    assert "refused the connection" in second.trajectory.info["error"]
    assert second.completion_ids == [] and second.trajectory.turns == []
    assert first.trajectory.status != "error"
    assert sum(1 for t in first.trajectory.turns if t.role == "assistant") == 1
    for rollout in (first, second):
        rollout.reward = 0.0
        assert wire_check.check_item(rollout.to_item()) == {}

"""The pairwise question a preference queue asks an LLM judge, and how its reply is read."""

import pytest

from trainers.rubrics.judge import PAIRWISE_REPLY_PREFIX, pairwise_prompt, parse_pairwise


def test_the_prompt_shows_the_task_both_responses_in_order_and_the_queues_instructions():
    prompt = pairwise_prompt(
        prompt=" What is 2 + 2? ",
        first="<answer>4</answer>",
        second="<answer>5</answer>",
        instructions="Prefer {x}.",
    )
    assert prompt.index("Response 1:\n<answer>4</answer>") < prompt.index("Response 2:\n<answer>5</answer>")
    assert "Task:\nWhat is 2 + 2?" in prompt and "Instructions:\nPrefer {x}." in prompt  # braces stay literal
    assert "Instructions" not in pairwise_prompt(prompt="p", first="a", second="b")
    assert PAIRWISE_REPLY_PREFIX.endswith("Response")


@pytest.mark.parametrize(
    ("reply", "named"),
    [
        (" 2.", 2),
        (" 1", 1),
        ("1 is better because", 1),
        (" #2", 2),
        (" number 1.", 1),
        (" 12", None),  # neither: a longer number
        (" A.", None),
        ("", None),
        (" tie", None),
    ],
)
def test_the_reply_names_response_one_two_or_neither(reply, named):
    assert parse_pairwise(reply) == named

"""Native tool-call formats, tested on the real chat templates of Qwen2.5, Llama 3.1 and Mistral Nemo.

Each parser must read back exactly what its family's template teaches the model to write, refuse
what breaks the environment's permissions with an `Error:` observation, and never raise on model
output. A rollout under a native template must lay out its tokens exactly as the template renders
the whole conversation, with the loss mask on the sampled tokens only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tests.trainers.template_tokenizers import template_tokenizer
from trainers.envs.arithmetic import ArithmeticCalculatorEnv
from trainers.rollout.backends.base import Completion, GenerationBackend
from trainers.rollout.chat import ChatFormat
from trainers.rollout.episodes import generate_rollouts
from trainers.rollout.toolcalls import ParseError, is_error_observation
from trainers.rollout.toolformats import (
    FORMATS,
    STUDIO,
    ToolFormatError,
    detect_family,
    resolve_tool_format,
    template_takes_tools,
)
from trainers.types import Task, ToolCall, ToolSpec

FAMILIES = ("hermes", "llama3", "mistral")
CALCULATOR = ToolSpec(
    "calculator",
    "Evaluates an arithmetic expression.",
    {
        "type": "object",
        "properties": {"expression": {"type": "string", "maxLength": 20}},
        "required": ["expression"],
        "additionalProperties": False,
    },
)


@pytest.fixture(scope="module")
def smollm_tokenizer():
    from trainers.models import load_tokenizer

    return load_tokenizer("smollm2-135m")


def render(
    tokenizer: Any, messages: list[dict], generation_prompt: bool, tools: list[ToolSpec] | None = None
) -> str:
    fmt = FORMATS[detect_family(tokenizer)]
    return ChatFormat(tokenizer, fmt).render(messages, generation_prompt, fmt.template_tools(tools or []))


def as_the_model_writes_it(family: str, call: ToolCall, *, keep_special_tokens: bool) -> str:
    """The assistant text the real template renders for `call`, decoded like a sampler decodes it."""
    tokenizer = template_tokenizer(family)
    fmt = FORMATS[family]
    for base in (
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
        [{"role": "user", "content": "U"}],
    ):
        prompt = render(tokenizer, base, True, [CALCULATOR])
        full = render(tokenizer, [*base, fmt.assistant_message("", [call])], False, [CALCULATOR])
        if full.startswith(prompt):
            sampled = full[len(prompt) :].removesuffix("\n").removesuffix(tokenizer.eos_token)
            ids = tokenizer(sampled, add_special_tokens=False)["input_ids"]
            return tokenizer.decode(ids, skip_special_tokens=not keep_special_tokens)
    raise AssertionError("the template renders no prefix-stable conversation")


# ---- choosing the format -----------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_auto_picks_the_family_of_a_tool_aware_template(family):
    tokenizer = template_tokenizer(family)
    assert template_takes_tools(tokenizer)
    assert resolve_tool_format("auto", tokenizer) is FORMATS[family]
    assert resolve_tool_format("native", tokenizer) is FORMATS[family]
    assert resolve_tool_format("studio", tokenizer) is STUDIO


def test_a_template_without_tools_gets_the_studio_format_and_native_is_refused(smollm_tokenizer):
    assert not template_takes_tools(smollm_tokenizer)
    assert resolve_tool_format("auto", smollm_tokenizer) is STUDIO
    with pytest.raises(ToolFormatError, match="ignores them"):
        resolve_tool_format("native", smollm_tokenizer)
    with pytest.raises(ToolFormatError, match="unknown tool_format"):
        resolve_tool_format("xml", smollm_tokenizer)


def test_an_explicit_family_overrides_detection():
    assert resolve_tool_format("hermes", template_tokenizer("llama3")) is FORMATS["hermes"]


# ---- parsing what the template teaches ---------------------------------------------------------


@pytest.mark.parametrize("keep_special_tokens", [True, False])
@pytest.mark.parametrize("family", FAMILIES)
def test_each_parser_reads_back_the_call_its_template_renders(family, keep_special_tokens):
    call = ToolCall("calculator", {"expression": "12 + 7"}, "call00001")
    text = as_the_model_writes_it(family, call, keep_special_tokens=keep_special_tokens)
    fmt = FORMATS[family]
    assert fmt.has_call(text)
    [parsed] = fmt.parse(text, [CALCULATOR])
    assert (parsed.name, parsed.arguments) == ("calculator", {"expression": "12 + 7"})
    if family == "mistral":
        assert parsed.id == "call00001"  # Mistral's template writes the id into the call


@pytest.mark.parametrize("family", FAMILIES)
def test_a_final_answer_is_not_a_call(family):
    fmt = FORMATS[family]
    assert fmt.parse("The sum is 19. <answer>19</answer>", [CALCULATOR]) == []
    assert not fmt.has_call("<answer>19</answer>")


@pytest.mark.parametrize(
    ("family", "text", "why"),
    [
        (
            "hermes",
            '<tool_call>\n{"name": "calculator", "arguments": {"expression": 12}\n</tool_call>',
            "not valid JSON",
        ),
        (
            "hermes",
            '<tool_call>\n{"name": "shell", "arguments": {"cmd": "ls"}}\n</tool_call>',
            "Unknown tool 'shell'",
        ),
        (
            "llama3",
            '{"name": "calculator", "parameters": {"expression": "1+1", "x": 2}}',
            "unexpected arguments",
        ),
        ("llama3", '<|python_tag|>brave_search.call(query="x")', "Only JSON tool calls"),
        (
            "mistral",
            '[TOOL_CALLS][{"name": "calculator", "arguments": {"expression": "' + "9" * 40 + '"}}]',
            "is too long",
        ),
        ("mistral", "[TOOL_CALLS][]", "list is empty"),
    ],
)
def test_a_bad_call_is_an_error_observation_that_shows_the_familys_syntax(family, text, why):
    parsed = FORMATS[family].parse(text, [CALCULATOR])
    assert isinstance(parsed, ParseError)
    assert why in parsed.message
    assert is_error_observation(parsed.observation)
    assert FORMATS[family].hint in parsed.observation


@pytest.mark.parametrize("family", FAMILIES)
def test_parsers_never_raise_on_garbage(family):
    fmt = FORMATS[family]
    for text in [
        "",
        "{",
        "[{",
        "[TOOL_CALLS]",
        "[TOOL_CALLS]x[ARGS]{",
        "<|python_tag|>",
        "<tool_call>",
        "{}",
        "[{}]",
        '{"name": null}',
        '[{"name": "calculator", "arguments": "12"}]',
        "\x00\ud800",
        "[" * 500,
    ]:
        result = fmt.parse(text, [CALCULATOR])
        assert isinstance(result, (list, ParseError))


# ---- results go back as the template's tool messages --------------------------------------------


@pytest.mark.parametrize(
    ("family", "expected"),
    [
        (
            "hermes",
            "\n<|im_start|>user\n<tool_response>\n19\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
        ),
        # Llama 3.1's template writes string content through tojson: the model sees "19", quoted.
        (
            "llama3",
            '<|start_header_id|>ipython<|end_header_id|>\n\n"19"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n',
        ),
        ("mistral", '[TOOL_RESULTS]{"content": "19", "call_id": "call00003"}[/TOOL_RESULTS]'),
    ],
)
def test_a_tool_result_continues_the_conversation_as_the_template_renders_it(family, expected):
    tokenizer = template_tokenizer(family)
    fmt = FORMATS[family]
    chat = ChatFormat(tokenizer, fmt)
    call = ToolCall("calculator", {"expression": "12 + 7"}, "call00003")
    ids = chat.continuation(
        "tool",
        "19",
        ended_with_eos=True,
        tools=[CALCULATOR],
        assistant=fmt.assistant_message("", [call]),
        message=fmt.tool_message("19", call),
    )
    assert tokenizer.decode(ids) == expected


# ---- the environment does not care which format is in use ---------------------------------------


def env_in(fmt_name: str, **config: Any) -> ArithmeticCalculatorEnv:
    env = ArithmeticCalculatorEnv(max_digits=1, **config)
    assert env.use_tool_format(FORMATS[fmt_name])
    env.reset(Task(id="t", prompt="What is 3 + 4?", answer=7), seed=0)
    return env


def call_text(fmt_name: str, expression: str, index: int = 1) -> str:
    return FORMATS[fmt_name].call_text(ToolCall("calculator", {"expression": expression}, f"call{index:05d}"))


@pytest.mark.parametrize("fmt_name", ["studio", *FAMILIES])
def test_permissions_are_the_same_whatever_the_format(fmt_name):
    env = env_in(fmt_name, max_tool_calls=1, max_expression_chars=10)
    first = env.step(call_text(fmt_name, "3 + 4"))
    assert first.observation.endswith("7") and first.info["tool_error"] is False
    assert first.info["tool_call_id"]
    too_long = env.step(call_text(fmt_name, "1 + 1 + 1 + 1 + 1", 2))
    assert is_error_observation(too_long.observation) and "too long" in too_long.observation
    over_budget = env.step(call_text(fmt_name, "1 + 1", 3))
    assert (
        is_error_observation(over_budget.observation) and "used all 1 tool calls" in over_budget.observation
    )
    assert env.state()["tool_calls"] == 1 and env.state()["failed_tool_calls"] == 2


@pytest.mark.parametrize("family", FAMILIES)
def test_a_native_environment_leaves_the_tool_list_to_the_template(family):
    env = env_in(family)
    assert "<tool_call>" not in env.system_prompt() and "Tools:" not in env.system_prompt()
    example = env.example_messages()
    assert [m["role"] for m in example] == ["user", "assistant", "tool", "assistant"]
    assert example[1]["tool_calls"][0]["function"] == {
        "name": "calculator",
        "arguments": {"expression": "12 + 7"},
    }
    assert example[2]["tool_call_id"] == example[1]["tool_calls"][0]["id"]
    studio = env_in("studio")
    assert "<tool_call>" in studio.system_prompt()


# ---- a whole rollout under a native template ---------------------------------------------------


class ReplayBackend(GenerationBackend):
    """Samples fixed replies, one per turn, as token ids of the real tokenizer (the real model cannot
    be made to write a given call; this tests the token layout around what it writes)."""

    def __init__(self, tokenizer: Any, replies: list[tuple[str, str]]) -> None:
        self.tokenizer, self.replies = tokenizer, list(replies)

    def generate(
        self,
        prompts: Sequence[Any],
        n: int = 1,
        max_new_tokens: int = 128,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[Completion]:
        out = []
        for _ in prompts:
            text, finish = self.replies.pop(0)
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            if finish == "eos":
                ids = ids + [self.tokenizer.eos_token_id]
            decoded = self.tokenizer.decode(ids, skip_special_tokens=True)
            out.append(
                Completion(
                    ids, decoded, finish, [-0.5] * len(ids), "</tool_call>" if finish == "stop" else None
                )
            )
        return out

    def update_weights(self, state_dict: Any) -> None:
        pass


@pytest.mark.parametrize("family", FAMILIES)
def test_a_native_rollout_lays_out_tokens_as_the_template_renders_the_conversation(family):
    tokenizer = template_tokenizer(family)
    fmt = FORMATS[family]
    chat = ChatFormat(tokenizer, fmt)
    call = ToolCall("calculator", {"expression": "3 + 4"}, "call00001")
    sampled_call = as_the_model_writes_it(family, call, keep_special_tokens=True)
    # Hermes stops on "</tool_call>" (the close comes from the template); the others end with eos.
    replies = [(sampled_call, "stop" if family == "hermes" else "eos"), ("<answer>7</answer>", "eos")]
    task = Task(id="t", prompt="What is 3 + 4?", answer=7)
    [[rollout]] = generate_rollouts(
        ReplayBackend(tokenizer, replies),
        chat,
        lambda: ArithmeticCalculatorEnv(max_digits=1),
        [task],
        [[0]],
        max_turns=4,
        max_new_tokens=64,
        max_context_tokens=100_000,
        temperature=1.0,
        top_p=1.0,
        generation_seed=0,
        stop=fmt.stop,
    )

    traj = rollout.trajectory
    assert traj.status == "ok" and traj.info["correct"] is True
    assert [t.role for t in traj.turns] == ["system", "user", "assistant", "tool", "assistant"]
    assert (traj.turns[2].tool_name, traj.turns[2].tool_args) == ("calculator", {"expression": "3 + 4"})
    assert traj.turns[3].text == "7" and traj.turns[3].tool_result == "7"

    env = ArithmeticCalculatorEnv(max_digits=1)
    env.use_tool_format(fmt)
    env.reset(task, 0)
    conversation = [
        {"role": "system", "content": env.system_prompt()},
        *env.example_messages(),
        {"role": "user", "content": task.prompt},
        fmt.assistant_message("", [call]),
        fmt.tool_message("7", call),
        {"role": "assistant", "content": "<answer>7</answer>"},
    ]
    expected = render(tokenizer, conversation, False, env.tools)
    if family == "mistral":
        # Mistral's template shows the system prompt only while the task is the last message; the
        # model saw it when it sampled, and the rollout keeps what the model saw.
        expected = expected.replace(
            f"[INST]{task.prompt}[/INST]", f"[INST]{env.system_prompt()}\n\n{task.prompt}[/INST]"
        )
    seen = tokenizer.decode(rollout.prompt_ids + rollout.completion_ids)
    assert seen == expected.removesuffix("\n")  # nothing after the last sampled eos

    # The loss mask covers exactly the sampled tokens; the template's glue and the tool result are masked.
    sampled = [tok for tok, m in zip(rollout.completion_ids, rollout.loss_mask, strict=True) if m]
    assert tokenizer.decode(sampled) == tokenizer.decode(traj.turns[2].token_ids + traj.turns[4].token_ids)
    assert rollout.model_tokens == len(traj.turns[2].token_ids) + len(traj.turns[4].token_ids)
    assert traj.turns[3].loss_mask == [0] * len(traj.turns[3].token_ids)
    assert "7" in tokenizer.decode(traj.turns[3].token_ids)
    assert [lp for lp, m in zip(rollout.behaviour_logprobs, rollout.loss_mask, strict=True) if not m] == [
        0.0
    ] * (len(rollout.loss_mask) - rollout.model_tokens)


@pytest.mark.slow
def test_the_real_model_rolls_out_under_a_native_template(smollm):
    """SmolLM2 with Qwen2.5's template on its own ChatML tokenizer: the whole path runs for real."""
    from tests.trainers.template_tokenizers import template_text
    from trainers.rollout.backends.transformers_backend import TransformersBackend

    model, base_tokenizer = smollm
    tokenizer = __import__("copy").deepcopy(base_tokenizer)
    tokenizer.chat_template = template_text("hermes")
    fmt = resolve_tool_format("auto", tokenizer)
    assert fmt.name == "hermes"
    chat = ChatFormat(tokenizer, fmt)
    env = ArithmeticCalculatorEnv(max_digits=1)
    tasks = env.tasks("eval", 2, seed=0)
    groups = generate_rollouts(
        TransformersBackend(model=model, tokenizer=tokenizer),
        chat,
        lambda: ArithmeticCalculatorEnv(max_digits=1),
        tasks,
        [[0, 1], [2, 3]],
        max_turns=2,
        max_new_tokens=24,
        max_context_tokens=2048,
        temperature=1.0,
        top_p=1.0,
        generation_seed=0,
        stop=fmt.stop,
    )
    for rollout in (r for g in groups for r in g):
        prompt = tokenizer.decode(rollout.prompt_ids)
        assert '"name": "calculator"' in prompt and "<tools>" in prompt  # the template listed the tool
        assert len(rollout.loss_mask) == len(rollout.completion_ids) == len(rollout.behaviour_logprobs)
        assistant_tokens = sum(
            len(t.token_ids or []) for t in rollout.trajectory.turns if t.role == "assistant"
        )
        assert rollout.model_tokens == assistant_tokens

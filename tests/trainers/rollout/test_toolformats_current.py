"""The tool-call formats of current models, each on its family's real chat template (offline: the
templates are in tests/fixtures/templates): Qwen3 (hermes calls, `<think>` kept out of the answer and in
the trajectory), Qwen3-Coder (XML calls) and gpt-oss (harmony channels). `auto` picks each from the
template and says why."""

from __future__ import annotations

from typing import Any

import pytest

from tests.trainers.rollout.test_toolformats import CALCULATOR, ReplayBackend
from tests.trainers.template_tokenizers import template_tokenizer
from trainers.envs.arithmetic import ArithmeticCalculatorEnv
from trainers.rollout.chat import ChatFormat
from trainers.rollout.episodes import generate_rollouts
from trainers.rollout.toolcalls import ParseError, is_error_observation
from trainers.rollout.toolformats import FORMATS, explain_tool_format, resolve_tool_format
from trainers.sdk.reasoning import split_reasoning, visible_answer
from trainers.types import Task, ToolCall, ToolSpec, Trajectory, Turn

CURRENT = ("qwen3", "qwen3_coder", "harmony")
BASE = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
TYPED = ToolSpec(
    "lookup",
    "Typed arguments.",
    {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "exact": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "q": {"type": "string"},
        },
        "required": ["n", "q"],
    },
)


def chat_for(family: str) -> ChatFormat:
    return ChatFormat(template_tokenizer(family), FORMATS[family])


def rendered_call(family: str, call: ToolCall, tools: list[ToolSpec], thinking: str = "") -> str:
    """What the real template renders after the generation prompt for an assistant message with `call`
    (and `thinking`), decoded keeping special tokens: the text a model of the family writes."""
    chat, fmt = chat_for(family), FORMATS[family]
    template_tools = fmt.template_tools(tools)
    prompt = chat.render(BASE, True, template_tools)
    message = fmt.assistant_message("", [call])
    if thinking:
        message["thinking" if family == "harmony" else "reasoning_content"] = thinking
    full = chat.render([*BASE, message], False, template_tools)
    assert full.startswith(prompt), (prompt[-200:], full[-300:])
    return full[len(prompt) :].removesuffix("\n").removesuffix(chat.tokenizer.eos_token)


@pytest.mark.parametrize("family", CURRENT)
def test_auto_picks_the_family_and_says_why(family):
    tokenizer = template_tokenizer(family)
    fmt, why = explain_tool_format("auto", tokenizer)
    assert fmt is FORMATS[family] and resolve_tool_format("native", tokenizer) is fmt
    assert why.startswith("auto: the chat template renders tools= and writes")
    assert {"qwen3": "Qwen3", "qwen3_coder": "Qwen3-Coder", "harmony": "gpt-oss"}[family] in why


def test_the_older_families_are_still_told_apart():
    for family in ("hermes", "llama3", "mistral"):
        assert resolve_tool_format("auto", template_tokenizer(family)).name == family


@pytest.mark.parametrize("family", CURRENT)
def test_each_parser_reads_back_what_its_template_renders(family):
    call = ToolCall("lookup", {"n": 3, "exact": True, "tags": ["a", "b"], "q": "two words"}, "call00001")
    text = rendered_call(family, call, [TYPED], thinking="Let me look it up.")
    fmt = FORMATS[family]
    assert fmt.has_call(text)
    [parsed] = fmt.parse(text, [TYPED])
    assert (parsed.name, parsed.arguments) == ("lookup", call.arguments)


def test_qwen3_coder_reads_values_by_the_tools_schema_and_refuses_what_breaks_it():
    fmt = FORMATS["qwen3_coder"]
    text = "<tool_call>\n<function=lookup>\n<parameter=n>\nseven\n</parameter>\n<parameter=q>\n7\n</parameter>\n</function>\n</tool_call>"
    parsed = fmt.parse(text, [TYPED])
    assert isinstance(parsed, ParseError) and is_error_observation(parsed.observation)
    assert fmt.hint in parsed.observation
    [call] = fmt.parse(text.replace("seven", "7"), [TYPED])
    assert call.arguments == {"n": 7, "q": "7"}  # the string parameter stays a string
    unknown = fmt.parse("<tool_call>\n<function=shell>\n</function>\n</tool_call>", [TYPED])
    assert isinstance(unknown, ParseError) and "Unknown tool 'shell'" in unknown.message


def test_qwen3_ignores_a_call_it_only_thinks_about_and_grades_the_answer_after_its_reasoning():
    fmt = FORMATS["qwen3"]
    musing = '<think>\nMaybe <tool_call>\n{"name": "calculator", "arguments": {"expression": "1"}}\n</tool_call>?\n</think>\n\n<answer>7</answer>'
    assert fmt.parse(musing, [CALCULATOR]) == [] and not fmt.has_call(musing)
    assert fmt.answer_text(musing) == "<answer>7</answer>"
    assert split_reasoning("<think>\ncut off while thinking") == ("cut off while thinking", "")
    trajectory = Trajectory(Task("t", "q", 7), [Turn("user", "q"), Turn("assistant", musing)])
    assert trajectory.final_answer == "<answer>7</answer>"  # the rubric's answer …
    assert "<think>" in trajectory.turns[-1].text  # … and the trajectory keeps the reasoning


def test_harmony_keeps_analysis_out_of_the_answer():
    text = "<|channel|>analysis<|message|>3 + 4 is 7.<|end|><|start|>assistant<|channel|>final<|message|><answer>7</answer>"
    fmt = FORMATS["harmony"]
    assert fmt.answer_text(text) == "<answer>7</answer>" and visible_answer(text) == "<answer>7</answer>"
    assert fmt.parse(text, [CALCULATOR]) == []
    bad = fmt.parse(
        " to=functions.calculator<|channel|>commentary json<|message|>{oops<|call|>", [CALCULATOR]
    )
    assert isinstance(bad, ParseError) and "not valid JSON" in bad.message


@pytest.mark.parametrize("family", CURRENT)
def test_parsers_never_raise_on_garbage(family):
    for text in [
        "",
        "<tool_call>",
        "<think>",
        "<function=",
        "<|channel|>",
        "<|message|>{",
        "\x00\ud800",
        "<" * 500,
    ]:
        assert isinstance(FORMATS[family].parse(text, [CALCULATOR]), (list, ParseError))


# ---- a whole rollout under each template -------------------------------------------------------------


def sampled_replies(family: str, call: ToolCall) -> list[tuple[str, str]]:
    """The two turns a model of the family writes: a call (with its reasoning), then the answer."""
    if family == "qwen3":
        return [
            (rendered_call(family, call, [CALCULATOR], thinking="I should use the calculator."), "stop"),
            ("<think>\nIt said 7.\n</think>\n\n<answer>7</answer>", "eos"),
        ]
    if family == "qwen3_coder":
        return [(rendered_call(family, call, [CALCULATOR]), "stop"), ("<answer>7</answer>", "eos")]
    return [
        (rendered_call(family, call, [CALCULATOR], thinking="Use the tool."), "stop"),
        (
            "<|channel|>analysis<|message|>It said 7.<|end|><|start|>assistant<|channel|>final<|message|><answer>7</answer>",
            "eos",
        ),
    ]


class SpecialReplayBackend(ReplayBackend):
    """ReplayBackend whose `text` drops special tokens, as the real backends decode."""


@pytest.mark.parametrize("family", CURRENT)
def test_a_rollout_lays_out_tokens_as_the_template_renders_the_conversation(family):
    tokenizer = template_tokenizer(family)
    fmt = FORMATS[family]
    chat = ChatFormat(tokenizer, fmt)
    call = ToolCall("calculator", {"expression": "3 + 4"}, "call00001")
    replies = sampled_replies(family, call)
    task = Task(id="t", prompt="What is 3 + 4?", answer=7)
    [[rollout]] = generate_rollouts(
        SpecialReplayBackend(tokenizer, replies),
        chat,
        lambda: ArithmeticCalculatorEnv(max_digits=1),
        [task],
        [[0]],
        max_turns=4,
        max_new_tokens=256,
        max_context_tokens=100_000,
        temperature=1.0,
        top_p=1.0,
        generation_seed=0,
        stop=fmt.stop,
    )
    traj = rollout.trajectory
    assert traj.status == "ok" and traj.info["correct"] is True, traj.info
    assert [t.role for t in traj.turns] == ["system", "user", "assistant", "tool", "assistant"]
    assert (traj.turns[2].tool_name, traj.turns[2].tool_args) == ("calculator", {"expression": "3 + 4"})
    assert traj.turns[3].tool_result == "7"
    assert traj.final_answer == "<answer>7</answer>"
    if family != "qwen3_coder":  # the reasoning stays in the trajectory
        assert ("It said 7." in traj.turns[4].text) and (traj.turns[4].text != traj.final_answer)

    env = ArithmeticCalculatorEnv(max_digits=1)
    env.use_tool_format(fmt)
    env.reset(task, 0)
    final: dict[str, Any] = fmt.assistant_message(traj.turns[4].text, [])
    conversation = [
        {"role": "system", "content": env.system_prompt()},
        *env.example_messages(),
        {"role": "user", "content": task.prompt},
        fmt.assistant_message(traj.turns[2].text, [call]),
        fmt.tool_message("7", call),
        final,
    ]
    expected = chat.render(conversation, False, fmt.template_tools(env.tools))
    if family == "harmony":
        # gpt-oss's template drops a call's analysis once a final answer follows (for later turns); the
        # model saw it when it sampled the call, and the rollout keeps what the model saw.
        asked = f"<|start|>user<|message|>{task.prompt}<|end|><|start|>assistant"
        expected = expected.replace(
            asked, asked + "<|channel|>analysis<|message|>Use the tool.<|end|><|start|>assistant"
        )
    seen = tokenizer.decode(rollout.prompt_ids + rollout.completion_ids)
    assert seen == expected.removesuffix("\n")
    sampled = [tok for tok, m in zip(rollout.completion_ids, rollout.loss_mask, strict=True) if m]
    assert sampled == traj.turns[2].token_ids + traj.turns[4].token_ids

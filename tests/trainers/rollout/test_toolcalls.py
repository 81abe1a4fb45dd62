"""The tool-call format: what parses, what becomes an error observation, what the prompt teaches."""

import pytest

from trainers.rollout.toolcalls import (
    ParseError,
    ToolExample,
    extract_answer,
    format_tool_call,
    format_tools_prompt,
    is_error_observation,
    parse_tool_calls,
)
from trainers.types import ToolCall, ToolSpec

CALCULATOR = ToolSpec(
    name="calculator",
    description="Evaluates an arithmetic expression.",
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string", "maxLength": 20, "description": "e.g. 12+7"}},
        "required": ["expression"],
        "additionalProperties": False,
    },
)
CLOCK = ToolSpec(name="clock", description="Current time.", parameters={"type": "object", "properties": {}})
TOOLS = [CALCULATOR, CLOCK]


def test_it_parses_a_well_formed_call():
    text = (
        'Let me compute. <tool_call>{"name": "calculator", "arguments": {"expression": "12+7"}}</tool_call>'
    )
    assert parse_tool_calls(text, TOOLS) == [ToolCall("calculator", {"expression": "12+7"})]


def test_no_call_is_an_empty_list():
    assert parse_tool_calls("The answer is <answer>19</answer>", TOOLS) == []


def test_it_tolerates_the_slips_small_models_make():
    unclosed = '<tool_call>{"name": "calculator", "arguments": {"expression": "3*4"}}'
    fenced = (
        '<tool_call>\n```json\n{"name": "calculator", "arguments": {"expression": "3*4"}}\n```\n</tool_call>'
    )
    bare_string = '<tool_call>{"name": "calculator", "arguments": "3*4"}</tool_call>'
    for text in (unclosed, fenced, bare_string):
        assert parse_tool_calls(text, TOOLS) == [ToolCall("calculator", {"expression": "3*4"})], text
    assert parse_tool_calls('<tool_call>{"name": "clock"}</tool_call>', TOOLS) == [ToolCall("clock", {})]


def test_several_calls_come_back_in_order():
    text = (
        format_tool_call(ToolCall("clock", {}))
        + " then "
        + format_tool_call(ToolCall("calculator", {"expression": "1+1"}))
    )
    assert [c.name for c in parse_tool_calls(text, TOOLS)] == ["clock", "calculator"]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("<tool_call>{calculator: 12+7}</tool_call>", "not valid JSON"),
        ("<tool_call></tool_call>", "empty"),
        ('<tool_call>["calculator"]</tool_call>', "JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'no "name"'),
        (
            '<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>',
            "Unknown tool 'search'. Available tools: calculator, clock",
        ),
        (
            '<tool_call>{"name": "calculator", "arguments": {}}</tool_call>',
            "'expression' is a required property",
        ),
        (
            '<tool_call>{"name": "calculator", "arguments": {"expression": 12}}</tool_call>',
            "argument 'expression'",
        ),
        (
            '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1", "x": 1}}</tool_call>',
            "unexpected arguments",
        ),
        (
            '<tool_call>{"name": "calculator", "arguments": {"expression": "'
            + "1+" * 20
            + '1"}}</tool_call>',
            "too long",
        ),
        (
            '<tool_call>{"name": "calculator", "arguments": [1]}</tool_call>',
            '"arguments" must be a JSON object',
        ),
    ],
)
def test_malformed_calls_become_error_observations(text, fragment):
    result = parse_tool_calls(text, TOOLS)
    assert isinstance(result, ParseError)
    assert fragment in result.message
    assert is_error_observation(result.observation)
    assert "<tool_call>" in result.observation  # it reminds the model of the format


def test_without_tools_only_syntax_is_checked():
    assert parse_tool_calls('<tool_call>{"name": "anything", "arguments": {"a": 1}}</tool_call>') == [
        ToolCall("anything", {"a": 1})
    ]


def test_extract_answer():
    assert extract_answer("x <answer> 19 </answer>") == "19"
    assert extract_answer("<answer>1</answer> no, <answer>2</answer>") == "2"
    assert extract_answer("<answer>42") == "42"
    assert extract_answer("42") is None


def test_the_prompt_shows_tools_and_a_worked_example():
    example = ToolExample("What is 12 + 7?", ToolCall("calculator", {"expression": "12+7"}), "19", "19")
    prompt = format_tools_prompt(TOOLS, example)
    assert (
        '- calculator: Evaluates an arithmetic expression. Arguments: "expression" (string): e.g. 12+7.'
        in prompt
    )
    assert (
        'Assistant: <tool_call>{"name": "calculator", "arguments": {"expression": "12+7"}}</tool_call>'
        in prompt
    )
    assert "Assistant: <answer>19</answer>" in prompt
    # the example in the prompt parses with the same parser
    line = next(line for line in prompt.splitlines() if line.startswith("Assistant: <tool_call>"))
    assert parse_tool_calls(line, TOOLS) == [example.call]

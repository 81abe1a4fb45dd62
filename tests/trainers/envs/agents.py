"""Agents as a user writes them, against the real `openai` client: the `agent` kind's tests run these.

None of them knows about Rollout Studio: each gets a task (a dict) and an `openai.OpenAI` client.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

CALCULATOR_TOOL = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluates an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}


def calculate(expression: str) -> str:
    """The agent's own tool: integer arithmetic on 'A op B'."""
    a, op, b = expression.split()
    x, y = int(a), int(b)
    return str(x + y if op == "+" else x - y if op == "-" else x * y)


def calculator_agent(task: dict[str, Any], client: Any) -> dict[str, Any]:
    """A multi-turn tool-using agent: offer the calculator, run each call it makes, feed the result
    back, and grade the final answer against the task's."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful assistant. Use the calculator for arithmetic."},
        {"role": "user", "content": task["prompt"]},
    ]
    for _ in range(4):
        reply = client.chat.completions.create(
            model="any-model", messages=messages, tools=[CALCULATOR_TOOL], max_tokens=48
        )
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            correct = str(task.get("answer")) in (message.content or "")
            return {"reward": 1.0 if correct else 0.0, "correct": correct}
        for call in message.tool_calls:
            result = calculate(json.loads(call.function.arguments)["expression"])
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return {"reward": 0.0, "correct": False}


def chatty_agent(task: dict[str, Any], client: Any) -> float:
    """Two plain chat turns, no tools: what the untrained model can always do."""
    messages = [{"role": "user", "content": task["prompt"]}]
    first = client.chat.completions.create(model="m", messages=messages, max_tokens=12)
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Say it again, shorter."},
    ]
    second = client.chat.completions.create(model="m", messages=messages, max_tokens=12)
    return float(len(second.choices[0].message.content or "") % 3)


def crashing_agent(task: dict[str, Any], client: Any) -> None:
    """Calls the model once, then fails on its own."""
    client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": task["prompt"]}], max_tokens=4
    )
    raise ValueError(f"the agent broke on task {task['id']}")


RELEASE_HANGING = threading.Event()


def hanging_agent(task: dict[str, Any], client: Any) -> None:
    """Never finishes on its own (the test releases it afterwards; a real hang would not end)."""
    client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": task["prompt"]}], max_tokens=4
    )
    RELEASE_HANGING.wait(timeout=120)


def sleeping_agent(task: dict[str, Any], client: Any) -> None:
    """Hangs without calling anything (for process isolation: it must be killed)."""
    time.sleep(3600)


def silent_agent(task: dict[str, Any], client: Any) -> float:
    """Answers without ever calling the model."""
    return 1.0


def flaky_agent(task: dict[str, Any], client: Any) -> dict[str, Any]:
    """The calculator agent, except that it breaks on tasks marked "crash" (after calling the model)."""
    if task.get("crash"):
        crashing_agent(task, client)
    return calculator_agent(task, client)

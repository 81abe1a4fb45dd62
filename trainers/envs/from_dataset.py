"""from_dataset: the user's own tasks from a JSONL file.

Each line is a JSON object: {"prompt": str, "answer": any, "id"?: str, "tools"?: ["calculator", "python"]}.
A line's "tools" narrows the environment's configured tools for that task. The eval split is chosen
by a hash of the prompt, so it is stable however the file is reordered or grown.

tasks(split, n, seed): the split's tasks shuffled by `seed`; a train list longer than the split
cycles through it again (reshuffled each pass); an eval list is at most the split's size.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from trainers.envs.base import Split, ToolEnvironment, ToolError, answer_text, split_of, task_id
from trainers.envs.tools import run_calculator, run_python_tool, tool_by_name
from trainers.rubrics.criteria import find_numbers, parse_number
from trainers.toolcalls import ToolExample, extract_answer, format_tools_prompt
from trainers.types import Task, ToolCall

KNOWN_TOOLS = ("calculator", "python")
MAX_REPORTED_ERRORS = 10


class DatasetError(ValueError):
    """The dataset file has lines that are not tasks; the message lists them by line number."""


def load_tasks(path: str | Path) -> list[Task]:
    file = Path(path)
    if not str(path).strip():
        raise DatasetError("No dataset path is configured.")
    if not file.is_file():
        raise FileNotFoundError(f"Dataset file not found: {file}")
    tasks: list[Task] = []
    errors: list[str] = []
    seen_ids: set[str] = set()
    with file.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                errors.append(f"line {number}: not valid JSON ({exc.msg} at column {exc.colno})")
                continue
            if not isinstance(row, dict):
                errors.append(f"line {number}: must be a JSON object")
                continue
            prompt = row.get("prompt")
            if not isinstance(prompt, str) or not prompt.strip():
                errors.append(f"line {number}: missing \"prompt\" (a non-empty string)")
                continue
            if "answer" not in row:
                errors.append(f"line {number}: missing \"answer\"")
                continue
            tools = row.get("tools")
            if tools is not None and (not isinstance(tools, list) or not set(tools) <= set(KNOWN_TOOLS)):
                errors.append(f"line {number}: \"tools\" must be a list drawn from {', '.join(KNOWN_TOOLS)}")
                continue
            identifier = str(row["id"]) if "id" in row else task_id("dataset", prompt)
            if identifier in seen_ids:
                errors.append(f"line {number}: duplicate id {identifier!r}")
                continue
            seen_ids.add(identifier)
            meta: dict[str, Any] = {"line": number}
            if tools is not None:
                meta["tools"] = tools
            tasks.append(Task(id=identifier, prompt=prompt, answer=row["answer"], meta=meta))
    if errors:
        shown = "; ".join(errors[:MAX_REPORTED_ERRORS])
        more = f" (and {len(errors) - MAX_REPORTED_ERRORS} more)" if len(errors) > MAX_REPORTED_ERRORS else ""
        raise DatasetError(f"{file}: {len(errors)} bad line(s): {shown}{more}")
    if not tasks:
        raise DatasetError(f"{file}: no tasks (the file is empty).")
    return tasks


EXAMPLES = {
    "calculator": ToolExample("What is 12 + 7?", ToolCall("calculator", {"expression": "12 + 7"}), "19", "19"),
    "python": ToolExample("What is 2**10?", ToolCall("python", {"code": "print(2**10)"}), "1024", "1024"),
}


class DatasetEnv(ToolEnvironment):
    kind = "from_dataset"

    def __init__(
        self,
        path: str,
        tools: list[str] | None = None,
        match: str = "exact",
        system_prompt: str = "",
        max_turns: int = 4,
        few_shot: bool = True,
        max_tool_calls: int = 3,
        reward_correct: float = 1.0,
        eval_fraction: float = 0.1,
    ) -> None:
        super().__init__(max_turns=max_turns, max_tool_calls=max_tool_calls, few_shot=few_shot)
        if match not in ("exact", "numeric", "contains"):
            raise ValueError("match must be exact, numeric or contains")
        self.path, self.match, self.extra_prompt = path, match, system_prompt
        self.configured_tools = list(tools or [])
        self.reward_correct, self.eval_fraction = reward_correct, eval_fraction
        self.all_tasks = load_tasks(path)  # fail at build time with a clear message
        self.tools = [tool_by_name(name) for name in self.configured_tools]

    def tasks(self, split: Split, n: int, seed: int) -> list[Task]:
        if split not in ("train", "eval"):
            raise ValueError(f"split must be 'train' or 'eval', not {split!r}")
        pool = [t for t in self.all_tasks if split_of(t.prompt, self.eval_fraction) == split]
        if not pool:
            raise DatasetError(f"{self.path}: the {split} split is empty ({len(self.all_tasks)} tasks, eval fraction {self.eval_fraction}).")
        rng = random.Random(f"{self.kind}:{split}:{seed}")
        if split == "eval":
            order = list(pool)
            rng.shuffle(order)
            return order[:n]
        chosen: list[Task] = []
        while len(chosen) < n:
            order = list(pool)
            rng.shuffle(order)
            chosen.extend(order[: n - len(chosen)])
        return chosen

    def reset(self, task: Task, seed: int) -> str:
        names = [t for t in self.configured_tools if t in task.meta["tools"]] if "tools" in task.meta else self.configured_tools
        self.tools = [tool_by_name(name) for name in names]
        return super().reset(task, seed)

    @property
    def example(self) -> ToolExample | None:  # type: ignore[override]
        """A worked example for the first tool this task offers (None without tools)."""
        if not self.tools:
            return None
        return EXAMPLES[self.tools[0].name]

    def example_messages(self) -> list[dict[str, str]]:
        if not self.few_shot:
            return []
        if self.tools:
            return super().example_messages()
        return [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "<answer>5</answer>"}]

    def system_prompt(self) -> str:
        parts = [self.extra_prompt.strip()] if self.extra_prompt.strip() else []
        if self.tools:
            parts.append(format_tools_prompt(self.tools, self.example))
        else:
            parts.append("Give your final answer as <answer>ANSWER</answer>.")
        return "\n\n".join(parts)

    def run_tool(self, call: ToolCall) -> str:
        if call.name == "calculator":
            return run_calculator(call.arguments["expression"], 100)
        if call.name == "python":
            return run_python_tool(call.arguments["code"], timeout_s=5, memory_mb=256)
        raise ToolError(f"Tool {call.name!r} is not available.")

    def grade(self, text: str) -> tuple[float, dict[str, Any]]:
        assert self.task is not None
        expected = self.task.answer
        candidate = answer_text(text, require_tag=False) or ""
        self.last_answer = candidate
        if self.match == "numeric":
            want = expected if isinstance(expected, (int, float)) and not isinstance(expected, bool) else parse_number(str(expected))
            got = parse_number(candidate)
            if got is None:
                numbers = find_numbers(candidate)
                got = numbers[-1] if numbers else None
            correct = want is not None and got is not None and abs(got - want) <= 1e-6
        else:
            got_text, want_text = " ".join(candidate.split()).casefold(), " ".join(str(expected).split()).casefold()
            correct = want_text in got_text if self.match == "contains" else got_text == want_text
        return (self.reward_correct if correct else 0.0), {
            "correct": correct,
            "answer": candidate,
            "answer_tag": extract_answer(text) is not None,
        }

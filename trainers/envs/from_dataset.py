"""from_dataset: the user's own tasks from a JSONL file.

Each line is a JSON object: {"prompt": str, "answer": any, "id"?: str, "tools"?: ["calculator", "python"]}.
A line's "tools" narrows the environment's configured tools for that task. The eval split is chosen
by a hash of the prompt, so it is stable however the file is reordered or grown.

tasks(split, n, seed): the split's tasks shuffled by `seed`; a train list longer than the split
cycles through it again (reshuffled each pass); an eval list is at most the split's size.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainers.envs.base import (
    Split,
    ToolEnvironment,
    ToolError,
    answer_text,
    check_split,
    pool_tasks,
    split_of,
    task_id,
)
from trainers.envs.mcp import mcp_toolbox
from trainers.envs.tools import run_calculator, run_python_tool, tool_by_name
from trainers.rollout.toolcalls import ToolExample, extract_answer
from trainers.rubrics.criteria import find_numbers, parse_number
from trainers.types import Task, ToolCall

KNOWN_TOOLS = ("calculator", "python")
MAX_REPORTED_ERRORS = 10


class DatasetError(ValueError):
    """The dataset file has lines that are not tasks; the message lists them by line number."""


def load_tasks(path: str | Path, *, extras: bool = False) -> list[Task]:
    """Tasks from a JSONL file (see `tasks_from_rows` for `extras`)."""
    file = Path(path)
    if not str(path).strip():
        raise DatasetError("No dataset path is configured.")
    if not file.is_file():
        raise FileNotFoundError(f"Dataset file not found: {file}")
    rows: list[tuple[int, Any]] = []
    errors: list[str] = []
    with file.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                rows.append((number, json.loads(line)))
            except json.JSONDecodeError as exc:
                errors.append(f"line {number}: not valid JSON ({exc.msg} at column {exc.colno})")
    tasks = tasks_from_rows(rows, errors, where="line", extras=extras)
    _raise_errors(str(file), errors, tasks, "line")
    return tasks


def inline_tasks(rows: list[Any], *, extras: bool = False) -> list[Task]:
    """Tasks written in the config itself (a list of {"prompt", "answer", "id"?, "tools"?})."""
    errors: list[str] = []
    tasks = tasks_from_rows(list(enumerate(rows, start=1)), errors, where="task", extras=extras)
    _raise_errors("tasks", errors, tasks, "task")
    return tasks


def tasks_from_rows(
    rows: list[tuple[int, Any]], errors: list[str], where: str, *, extras: bool = False
) -> list[Task]:
    """Tasks from numbered rows; each bad row adds a message to `errors` (by `where` and number).

    `extras` (the agent kind's tasks): "answer" may be left out and every other key is kept in the
    task's `meta` for the agent to read ("tools" included, unchecked: the agent brings its own tools).
    """
    tasks: list[Task] = []
    seen_ids: set[str] = set()
    for number, row in rows:
        if not isinstance(row, dict):
            errors.append(f"{where} {number}: must be a JSON object")
            continue
        prompt = row.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            errors.append(f'{where} {number}: missing "prompt" (a non-empty string)')
            continue
        if "answer" not in row and not extras:
            errors.append(f'{where} {number}: missing "answer"')
            continue
        tools = None if extras else row.get("tools")
        if tools is not None and (not isinstance(tools, list) or not set(tools) <= set(KNOWN_TOOLS)):
            errors.append(f'{where} {number}: "tools" must be a list drawn from {", ".join(KNOWN_TOOLS)}')
            continue
        identifier = str(row["id"]) if "id" in row else task_id("dataset", prompt)
        if identifier in seen_ids:
            errors.append(f"{where} {number}: duplicate id {identifier!r}")
            continue
        seen_ids.add(identifier)
        meta: dict[str, Any] = {where: number}
        if tools is not None:
            meta["tools"] = tools
        if extras:
            meta.update({k: v for k, v in row.items() if k not in ("id", "prompt", "answer")})
        tasks.append(Task(id=identifier, prompt=prompt, answer=row.get("answer"), meta=meta))
    return tasks


def _raise_errors(source: str, errors: list[str], tasks: list[Task], where: str) -> None:
    if errors:
        shown = "; ".join(errors[:MAX_REPORTED_ERRORS])
        more = f" (and {len(errors) - MAX_REPORTED_ERRORS} more)" if len(errors) > MAX_REPORTED_ERRORS else ""
        raise DatasetError(f"{source}: {len(errors)} bad {where}(s): {shown}{more}")
    if not tasks:
        raise DatasetError(f"{source}: no tasks (the {'file' if where == 'line' else 'list'} is empty).")


def split_tasks(
    all_tasks: list[Task], split: Split, n: int, seed: int, *, eval_fraction: float, kind: str, source: str
) -> list[Task]:
    """`n` tasks of one split of a fixed task list (the split chosen by a hash of each prompt),
    shuffled by `seed`; a train list longer than the split cycles through it again (reshuffled each
    pass); an eval list is at most the split's size. `source` names the list in errors."""
    check_split(split)
    pool = [t for t in all_tasks if split_of(t.prompt, eval_fraction) == split]
    if not pool:
        raise DatasetError(
            f"{source}: the {split} split is empty ({len(all_tasks)} tasks, eval fraction {eval_fraction})."
        )
    return pool_tasks(pool, kind=kind, split=split, n=n, seed=seed)


EXAMPLES = {
    "calculator": ToolExample(
        "What is 12 + 7?", ToolCall("calculator", {"expression": "12 + 7"}), "19", "19"
    ),
    "python": ToolExample("What is 2**10?", ToolCall("python", {"code": "print(2**10)"}), "1024", "1024"),
}


class DatasetEnv(ToolEnvironment):
    kind = "from_dataset"

    def __init__(
        self,
        path: str = "",
        tools: list[str] | None = None,
        match: str = "exact",
        system_prompt: str = "",
        max_turns: int = 4,
        few_shot: bool = True,
        max_tool_calls: int = 3,
        reward_correct: float = 1.0,
        eval_fraction: float = 0.1,
        mcp_servers: list[dict[str, Any]] | None = None,
        tasks: list[dict[str, Any]] | None = None,
    ) -> None:
        # The tasks first: a broken dataset fails the build before any MCP server is started.
        all_tasks = (
            inline_tasks(tasks) if tasks else load_tasks(path)
        )  # fail at build time with a clear message
        super().__init__(
            max_turns=max_turns,
            max_tool_calls=max_tool_calls,
            few_shot=few_shot,
            toolbox=mcp_toolbox(mcp_servers),
        )
        if match not in ("exact", "numeric", "contains"):
            raise ValueError("match must be exact, numeric or contains")
        self.path, self.match, self.extra_prompt = path, match, system_prompt
        self.configured_tools = list(tools or [])
        self.reward_correct, self.eval_fraction = reward_correct, eval_fraction
        self.all_tasks = all_tasks
        self.tools = [tool_by_name(name) for name in self.configured_tools]

    def tasks(self, split: Split, n: int, seed: int) -> list[Task]:
        return split_tasks(
            self.all_tasks,
            split,
            n,
            seed,
            eval_fraction=self.eval_fraction,
            kind=self.kind,
            source=self.path or "tasks",
        )

    def reset(self, task: Task, seed: int) -> str:
        names = (
            [t for t in self.configured_tools if t in task.meta["tools"]]
            if "tools" in task.meta
            else self.configured_tools
        )
        self.tools = [tool_by_name(name) for name in names]
        return super().reset(task, seed)

    @property
    def example(self) -> ToolExample | None:  # type: ignore[override]
        """A worked example for the first tool this task offers (None without tools)."""
        # MCP tools have no worked example: the environment cannot know what they are for.
        return next((EXAMPLES[t.name] for t in self.tools if t.name in EXAMPLES), None)

    def example_messages(self) -> list[dict[str, str]]:
        if not self.few_shot:
            return []
        if self.tools:
            return super().example_messages()
        return [
            {"role": "user", "content": "What is 2 + 3?"},
            {"role": "assistant", "content": "<answer>5</answer>"},
        ]

    def system_prompt(self) -> str:
        parts = [self.extra_prompt.strip()] if self.extra_prompt.strip() else []
        if self.tools:
            parts.append(self.tools_prompt())
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
            want = (
                expected
                if isinstance(expected, (int, float)) and not isinstance(expected, bool)
                else parse_number(str(expected))
            )
            got = parse_number(candidate)
            if got is None:
                numbers = find_numbers(candidate)
                got = numbers[-1] if numbers else None
            correct = want is not None and got is not None and abs(got - want) <= 1e-6
        else:
            got_text, want_text = (
                " ".join(candidate.split()).casefold(),
                " ".join(str(expected).split()).casefold(),
            )
            correct = want_text in got_text if self.match == "contains" else got_text == want_text
        return (self.reward_correct if correct else 0.0), {
            "correct": correct,
            "answer": candidate,
            "answer_tag": extract_answer(text) is not None,
        }


class McpToolsEnv(DatasetEnv):
    """mcp_tools: a few tasks written in the config, tools from MCP servers, the answer checked by
    `match` (and by the rubric): try an MCP server with no code."""

    kind = "mcp_tools"

    def __init__(
        self,
        tasks: list[dict[str, Any]] | None = None,
        mcp_servers: list[dict[str, Any]] | None = None,
        path: str = "",
        match: str = "exact",
        system_prompt: str = "",
        max_turns: int = 4,
        max_tool_calls: int = 4,
        reward_correct: float = 1.0,
        eval_fraction: float = 0.1,
    ) -> None:
        if not mcp_servers:
            raise ValueError("mcp_tools needs at least one MCP server")
        # No worked example: the environment cannot know what the servers' tools are for.
        super().__init__(
            path=path,
            tasks=tasks,
            match=match,
            system_prompt=system_prompt,
            max_turns=max_turns,
            few_shot=False,
            max_tool_calls=max_tool_calls,
            reward_correct=reward_correct,
            eval_fraction=eval_fraction,
            mcp_servers=mcp_servers,
        )

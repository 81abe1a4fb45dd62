"""verifiers: an installed verifiers environment package (`load_environment(**kwargs)`) as an environment.

verifiers (PyPI `verifiers`, classic API: `vf.Environment`, `vf.MultiTurnEnv`, `vf.ToolEnv`,
`vf.Rubric`) drives its own rollouts against an OpenAI-style client. Here our policy generates, so
the protocol is driven turn by turn from the outside, with the environment's own hooks:

- tasks: the rows of its `dataset` (train) and `eval_dataset` (eval); without an eval dataset, the
  dataset is split by a hash of each prompt. The row travels in `task.meta["row"]`.
- reset: `init_state(row)` and `setup_state(state)`; the row's prompt gives the system prompt, the
  few-shot messages (`example_messages()`) and the first user message.
- a tool environment (`tool_defs`): its tools are offered as `ToolSpec`s through `ToolEnvironment`,
  so the run's tool-call format applies; a parsed call becomes an assistant message with
  `tool_calls`, and the environment's `env_response` (its `call_tool`, `update_tool_args` …) answers
  it; a message without a call ends the episode, as in verifiers; a malformed call gets an `Error:`
  observation and the episode goes on (as in every tool environment here);
- any other multi-turn environment: every assistant message goes to `env_response`, whose messages
  are the next observation;
- the environment's stop conditions (`is_completed`: max turns, its own `@vf.stop` methods, a final
  env response) end the episode.
At the end, each individual reward function of its rubric runs on the final state; the step's reward
is Σ weight × value, and `info["verifiers"]` keeps every function's raw value and weight, which the
`verifiers_rubric` criterion reads (one criterion per function: raw and weighted, like ours). Group
reward functions (that need the whole group) are not run; `info["verifiers"]["skipped"]` names them.

verifiers is asynchronous; its coroutines run on one background event loop per process, each with
the step timeout. An environment is loaded once per process and configuration (loading registers
atexit hooks; the SIGINT/SIGTERM handlers it installs are put back as they were).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import threading
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any

from trainers.envs.base import Split, StepResult, ToolEnvironment, check_split, pool_tasks, split_of, task_id
from trainers.rollout.toolcalls import format_tool_call, format_tools_prompt
from trainers.types import Task, ToolCall, ToolSpec

log = logging.getLogger(__name__)

_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()
_LOADED: dict[tuple[str, str], Any] = {}
_LOAD_LOCK = threading.Lock()


def run_async(coroutine: Coroutine[Any, Any, Any], timeout_s: float) -> Any:
    """Run a coroutine on the process's background event loop and wait at most `timeout_s`."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = asyncio.new_event_loop()
            threading.Thread(target=_LOOP.run_forever, name="verifiers-loop", daemon=True).start()
    future = asyncio.run_coroutine_threadsafe(coroutine, _LOOP)
    try:
        return future.result(timeout=timeout_s)
    except TimeoutError as exc:
        future.cancel()
        raise TimeoutError(f"The verifiers environment did not answer within {timeout_s:g} s.") from exc


@contextlib.contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """verifiers installs SIGINT/SIGTERM handlers when an environment is built: keep ours (or the worker's)."""
    names = (signal.SIGINT, signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread():
        # signal.signal() raises off the main thread; the environment's handlers are optional, so skip them.
        original = signal.signal
        signal.signal = lambda *args, **kwargs: None
        try:
            yield
        finally:
            signal.signal = original
        return
    saved = {name: signal.getsignal(name) for name in names}
    try:
        yield
    finally:
        for name, handler in saved.items():
            signal.signal(name, handler)


def unsupported_verifiers(version: str) -> str:
    """Why an installed verifiers without the classic API cannot load in this process (0.4's `verifiers.v1`)."""
    return (
        f"verifiers {version} is installed here: its 0.4 stack (verifiers.v1: Taskset, Harness, Toolset) runs "
        "from a venv of its own — give the environment's `python` (make venv-vf04 builds .venv-vf04); this "
        "process drives the classic API of verifiers 0.1.9-0.3.x (the envs extra pins it)."
    )


def load_verifiers_environment(environment: str, env_args: dict[str, Any]) -> Any:
    """The process's instance of an installed environment (loaded on first use)."""
    key = (environment, json.dumps(env_args, sort_keys=True, default=str))
    with _LOAD_LOCK:
        if key not in _LOADED:
            import verifiers as vf

            if not hasattr(vf, "load_environment"):
                raise ValueError(unsupported_verifiers(getattr(vf, "__version__", "?")))
            try:
                with _signal_handlers_kept():
                    _LOADED[key] = vf.load_environment(environment, **env_args)
            except (ImportError, AttributeError, TypeError, ValueError) as exc:
                raise ValueError(f"Could not load the verifiers environment {environment!r}: {exc}") from exc
        return _LOADED[key]


def _policy_client() -> Any:
    """A stand-in for verifiers' model client: our trainer's policy writes the assistant messages."""
    import verifiers as vf

    class TrainerPolicyClient(vf.Client):
        def _refuse(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(
                "Rollout Studio's policy generates the assistant turns; the client is not called."
            )

        setup_client = to_native_tool = to_native_prompt = get_native_response = _refuse
        raise_from_native_response = from_native_response = _refuse

        async def close(self) -> None:
            return None

    return TrainerPolicyClient(object())


def message_text(message: Any) -> str:
    """The text of a verifiers message (content parts joined)."""
    content = message.get("content") if isinstance(message, dict) else getattr(message, "content", None)
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(
        str(part.get("text", "") if isinstance(part, dict) else getattr(part, "text", "")) for part in content
    )


def _role(message: Any) -> str:
    return str(message.get("role") if isinstance(message, dict) else message.role)


class VerifiersEnvironment(ToolEnvironment):
    kind = "verifiers"

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """A config that names a verifiers 0.4 venv (`python`, or $ROLLOUT_STUDIO_VF04_PYTHON with
        `api: v1`) is a verifiers 0.4 environment, served from that venv (trainers.envs.verifiers_v1)."""
        from trainers.envs.verifiers_v1 import VerifiersV1Environment, v1_python

        api = kwargs.pop("api", "classic")
        if cls is VerifiersEnvironment and (kwargs.get("python") or (api == "v1" and v1_python())):
            return VerifiersV1Environment(*args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        environment: str,
        env_args: dict[str, Any] | None = None,
        max_turns: int = 0,
        max_tool_calls: int = 8,
        eval_fraction: float = 0.1,
        step_timeout_s: float = 60.0,
        api: str = "classic",
        python: str = "",
        harness: str = "null",
        harness_args: dict[str, Any] | None = None,
        max_tasks: int = 1000,
    ) -> None:
        if api != "classic":
            raise ValueError(
                "api: v1 needs the Python of a venv with verifiers 0.4 (python, or $ROLLOUT_STUDIO_VF04_PYTHON)"
            )
        self.vf_env = load_verifiers_environment(environment, dict(env_args or {}))
        own_turns = int(getattr(self.vf_env, "max_turns", 0) or 0)
        import verifiers as vf

        single_turn = isinstance(self.vf_env, vf.SingleTurnEnv)
        limit = max_turns or (1 if single_turn else own_turns if own_turns > 0 else 8)
        super().__init__(max_turns=limit, max_tool_calls=max_tool_calls, few_shot=True)
        self.environment, self.eval_fraction, self.step_timeout_s = environment, eval_fraction, step_timeout_s
        self.tool_protocol = bool(self.vf_env.tool_defs)
        self.tools = self._tool_specs(self.vf_env.tool_defs or [])
        self.vf_state: Any = None
        self.messages: list[Any] = []
        self._system = ""
        self._examples: list[Any] = []
        self._current_text = ""
        self._recorded = False
        self._tool_ran = False
        self.scores: dict[str, Any] | None = None

    @staticmethod
    def _tool_specs(tool_defs: list[Any]) -> list[ToolSpec]:
        specs = []
        for tool in tool_defs:
            data = tool if isinstance(tool, dict) else tool.model_dump()
            parameters = {k: v for k, v in dict(data.get("parameters") or {}).items() if k != "title"}
            specs.append(
                ToolSpec(
                    data["name"],
                    data.get("description") or "",
                    parameters or {"type": "object", "properties": {}},
                )
            )
        return specs

    def _run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return run_async(coroutine, self.step_timeout_s)

    # -- tasks

    def _rows(self, split: Split) -> list[dict[str, Any]]:
        has_eval = self.vf_env.eval_dataset is not None or self.vf_env.eval_dataset_source is not None
        if has_eval:
            dataset = self.vf_env.get_dataset() if split == "train" else self.vf_env.get_eval_dataset()
            return [dict(row) for row in dataset]
        rows = [dict(row) for row in self.vf_env.get_dataset()]
        return [
            row
            for row in rows
            if split_of(json.dumps(row.get("prompt"), default=str), self.eval_fraction) == split
        ]

    def tasks(self, split: Split, n: int, seed: int) -> list[Task]:
        check_split(split)
        pool = []
        for row in self._rows(split):
            row = json.loads(json.dumps(row, default=str))
            prompt = row.get("prompt") or [{"role": "user", "content": row.get("question", "")}]
            users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
            text = message_text(users[-1]) if users else json.dumps(prompt)
            key = f"{self.environment}:{split}:{row.get('example_id')}:{text}"
            pool.append(
                Task(
                    id=task_id(self.kind, key),
                    prompt=text,
                    answer=row.get("answer"),
                    meta={"environment": self.environment, "example_id": row.get("example_id"), "row": row},
                )
            )
        if not pool:
            raise ValueError(f"verifiers environment {self.environment!r} has no {split} tasks.")
        return pool_tasks(pool, kind=self.kind, split=split, n=n, seed=seed)

    # -- the episode

    def reset(self, task: Task, seed: int) -> str:
        super().reset(task, seed)
        self.scores = None
        row = task.meta.get("row") or {
            "prompt": [{"role": "user", "content": task.prompt}],
            "answer": task.answer,
        }
        state = self._run(self.vf_env.init_state(row, _policy_client(), "policy", None))
        state = self._run(self.vf_env.setup_state(state)) or state
        self.vf_state = state
        self.messages = list(state["prompt"])
        if self.tool_protocol:
            self.tools = self._tool_specs(state.get("tool_defs") or self.vf_env.tool_defs or [])
        system = [m for m in self.messages if _role(m) == "system"]
        rest = [m for m in self.messages if _role(m) != "system"]
        self._system = "\n\n".join(message_text(m) for m in system)
        last_user = max((i for i, m in enumerate(rest) if _role(m) == "user"), default=None)
        if last_user is None:
            raise ValueError(f"task {task.id} has no user message in its prompt")
        self._examples = [self._as_chat(m) for m in rest[:last_user]]
        return message_text(rest[last_user])

    @staticmethod
    def _as_chat(message: Any) -> dict[str, str]:
        calls = getattr(message, "tool_calls", None) or []
        text = message_text(message)
        for call in calls:
            arguments = json.loads(call.arguments) if isinstance(call.arguments, str) else call.arguments
            text += format_tool_call(ToolCall(call.name, arguments))
        return {"role": _role(message), "content": text}

    def system_prompt(self) -> str:
        parts = [self._system] if self._system else []
        if self.tool_protocol and self.tools:
            parts.append(format_tools_prompt(self.tools))
        return "\n\n".join(parts)

    def example_messages(self) -> list[dict[str, str]]:
        return list(self._examples)

    def _record(self, assistant: Any, responses: list[Any]) -> None:
        """Add the assistant message (and what answered it) to verifiers' state, as its own loop would."""
        from verifiers.types import TrajectoryStep

        prompt = list(self.messages)
        self.messages = [*prompt, assistant, *responses]
        self.vf_state["trajectory"].append(
            TrajectoryStep(
                prompt=prompt,
                completion=[assistant],
                response=None,
                tokens=None,
                reward=None,
                advantage=None,
                is_truncated=False,
                trajectory_id=self.vf_state["trajectory_id"],
                extras={},
            )
        )
        self._recorded = True

    def run_tool(self, call: ToolCall) -> str:
        from verifiers.types import AssistantMessage
        from verifiers.types import ToolCall as VfToolCall

        assistant = AssistantMessage(
            content=self._current_text,
            tool_calls=[
                VfToolCall(
                    id=f"call_{uuid.uuid4().hex[:12]}", name=call.name, arguments=json.dumps(call.arguments)
                )
            ],
        )
        responses = self._run(self.vf_env.env_response([*self.messages, assistant], self.vf_state))
        self._record(assistant, list(responses or []))
        self._tool_ran = True
        return "\n".join(message_text(m) for m in responses or []) or "(no output)"

    def grade(self, text: str) -> tuple[float, dict[str, Any]]:
        return 0.0, {}  # the rubric scores the whole episode in _finish()

    def step(self, assistant_text: str) -> StepResult:
        from verifiers.types import AssistantMessage, UserMessage

        self._current_text, self._recorded, self._tool_ran = assistant_text, False, False
        if self.tool_protocol:
            result = super().step(assistant_text)
            if not self._recorded:  # a final answer, or a call that never reached the tools
                responses = [UserMessage(content=result.observation)] if result.observation else []
                self._record(AssistantMessage(content=assistant_text), responses)
        else:
            if self.task is None or self.done:
                raise RuntimeError("The episode is over (or never started): call reset() first.")
            self.turn += 1
            result = StepResult(None, 0.0, False, {})
            self._record(AssistantMessage(content=assistant_text), [])
            if not self._run(self.vf_env.is_completed(self.vf_state)):
                prompt = self._run(self.vf_env.get_prompt_messages(self.vf_state))
                responses = list(prompt)[len(self.messages) :]
                self.messages = list(prompt)
                result.observation = "\n".join(message_text(m) for m in responses)
                if self.turn >= self.max_turns:
                    result.done, result.info["truncated"] = True, True
        # A malformed or refused call never reached verifiers' tools: like every tool environment here it
        # gets an Error: observation and the episode goes on (verifiers' no_tools_called would end it).
        never_reached = self.tool_protocol and result.info.get("tool_error") and not self._tool_ran
        if not result.done and not never_reached and self._run(self.vf_env.is_completed(self.vf_state)):
            result.done = True
        if not result.done and self.turn >= self.max_turns:
            result.done, result.info["truncated"] = True, True
        if result.done:
            self.done = True
            reward, scores = self._finish()
            result.reward += reward
            result.info.update(scores)
        return result

    def _finish(self) -> tuple[float, dict[str, Any]]:
        """Run the rubric's individual reward functions on the final state."""
        import verifiers as vf

        state = self.vf_state
        state["completion"] = self.messages[len(state["prompt"]) :]
        state["is_completed"] = True
        rubric = self.vf_env.rubric
        rubrics = list(getattr(rubric, "rubrics", None) or [rubric])
        values: dict[str, float] = {}
        weights: dict[str, float] = {}
        skipped: list[str] = []
        for part in rubrics:
            for func, weight in zip(part.funcs, part.weights, strict=True):
                name = getattr(func, "__name__", repr(func))
                if part._is_group_func(func):
                    skipped.append(name)
                    continue
                values[name] = float(self._run(part._call_individual_reward_func(func, state)))
                weights[name] = float(weight)
        total = sum(values[name] * weights[name] for name in values)
        try:
            self._run(self.vf_env.cleanup(state))
        except (vf.Error, RuntimeError, TimeoutError) as exc:  # cleanup must not lose the scored episode
            log.warning("verifiers cleanup failed: %r", exc)
        answer = (
            self.vf_env.parser.parse_answer(state["completion"]) if hasattr(self.vf_env, "parser") else None
        )
        self.last_answer = answer
        self.scores = {
            "environment": self.environment,
            "rewards": values,
            "weights": weights,
            "skipped": skipped,
            "reward": total,
            "stop_condition": state.get("stop_condition"),
        }
        info: dict[str, Any] = {"verifiers": self.scores, "answer": answer}
        if self.task is not None and self.task.answer is not None and answer is not None:
            info["correct"] = str(answer).strip() == str(self.task.answer).strip()
        return total, info

    def preview_extra(self) -> dict[str, Any]:
        """For the form: the environment's rubric as ready-made `verifiers_rubric` criteria."""
        return {"rubric_criteria": verifiers_rubric_criteria(self.environment, self.vf_env.env_args or {})}

    def state(self) -> dict[str, Any]:
        plain = {}
        if self.vf_state is not None:
            for key, value in self.vf_state.items():
                if key in (
                    "prompt",
                    "completion",
                    "trajectory",
                    "client",
                    "timing",
                    "input",
                    "task",
                    "tool_defs",
                ):
                    continue
                with contextlib.suppress(TypeError, ValueError):
                    plain[key] = json.loads(json.dumps(value))
        return {**super().state(), "verifiers_state": plain}


def verifiers_rubric_criteria(
    environment: str, env_args: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The environment's rubric as our rubric criteria: one `verifiers_rubric` criterion per reward
    function, with verifiers' weight (zero-weight metrics included, so they are charted too)."""
    vf_env = load_verifiers_environment(environment, dict(env_args or {}))
    rubric = vf_env.rubric
    criteria = []
    for part in list(getattr(rubric, "rubrics", None) or [rubric]):
        for func, weight in zip(part.funcs, part.weights, strict=True):
            if part._is_group_func(func):
                continue
            name = getattr(func, "__name__", repr(func))
            criteria.append(
                {
                    "name": name,
                    "kind": "verifiers_rubric",
                    "weight": float(weight),
                    "params": {"function": name},
                }
            )
    return criteria

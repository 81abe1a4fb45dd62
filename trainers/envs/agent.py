"""agent: train the user's own agent, unchanged, through the OpenAI-compatible gateway.

The environment does not write prompts or read answers: the agent does. For each episode the kind
opens a gateway session for the task and runs the agent's entry point with an OpenAI client pointed
at that session; every model call the agent makes is sampled from the run's current policy and
recorded as exact tokens (`trainers.gateway`), so the session becomes a `Rollout` laid out like any
environment's episode (tool results masked from the loss), scored by the rubric, grouped per task for
GRPO.

Entry points:
- a Python callable `module:function` with signature `run(task: dict, client: openai.OpenAI)`; it may
  return the episode's reward (a number, or a dict with "reward" and more info such as "correct").
  `isolation: thread` (default) calls it in the trainer's process; `process` runs it in a child
  Python (`python -m trainers.gateway.runner`) that can be killed when it hangs;
- a command (a list, no shell) with `{base_url}`, `{task_json}`, `{session_id}`, `{gateway_url}`
  substituted, and `OPENAI_BASE_URL` / `OPENAI_API_KEY` / `ROLLOUT_STUDIO_*` in its environment; it
  reports a reward with `POST {gateway_url}/v1/sessions/{session_id}/reward`.

Every episode has a time-out. An agent that raises, exits non-zero or times out leaves an `error`
trajectory with the reason (in `env_state.error` and `info.error`), and the run goes on; a hung child
process is killed; a hung thread is abandoned (its session is closed, so its calls fail).

All episodes of a step run at once (or `max_parallel` at a time) and their calls are batched.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trainers.envs.base import Environment, Split, StepResult
from trainers.envs.from_dataset import inline_tasks, load_tasks, split_tasks
from trainers.types import Task

log = logging.getLogger(__name__)

STDERR_TAIL_CHARS = 2000
KILL_GRACE_S = 2.0
PLACEHOLDERS = ("{base_url}", "{task_json}", "{session_id}", "{gateway_url}")
AgentFn = Callable[[dict[str, Any], Any], Any]


def task_payload(task: Task) -> dict[str, Any]:
    """The task as the agent gets it: id, prompt, answer and the row's own extra fields."""
    return {
        "id": task.id,
        "prompt": task.prompt,
        "answer": task.answer,
        **dict(task.meta.get("fields") or {}),
    }


def resolve_entry_point(entry_point: str) -> AgentFn:
    module_name, _, attr = entry_point.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"agent entry point {entry_point!r} cannot be loaded: {exc}") from exc
    if not callable(target):
        raise ValueError(f"agent entry point {entry_point!r} is not callable")
    return target


class AgentEnv(Environment):
    kind = "agent"
    tools: list = []  # the agent brings its own
    stop = None  # calls that offer tools stop where the run's tool format says

    def __init__(
        self,
        entry_point: str = "",
        command: list[str] | None = None,
        isolation: str = "thread",
        tasks: list[dict[str, Any]] | None = None,
        path: str = "",
        timeout_s: float = 300.0,
        max_turns: int = 8,
        max_parallel: int = 0,
        gateway_port: int = 0,
        batch_window_ms: float = 20.0,
        model_name: str = "policy",
        cwd: str = "",
        env: dict[str, str] | None = None,
        eval_fraction: float = 0.1,
        agent: AgentFn | None = None,
    ) -> None:
        errors = self.check_config(
            {
                "entry_point": entry_point if agent is None else "python:callable",
                "command": command or [],
                "tasks": tasks or [],
                "path": path,
                "isolation": isolation,
            }
        )
        if errors:
            raise ValueError("; ".join(f"{k}: {', '.join(v)}" for k, v in errors.items()))
        self.all_tasks = inline_tasks(tasks, extras=True) if tasks else load_tasks(path, extras=True)
        for task in self.all_tasks:  # the row's extra fields, kept apart from our own meta
            task.meta["fields"] = {k: v for k, v in task.meta.items() if k not in ("task", "line", "fields")}
        self.path, self.eval_fraction = path, eval_fraction
        self.entry_point, self.command, self.isolation = entry_point, list(command or []), isolation
        self.timeout_s, self.max_turns, self.max_parallel = float(timeout_s), max_turns, max_parallel
        self.gateway_port, self.model_name = gateway_port, model_name
        self.batch_window_s = batch_window_ms / 1000
        self.cwd, self.extra_env = cwd or None, dict(env or {})
        self.agent = agent
        if not command and importlib.util.find_spec("openai") is None:
            raise ValueError(
                "the agent kind hands agents an OpenAI client: install the openai package "
                "(pip install 'rollout-studio[agents]')"
            )
        if self.agent is None and entry_point and isolation == "thread":
            self.agent = resolve_entry_point(entry_point)  # fail the run's setup, not every episode
        elif entry_point and not _module_exists(entry_point.partition(":")[0]):
            raise ValueError(
                f"agent entry point {entry_point!r}: no module {entry_point.partition(':')[0]!r}"
            )

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> dict[str, list[str]]:
        errors: dict[str, list[str]] = {}
        has_entry, has_command = bool(config.get("entry_point")), bool(config.get("command"))
        if has_entry == has_command:
            errors["entry_point"] = [
                "Set either an entry point (module:function) or a command, not both."
                if has_entry
                else "Set an entry point (module:function) or a command."
            ]
        elif has_entry and ":" not in config["entry_point"]:
            errors["entry_point"] = ["Write the entry point as module:function."]
        if not config.get("tasks") and not str(config.get("path") or "").strip():
            errors["tasks"] = ["Write some tasks here or give the path of a JSONL file."]
        return errors

    # -- the Environment protocol -----------------------------------------------------------------

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

    # -- the dashboard's Preview: a task and what will run it (the agent itself needs the run's model) --

    def preview_can_reset(self) -> bool:
        return False

    def preview_health(self) -> str:
        runner = f"command {' '.join(self.command)!r}" if self.command else f"{self.entry_point} (found)"
        return (
            f"Each rollout runs {runner} with an OpenAI client pointed at the run's gateway; the agent "
            "writes its own prompts and tool calls, so they show in the trajectories, not here."
        )

    def system_prompt(self) -> str:
        raise TypeError("the agent kind writes no prompts: its agent calls the model through the gateway")

    def reset(self, task: Task, seed: int) -> str:
        raise TypeError(
            "the agent kind is driven by drive_rollouts (its agent calls the model), not reset/step"
        )

    def step(self, assistant_text: str) -> StepResult:
        raise TypeError(
            "the agent kind is driven by drive_rollouts (its agent calls the model), not reset/step"
        )

    # -- the episodes -------------------------------------------------------------------------------

    def drive_rollouts(
        self,
        backend: Any,
        chat: Any,
        tasks: Sequence[Task],
        seeds: Sequence[Sequence[int]],
        *,
        max_turns: int,
        max_new_tokens: int,
        max_context_tokens: int,
        temperature: float,
        top_p: float,
        generation_seed: int | None,
        stop: Sequence[str],
        policy_version: int = 0,
        split: str = "train",
        first_group: int = 0,
    ) -> list[list[Any]]:
        """Run the agent once per (task, seed) against a gateway on `backend`; rollouts per group
        (the signature of `trainers.rollout.generate_rollouts`)."""
        from trainers.gateway import Gateway
        from trainers.rollout.episodes import episode_turns

        gateway = Gateway(
            backend,
            chat,
            port=self.gateway_port,
            model_name=self.model_name,
            max_new_tokens=max_new_tokens,
            max_context_tokens=max_context_tokens,
            max_turns=episode_turns(max_turns, self),
            tool_stop=tuple(stop),
            policy_version=policy_version,
            batch_window_s=self.batch_window_s,
            seed=generation_seed,
        )
        episodes = [
            _Episode(first_group + g, s, task, int(seed))
            for g, (task, group_seeds) in enumerate(zip(tasks, seeds, strict=True))
            for s, seed in enumerate(group_seeds)
        ]
        if self.agent is not None:
            import openai  # noqa: F401 — imported once here, not by the first agent threads at once
        with gateway:
            self._run_all(episodes, gateway, temperature=temperature, top_p=top_p)
            rollouts = []
            for episode in episodes:
                assert episode.session is not None
                rollouts.append(
                    episode.session.to_rollout(
                        group=episode.group, sample=episode.sample, seed=episode.seed, split=split
                    )
                )
                gateway.release(episode.session.id)
        grouped: list[list[Any]] = [[] for _ in tasks]
        for rollout in rollouts:
            grouped[rollout.group - first_group].append(rollout)
        return grouped

    def _run_all(self, episodes: list[_Episode], gateway: Any, *, temperature: float, top_p: float) -> None:
        finished: queue.Queue[_Episode] = queue.Queue()
        waiting = deque(episodes)
        running: list[Any] = []
        while waiting or running:
            while waiting and (not self.max_parallel or len(running) < self.max_parallel):
                episode = waiting.popleft()
                # Opened as it starts: the batcher waits only for sessions whose agent is running.
                episode.session = gateway.open_session(
                    episode.task, temperature=temperature, top_p=top_p, metadata={"seed": episode.seed}
                )
                episode.deadline = time.monotonic() + self.timeout_s
                self._start(episode, gateway, finished)
                running.append(episode)
            timeout = max(0.0, min(e.deadline for e in running) - time.monotonic())
            try:
                done = finished.get(timeout=timeout)
                if done in running:
                    running.remove(done)
                    self._settle(done, gateway)
            except queue.Empty:
                now = time.monotonic()
                for episode in [e for e in running if e.deadline <= now]:
                    running.remove(episode)
                    self._time_out(episode, gateway)

    def _start(self, episode: _Episode, gateway: Any, finished: queue.Queue) -> None:
        target = self._run_thread if self.agent is not None else self._run_process
        episode.thread = threading.Thread(
            target=target,
            args=(episode, gateway, finished),
            name=f"agent-{episode.group}-{episode.sample}",
            daemon=True,
        )
        episode.thread.start()

    def _run_thread(self, episode: _Episode, gateway: Any, finished: queue.Queue) -> None:
        import openai

        assert episode.session is not None and self.agent is not None
        client = openai.OpenAI(
            base_url=gateway.session_url(episode.session.id),
            api_key=episode.session.id,
            timeout=self.timeout_s,
            max_retries=0,
        )
        try:
            episode.result = self.agent(task_payload(episode.task), client)
        except BaseException as exc:  # noqa: BLE001 — the user's agent failed: its episode shows why
            from trainers.gateway.sessions import error_text

            episode.error = error_text(exc)
        finally:
            client.close()
            finished.put(episode)

    def _run_process(self, episode: _Episode, gateway: Any, finished: queue.Queue) -> None:
        assert episode.session is not None
        session_id = episode.session.id
        values = {
            "{base_url}": gateway.session_url(session_id),
            "{task_json}": json.dumps(task_payload(episode.task)),
            "{session_id}": session_id,
            "{gateway_url}": gateway.url,
        }
        if self.command:
            args = [_substitute(part, values) for part in self.command]
        else:
            args = [sys.executable, "-m", "trainers.gateway.runner", self.entry_point]
        env = {
            **os.environ,
            **self.extra_env,
            "OPENAI_BASE_URL": values["{base_url}"],
            "OPENAI_API_KEY": session_id,
            "ROLLOUT_STUDIO_GATEWAY_URL": gateway.url,
            "ROLLOUT_STUDIO_SESSION_ID": session_id,
            "ROLLOUT_STUDIO_TASK": values["{task_json}"],
            "ROLLOUT_STUDIO_TIMEOUT_S": str(self.timeout_s),
        }
        if not self.command:  # the child imports the entry point from where the trainer would
            env["PYTHONPATH"] = os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p)
        try:
            episode.process = subprocess.Popen(
                args,
                env=env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )  # its own group: killed whole
            _, stderr = episode.process.communicate()
            if episode.process.returncode != 0 and not episode.timed_out:
                tail = stderr.decode("utf-8", "replace").strip()[-STDERR_TAIL_CHARS:]
                episode.error = f"the agent exited with status {episode.process.returncode}" + (
                    f": {tail}" if tail else ""
                )
        except OSError as exc:
            episode.error = f"the agent command could not start: {exc}"
        finally:
            finished.put(episode)

    def _settle(self, episode: _Episode, gateway: Any) -> None:
        session = episode.session
        assert session is not None
        reward, info, problem = agent_result(episode.result)
        session.set_reward(reward, info)
        episode.error = episode.error or problem
        if not session.calls and not episode.error:
            episode.error = "the agent finished without calling the model"
        if episode.error and session.outcome == "truncated":
            # The gateway refused a call past the episode's limits and the agent gave up: truncated.
            session.set_reward(None, {"agent_error": episode.error})
            session.finish()
        elif episode.error:
            session.finish("error", episode.error)
        else:
            session.finish()
        gateway.batcher.poke()

    def _time_out(self, episode: _Episode, gateway: Any) -> None:
        episode.timed_out = True
        assert episode.session is not None
        episode.session.finish("error", f"the agent did not finish within {self.timeout_s:g} s")
        gateway.batcher.poke()
        process = episode.process
        if process is not None and process.poll() is None:
            _kill_group(process)
        elif episode.thread is not None and episode.thread.is_alive():
            log.warning(
                "agent thread %s is still running after its %g s time-out; it is abandoned (its session "
                "is closed). Use isolation: process to have hung agents killed.",
                episode.thread.name,
                self.timeout_s,
            )


@dataclass(eq=False)
class _Episode:
    group: int
    sample: int
    task: Task
    seed: int
    session: Any = None
    deadline: float = 0.0
    thread: threading.Thread | None = None
    process: subprocess.Popen | None = None
    result: Any = None
    error: str | None = None
    timed_out: bool = False


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a missing parent package
        return False


def agent_result(result: Any) -> tuple[float | None, dict[str, Any], str | None]:
    """What an entry point returned, as (reward, info, problem): a number is the reward; a dict
    gives "reward" and more info (e.g. "correct", which feeds the accuracy metric); None leaves
    the reward to the session API."""
    if result is None:
        return None, {}, None
    if isinstance(result, dict):
        reward = result.get("reward")
        if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
            return None, {}, f"the agent returned a non-numeric reward {reward!r}"
        return (
            (None if reward is None else float(reward)),
            {k: v for k, v in result.items() if k != "reward"},
            None,
        )
    if isinstance(result, (int, float)):
        return float(result), {}, None
    return None, {}, f"the agent returned {type(result).__name__}; return a number, a dict or None"


def _substitute(part: str, values: dict[str, str]) -> str:
    for placeholder, value in values.items():
        part = part.replace(placeholder, value)
    return part


def _kill_group(process: subprocess.Popen) -> None:
    """SIGTERM the agent's process group, then SIGKILL what is left after a grace period."""
    import signal

    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


# ---- any environment as an agent -------------------------------------------------------------------


def environment_agent(
    make_env: Callable[[], Environment], *, tool_format: Any = None, seed: int = 0
) -> AgentFn:
    """An agent that plays an environment's episode through the OpenAI client: the environment's
    system prompt, worked example and task as messages, its tools as `tools=`, each tool result sent
    back as a tool message. With the run's `tool_format`, through the gateway it produces the same
    tokens as `generate_rollouts` on that environment (checked by the tests; `bench/gateway.py`
    times the two)."""

    def run(task: dict[str, Any], client: Any) -> dict[str, Any]:
        from trainers.gateway.protocol import tool_call_json
        from trainers.rollout.episodes import adopt_tool_format

        env = make_env()
        if tool_format is not None:
            adopt_tool_format(env, tool_format)
        user = env.reset(Task(task["id"], task["prompt"], task.get("answer")), seed)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": env.system_prompt()},
            *(_openai_message(m, env.tool_format) for m in env.example_messages()),
            {"role": "user", "content": user},
        ]
        tools = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            }
            for t in env.tools
        ]
        reward, info = 0.0, {}
        for _ in range(64):
            reply = client.chat.completions.create(model="policy", messages=messages, tools=tools or None)
            message = reply.choices[0].message
            calls = message.tool_calls or []
            # What the model wrote, as the environment reads it: the prose and the call in its syntax.
            text = (message.content or "") + "".join(env.tool_format.call_text(_tool_call(c)) for c in calls)
            result = env.step(text)
            reward += float(result.reward)
            info = dict(result.info or {})
            messages.append(
                {
                    "role": "assistant",
                    "content": message.content,
                    **({"tool_calls": [tool_call_json(_tool_call(c)) for c in calls]} if calls else {}),
                }
            )
            if result.done or result.observation is None:
                break
            if calls or info.get("tool_error") or "tool_name" in info:
                # A refused or malformed call is answered as a tool message too, as in an episode.
                call_id = calls[0].id if calls else env.tool_format.call_id(0)
                messages.append({"role": "tool", "tool_call_id": call_id, "content": result.observation})
            else:
                messages.append({"role": "user", "content": result.observation})
        return {"reward": reward, **({"correct": info["correct"]} if "correct" in info else {})}

    return run


def _tool_call(call: Any) -> Any:
    from trainers.types import ToolCall

    return ToolCall(call.function.name, json.loads(call.function.arguments or "{}"), call.id)


def _openai_message(message: dict[str, Any], tool_format: Any) -> dict[str, Any]:
    """An environment's template-form example message in OpenAI's shape (arguments as JSON text)."""
    out = {k: v for k, v in message.items() if k in ("role", "content", "tool_call_id")}
    if out.get("role") == "tool":
        out["content"] = tool_format.tool_message_text(message)
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": c.get("id"),
                "type": "function",
                "function": {
                    "name": c["function"]["name"],
                    "arguments": json.dumps(c["function"]["arguments"]),
                },
            }
            for c in message["tool_calls"]
        ]
    if out.get("role") == "tool" and not out.get("tool_call_id"):
        out["tool_call_id"] = "call00000"
    return out

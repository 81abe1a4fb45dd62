"""verifiers 0.4 (`verifiers.v1`: Taskset, Harness, Toolset, Trace) environments, run from their own venv.

verifiers 0.4 cannot be imported next to the main venv's verifiers 0.3 (it pins mcp 2.0 and openai<3;
0.3's classic packages need the mcp 1.x SDK), so a `verifiers` environment whose config names a
`python` (the interpreter of a venv with verifiers 0.4 and the environment package: `make venv-vf04`
builds `.venv-vf04`; the `ROLLOUT_STUDIO_VF04_PYTHON` variable is the default) runs there: one bridge
process per environment and trainer process (`trainers/envs/verifiers_v1_bridge.py`, JSON lines over
its stdin/stdout) loads it with verifiers' own loader and runs each episode with verifiers' own
`Env.run_episode`.

An episode is an agent episode (this class is an `AgentEnv`): the trainer opens a gateway session
for the task and the bridge runs the environment's harness program (`null`, the tool-less chat loop,
by default; any harness verifiers ships or the package names) with its model endpoint pointed at
that session, through verifiers' interception proxy; every model call is sampled from the policy and
recorded as exact tokens by the gateway. The task's `@vf.reward` methods score the `Trace`: the
episode's reward is Σ weight × score, and `info["verifiers"]` keeps each reward's score and weight
(and the `@vf.metric` values), which the `verifiers_rubric` criterion reads, as for the classic path.
Toolsets (MCP servers) and harnesses that run code reach the policy the same way: tool calls go
through the gateway in the OpenAI format.

Tasks: the taskset's tasks (its `load()`, as `vf-eval` sees them); the split is by a hash of each
task's key (verifiers 0.4 tasksets have no train/eval datasets of their own).
"""

from __future__ import annotations

import atexit
import collections
import json
import logging
import os
import subprocess
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from trainers.envs.agent import AgentEnv
from trainers.envs.base import Split, split_of
from trainers.types import Task

log = logging.getLogger(__name__)

BRIDGE = Path(__file__).with_name("verifiers_v1_bridge.py")
PYTHON_VARIABLE = "ROLLOUT_STUDIO_VF04_PYTHON"
STDERR_TAIL_LINES = 40


def v1_python(configured: str = "") -> str:
    """The verifiers 0.4 venv's interpreter: the config's, else $ROLLOUT_STUDIO_VF04_PYTHON."""
    return configured or os.environ.get(PYTHON_VARIABLE, "")


class BridgeError(RuntimeError):
    """The verifiers 0.4 side did not load or stopped; the message has its own words."""


class Bridge:
    """One verifiers 0.4 environment served by a child process of its own venv's Python."""

    def __init__(self, python: str, config: dict[str, Any], startup_timeout_s: float = 300.0) -> None:
        if not Path(python).is_file():
            raise ValueError(
                f"python: {python!r} is not an interpreter; give the Python of a venv with verifiers 0.4 and "
                "the environment installed (make venv-vf04 builds .venv-vf04)"
            )
        self.config = config
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self.process = subprocess.Popen(
            [python, str(BRIDGE), json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            start_new_session=True,
        )
        self._lock = threading.Lock()
        self._next_id = 0
        self._pending: dict[int, Future] = {}
        self._ready: Future = Future()
        threading.Thread(target=self._read_stderr, name="vf04-stderr", daemon=True).start()
        threading.Thread(target=self._read_stdout, name="vf04-stdout", daemon=True).start()
        try:
            hello = self._ready.result(timeout=startup_timeout_s)
        except FutureTimeout as exc:
            self.close()
            raise BridgeError(
                f"the verifiers 0.4 environment did not load within {startup_timeout_s:g} s{self._tail()}"
            ) from exc
        if not hello.get("ready"):
            self.close()
            raise ValueError(
                f"verifiers environment {config.get('environment')!r}: {hello.get('error') or 'did not load'}"
            )
        self.version: str = hello.get("version", "?")
        self.tasks: list[dict[str, Any]] = hello.get("tasks") or []
        self.rewards: dict[str, float] = hello.get("rewards") or {}
        self.metrics: list[str] = hello.get("metrics") or []

    def _tail(self) -> str:
        text = "\n".join(self.stderr_tail).strip()
        return f": {text[-2000:]}" if text else ""

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr_tail.append(line.rstrip())

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if "ready" in message and not self._ready.done():
                self._ready.set_result(message)
                continue
            with self._lock:
                future = self._pending.pop(message.get("id"), None)
            if future is not None:
                future.set_result(message)
        error = BridgeError(f"the verifiers 0.4 bridge exited ({self.process.poll()}){self._tail()}")
        if not self._ready.done():
            self._ready.set_exception(error)
        with self._lock:
            pending, self._pending = list(self._pending.values()), {}
        for future in pending:
            future.set_exception(error)

    def run(self, idx: int, base_url: str, model: str, timeout_s: float) -> dict[str, Any]:
        """One episode of task `idx` with its model at `base_url`; verifiers' result for it."""
        future: Future = Future()
        with self._lock:
            if self.process.poll() is not None or self.process.stdin is None:
                raise BridgeError(f"the verifiers 0.4 bridge has exited{self._tail()}")
            self._next_id += 1
            request_id = self._next_id
            self._pending[request_id] = future
            line = json.dumps(
                {"id": request_id, "op": "run", "idx": idx, "base_url": base_url, "model": model}
            )
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
        try:
            return future.result(timeout=timeout_s)
        except FutureTimeout as exc:
            with self._lock:
                self._pending.pop(request_id, None)
            raise TimeoutError(f"the verifiers episode did not finish within {timeout_s:g} s") from exc

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                if self.process.stdin is not None:
                    self.process.stdin.close()
                self.process.wait(timeout=15)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait(timeout=5)


_BRIDGES: dict[str, Bridge] = {}
_BRIDGES_LOCK = threading.Lock()


def bridge_for(python: str, config: dict[str, Any]) -> Bridge:
    """The process's bridge for an environment config (started on first use, closed at exit)."""
    key = json.dumps([python, config], sort_keys=True, default=str)
    with _BRIDGES_LOCK:
        bridge = _BRIDGES.get(key)
        if bridge is None or bridge.process.poll() is not None:
            bridge = _BRIDGES[key] = Bridge(python, config)
        return bridge


@atexit.register
def _close_bridges() -> None:
    for bridge in list(_BRIDGES.values()):
        bridge.close()


class VerifiersV1Environment(AgentEnv):
    """A verifiers 0.4 environment: its tasks, its harness's episodes through the gateway, its rewards."""

    kind = "verifiers"

    def __init__(
        self,
        environment: str,
        env_args: dict[str, Any] | None = None,
        python: str = "",
        harness: str = "null",
        harness_args: dict[str, Any] | None = None,
        max_turns: int = 0,
        max_parallel: int = 0,
        eval_fraction: float = 0.1,
        step_timeout_s: float = 300.0,
        max_tasks: int = 1000,
        **_classic: Any,  # the classic path's knobs (max_tool_calls): the harness decides there
    ) -> None:
        interpreter = v1_python(python)
        if not interpreter:
            raise ValueError(
                f"python: give the interpreter of a venv with verifiers 0.4 (or set ${PYTHON_VARIABLE})"
            )
        self.environment = environment
        self.bridge = bridge_for(
            interpreter,
            {
                "environment": environment,
                "env_args": dict(env_args or {}),
                "harness": harness or "null",
                "harness_args": dict(harness_args or {}),
                "max_tasks": int(max_tasks),
            },
        )
        rows = [
            {
                "prompt": row.get("prompt") or row.get("name") or row.get("id") or f"task {row['idx']}",
                "id": f"{environment}:{row['key'][:16]}",
                "vf_idx": row["idx"],
                "vf_key": row["key"],
                "vf_id": row.get("id"),
            }
            for row in self.bridge.tasks
        ]
        if not rows:
            raise ValueError(f"verifiers environment {environment!r} has no tasks")
        super().__init__(
            tasks=rows,
            agent=self._play,
            timeout_s=step_timeout_s,
            max_turns=max_turns or 8,
            max_parallel=max_parallel,
            eval_fraction=eval_fraction,
        )

    def tasks(self, split: Split, n: int, seed: int) -> list[Task]:
        # verifiers 0.4 tasksets have no splits of their own: a hash of each task's key decides.
        from trainers.envs.base import check_split, pool_tasks

        check_split(split)
        pool = [
            t
            for t in self.all_tasks
            if split_of(str(t.meta["fields"]["vf_key"]), self.eval_fraction) == split
        ]
        if not pool:
            raise ValueError(f"verifiers environment {self.environment!r} has no {split} tasks")
        return pool_tasks(pool, kind=self.kind, split=split, n=n, seed=seed)

    def _play(self, task: dict[str, Any], client: Any) -> dict[str, Any]:
        """The agent entry point: the bridge runs the episode against this session's gateway URL."""
        result = self.bridge.run(int(task["vf_idx"]), str(client.base_url), self.model_name, self.timeout_s)
        rewards = {
            name: float(value["score"]) for name, value in (result.get("rewards") or {}).items() if value
        }
        weights = {
            name: float(value["weight"]) for name, value in (result.get("rewards") or {}).items() if value
        }
        if not result.get("ok") and not rewards:
            raise RuntimeError("; ".join(result.get("errors") or ["the verifiers episode failed"]))
        total = sum(rewards[name] * weights[name] for name in rewards)
        scores = {
            "environment": self.environment,
            "api": "v1",
            "rewards": rewards,
            "weights": weights,
            "metrics": result.get("metrics") or {},
            "skipped": [],
            "reward": total,
            "stop_condition": result.get("stop_condition"),
            "errors": result.get("errors") or [],
        }
        return {"reward": total, "verifiers": scores}

    def preview_health(self) -> str:
        return (
            f"verifiers {self.bridge.version} environment {self.environment!r} ({len(self.bridge.tasks)} tasks), "
            "served from its own venv; each rollout runs its harness with the run's policy behind the gateway."
        )

    def preview_extra(self) -> dict[str, Any]:
        """For the form: the task's `@vf.reward` methods as ready-made `verifiers_rubric` criteria."""
        return {"rubric_criteria": v1_rubric_criteria(self.bridge.rewards)}


def v1_rubric_criteria(rewards: dict[str, float]) -> list[dict[str, Any]]:
    return [
        {"name": name, "kind": "verifiers_rubric", "weight": float(weight), "params": {"function": name}}
        for name, weight in rewards.items()
    ]

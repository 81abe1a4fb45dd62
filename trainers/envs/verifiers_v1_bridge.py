"""The verifiers 0.4 side of the `verifiers` kind's v1 path: a script run by the 0.4 venv's Python.

verifiers 0.4 (its stack lives in `verifiers.v1`) cannot share a venv with the main one (it pins
`mcp==2.0.0`, `openai<3`, and 0.3's classic packages need the 1.x SDK), so the trainer starts this
file with the interpreter of a venv that has verifiers 0.4 and the environment package installed
(`make venv-vf04`: `.venv-vf04`). It imports nothing of Rollout Studio: only the standard library and
verifiers.

    <python> verifiers_v1_bridge.py '<config JSON>'

config: {"environment": taskset id (as `vf-eval` takes it), "env_args": taskset config fields,
"harness": harness id ("null": the tool-less chat loop), "harness_args": more harness config,
"runtime": runtime config ({"type": "subprocess"} by default), "max_tasks": how many tasks of an endless
taskset (INFINITE) are used (1000)}. Every agent role the environment declares gets the harness and runtime.

The protocol is JSON lines: stdout carries only protocol lines (anything verifiers or its programs
print goes to stderr).
- first line out: {"ready": true, "version", "tasks": [{"idx", "id", "name", "key", "prompt",
  "system_prompt", "data"}], "rewards": {name: weight}, "metrics": [name]} — or {"ready": false,
  "error": "..."} and exit 1;
- in: {"id": n, "op": "run", "idx": task idx, "base_url": the model endpoint, "model": model name}
  → out: {"id": n, "ok", "rewards": {name: {"score", "weight"}}, "metrics": {name: value},
  "errors": ["Type: message"], "stop_condition", "turns", "is_timeout"};
- stdin closed: the environment's serving resources are torn down and the script exits.
Runs execute concurrently (one asyncio task each), each one verifiers' own `Env.run_episode`: its
harness program talks to `base_url` through verifiers' interception proxy, its task's `@vf.reward`
and `@vf.metric` methods score the trace.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from typing import Any


def _protocol_streams() -> tuple[Any, Any]:
    """The real stdin and stdout, kept for protocol lines; fd 0 becomes /dev/null and fd 1 stderr for
    everything else (the programs verifiers starts inherit them: none may read or write the protocol)."""
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 — lives as long as the process
    sys.stdout = sys.stderr
    return requests, out


def _env_config(config: dict[str, Any]) -> Any:
    """The environment's own config class (SingleAgentEnv's `agent`, or every role an Env declares, like
    TextArena's `player`), each role with the configured harness and runtime."""
    from verifiers.v1.configs.agent import agent_config_fields
    from verifiers.v1.utils.loaders import resolve_env_config

    taskset = {"id": config["environment"], **dict(config.get("env_args") or {})}
    harness = {"id": config.get("harness") or "null", **dict(config.get("harness_args") or {})}
    runtime = dict(config.get("runtime") or {"type": "subprocess"})
    roles = agent_config_fields(resolve_env_config({"taskset": taskset}))
    return resolve_env_config(
        {"taskset": taskset, **{role: {"harness": harness, "runtime": runtime} for role in roles}}
    )


def _decorated(task_cls: type) -> tuple[dict[str, float], list[str]]:
    """The task type's `@vf.reward` names with their weights and its `@vf.metric` names (the marks
    verifiers' decorators leave: `reward` with `_vf_weight`, `metric`), from the class's MRO."""
    rewards: dict[str, float] = {}
    metrics: list[str] = []
    for name in sorted({n for klass in task_cls.__mro__ for n in vars(klass)}):
        func = getattr(task_cls, name, None)
        if not callable(func):
            continue
        if getattr(func, "reward", False) is True:
            rewards[name] = float(getattr(func, "_vf_weight", 1.0))
        elif getattr(func, "metric", False) is True:
            metrics.append(name)
    return rewards, metrics


def _task_row(task: Any) -> dict[str, Any]:
    data = task.data
    return {
        "idx": data.idx,
        "id": data.id,
        "name": data.name,
        "key": task.key,
        "prompt": data.prompt_text,
        "system_prompt": data.system_prompt,
        "data": data.model_dump(mode="json", exclude_none=True),
    }


def _result(episode: Any) -> dict[str, Any]:
    traces = list(episode.traces)
    trace = traces[-1] if traces else None
    errors = [f"{e.type}: {e.message}" for e in getattr(episode, "errors", [])]
    out: dict[str, Any] = {"ok": bool(episode.ok), "errors": errors, "rewards": {}, "metrics": {}}
    if trace is not None:
        errors += [f"{e.type}: {e.message}" for e in trace.errors]
        out["rewards"] = {
            name: (None if r is None else {"score": float(r.score), "weight": float(r.weight)})
            for name, r in trace.rewards.items()
        }
        out["metrics"] = {name: value for name, value in trace.metrics.items()}
        out["stop_condition"] = trace.stop_condition
        out["turns"] = trace.num_turns
        out["is_timeout"] = bool(trace.is_timeout)
    return out


async def _serve(config: dict[str, Any], requests: Any, out: Any) -> int:
    import verifiers
    import verifiers.v1 as vf
    from verifiers.v1.utils.loaders import load_environment

    lock = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        with lock:
            out.write(json.dumps(message, default=str) + "\n")

    try:
        env = load_environment(_env_config(config))
        taskset = env.taskset
        if not taskset.bounded:  # an endless taskset (generated games…): its first max_tasks
            taskset = taskset.take(int(config.get("max_tasks") or 1000))
        tasks = list(taskset)
        rewards, metrics = _decorated(type(env.taskset).task_type())
    except Exception as exc:  # noqa: BLE001 — the trainer shows why the environment did not load
        send({"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    by_idx = {task.data.idx: task for task in tasks}
    loop = asyncio.get_running_loop()
    async with env.serving():
        send(
            {
                "ready": True,
                "version": verifiers.__version__,
                "tasks": [_task_row(task) for task in tasks],
                "rewards": rewards,
                "metrics": metrics,
            }
        )

        async def run(request: dict[str, Any]) -> None:
            reply: dict[str, Any] = {"id": request.get("id")}
            try:
                task = by_idx[int(request["idx"])]
                ctx = vf.ModelContext(
                    model=str(request.get("model") or "policy"),
                    client=vf.EvalClientConfig(
                        base_url=str(request["base_url"]), api_key_var="RS_GATEWAY_KEY"
                    ),
                )
                reply.update(_result(await env.run_episode(task, ctx)))
            except Exception as exc:  # noqa: BLE001 — one episode's failure is its reply, not the bridge's end
                reply.update({"ok": False, "errors": [f"{type(exc).__name__}: {exc}"], "rewards": {}})
            send(reply)

        running: set[asyncio.Task] = set()
        while True:
            line = await loop.run_in_executor(None, requests.readline)
            if not line:
                break
            try:
                request = json.loads(line)
            except ValueError as exc:
                send({"id": None, "ok": False, "errors": [f"bad request line: {exc}"]})
                continue
            job = asyncio.ensure_future(run(request))
            running.add(job)
            job.add_done_callback(running.discard)
        for job in list(running):
            job.cancel()
    return 0


def main(argv: list[str]) -> int:
    # Run by path, this folder is sys.path[0]: its modules (mcp.py, openenv.py…) would shadow packages.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    requests, out = _protocol_streams()
    config = json.loads(argv[1]) if len(argv) > 1 else {}
    return asyncio.run(_serve(config, requests, out))


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""openenv: any OpenEnv server (PyPI `openenv`, 0.10; servers of 0.3 too) as an environment, over HTTP or its /ws sessions.

An OpenEnv server exposes `POST /reset {seed, episode_id, …}` and `POST /step {action}` answering
`{observation, reward, done}`, `GET /state`, `GET /schema` (JSON schemas of action, observation,
state), `GET /health`, and `WS /ws` with messages `{type: reset|step|state|close|mcp, data}`.
Servers built with OpenEnv create a fresh environment per HTTP request, so only /ws keeps an
episode's state between steps: the `auto` transport uses one /ws session per episode and falls back
to HTTP for servers without /ws (which then must keep state themselves).

How turns map onto the server (`action_format`):
- `text`: the whole assistant message (stripped) becomes the string field `action_field` of the
  action (default: the action schema's only required string field, else `message`);
- `json`: the assistant writes the action as a JSON object (the last ```json fence or bare `{…}` in
  the message); it is checked against the server's action schema before it is sent, and a bad one
  becomes an `Error:` observation without a step;
- `tools`: the server's MCP tools (listed at reset) are offered as tools in the run's tool-call
  format; each call is sent as the action `{"type": "call_tool", "tool_name", "arguments"}`; a
  message without a tool call ends the episode.
The observation (minus reward, done and metadata) becomes the next user or tool message: the field
`observation_field` when set, else its only string field, else compact JSON. The server's reward is
the step's reward (the `env_reward` criterion sums them) and its `done` ends the episode.

"Start this server for me": `server_app` (`module:app`, run with uvicorn), `server_command` (a
command line with `{port}`) or `image` (a Docker image, OpenEnv's way of shipping environments: its
port `container_port` published on 127.0.0.1; `trainers.envs.openenv_container`) is started once per
process (per rollout worker) on a free 127.0.0.1 port, health-checked, and stopped at exit; a container
that exits is reported as that, with its exit code and last log lines. Every network call has a timeout; an unreachable server
raises `RemoteEnvironmentError` with the address and the reason, never hangs.

This module is the adapter (turns ↔ actions, observations ↔ messages); the wire client is
`trainers.envs.openenv_client` and the started servers `trainers.envs.openenv_server`.
"""

from __future__ import annotations

import json
import re
import uuid
import weakref
from typing import Any

from jsonschema import Draft202012Validator

from trainers.envs.base import Split, StepResult, ToolEnvironment, seed_tasks, task_id
from trainers.envs.openenv_client import OpenEnvClient, RemoteEnvironmentError, close_client
from trainers.envs.openenv_container import ManagedContainer, managed_container
from trainers.envs.openenv_server import managed_server, server_argv
from trainers.envs.tools import ToolError
from trainers.rollout.toolcalls import TOOL_ERROR_PREFIX, format_tools_prompt
from trainers.types import Task, ToolCall, ToolSpec

ACTION_FORMATS = ("text", "json", "tools")
TRANSPORTS = ("auto", "ws", "http")
MAX_OBSERVATION_CHARS = 8000
_JSON_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)
# The server's action schema, fetched once per server and process (environments live one episode).
_ACTION_SCHEMAS: dict[str, dict[str, Any]] = {}


# ---- mapping helpers ---------------------------------------------------------------------------


def default_action_field(action_schema: dict[str, Any]) -> str:
    """The action's only required string field, else its only string field, else "message"."""
    properties = action_schema.get("properties") or {}
    strings = [name for name, prop in properties.items() if prop.get("type") == "string" and name != "type"]
    required = [name for name in action_schema.get("required") or [] if name in strings]
    if len(required) == 1:
        return required[0]
    if len(strings) == 1:
        return strings[0]
    return "message"


def extract_json_action(text: str) -> dict[str, Any] | str:
    """The last JSON object of a message (a ```json fence wins over bare braces), or why there is none."""
    candidates = [m.group(1) for m in _JSON_FENCE.finditer(text)]
    if not candidates:
        start = text.find("{")
        end = text.rfind("}")
        if start >= 0 and end > start:
            candidates = [text[start : end + 1]]
    if not candidates:
        return "No JSON action found. Write the action as a JSON object."
    try:
        value = json.loads(candidates[-1])
    except json.JSONDecodeError as exc:
        return f"The action is not valid JSON ({exc.msg} at character {exc.pos})."
    if not isinstance(value, dict):
        return "The action must be a JSON object."
    return value


# What an observation carries besides what the model should read: a 0.3 server sends them beside the
# observation, a 0.10 one also inside it (its `metadata`, `{}` by default).
NOT_SHOWN = ("reward", "done", "metadata")


def render_observation(observation: Any, field: str = "") -> str:
    """The text the model sees for an observation dict."""
    if isinstance(observation, dict):
        observation = {k: v for k, v in observation.items() if k not in NOT_SHOWN}
    if field and isinstance(observation, dict) and field in observation:
        value = observation[field]
    elif isinstance(observation, dict):
        strings = [v for k, v in observation.items() if isinstance(v, str)]
        value = strings[0] if len(strings) == 1 and len(observation) == 1 else observation
        if isinstance(value, dict) and "result" in value and "tool_name" in value:
            value = _tool_result_text(value)
    else:
        value = observation
    text = (
        value
        if isinstance(value, str)
        else json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
    )
    if len(text) > MAX_OBSERVATION_CHARS:
        text = text[:MAX_OBSERVATION_CHARS] + f"… ({len(text) - MAX_OBSERVATION_CHARS} more characters)"
    return text


def _tool_result_text(observation: dict[str, Any]) -> str:
    """A CallToolObservation's result as text: MCP text content joined, else structured content as JSON."""
    error = observation.get("error")
    if error:
        return f"{TOOL_ERROR_PREFIX} {error.get('message', error) if isinstance(error, dict) else error}"
    result = observation.get("result")
    if isinstance(result, dict):
        if result.get("structured_content") is not None:
            result = result["structured_content"].get("result", result["structured_content"])
        elif result.get("data") is not None:
            result = result["data"]
        elif isinstance(result.get("content"), list):
            result = "\n".join(part.get("text", "") for part in result["content"] if isinstance(part, dict))
    return result if isinstance(result, str) else json.dumps(result, default=str)


# ---- the environment ---------------------------------------------------------------------------


class OpenEnvEnvironment(ToolEnvironment):
    """One episode per reset(); tasks are seeds (the server generates the episode from its seed)."""

    kind = "openenv"

    def __init__(
        self,
        url: str = "",
        server_app: str = "",
        server_command: str = "",
        server_cwd: str = "",
        image: str = "",
        container_port: int = 8000,
        container_env: dict[str, str] | None = None,
        transport: str = "auto",
        action_format: str = "text",
        action_field: str = "",
        observation_field: str = "",
        system_prompt: str = "",
        task_prompt: str = "",
        reset_args: dict[str, Any] | None = None,
        max_turns: int = 8,
        max_tool_calls: int = 8,
        connect_timeout_s: float = 5.0,
        step_timeout_s: float = 30.0,
        startup_timeout_s: float = 120.0,
        eval_fraction: float = 0.1,
    ) -> None:
        super().__init__(max_turns=max_turns, max_tool_calls=max_tool_calls, few_shot=False)
        problems = check_openenv_config(
            {
                "url": url,
                "server_app": server_app,
                "server_command": server_command,
                "image": image,
                "transport": transport,
                "action_format": action_format,
            }
        )
        if problems:
            raise ValueError("; ".join(f"{k}: {', '.join(v)}" for k, v in problems.items()))
        self.url, self.server_app, self.server_command, self.server_cwd = (
            url,
            server_app,
            server_command,
            server_cwd,
        )
        self.image, self.container_port = image, container_port
        self.container_env = {str(k): str(v) for k, v in (container_env or {}).items()}
        self.container: ManagedContainer | None = None
        self.transport, self.action_format = transport, action_format
        self.action_field, self.observation_field = action_field, observation_field
        self.extra_prompt, self.task_prompt = system_prompt, task_prompt
        self.reset_args = dict(reset_args or {})
        self.connect_timeout_s, self.step_timeout_s = connect_timeout_s, step_timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.eval_fraction = eval_fraction
        self.client: OpenEnvClient | None = None
        self._action_schema: dict[str, Any] | None = None
        self._remote_reward = 0.0
        self._remote_done = False
        self._last_observation: Any = None
        self.seed: int | None = None

    # -- connection

    def base_url(self) -> str:
        if self.url:
            return self.url
        if self.image:
            self.container = managed_container(
                self.image,
                container_port=self.container_port,
                env=self.container_env,
                startup_timeout_s=self.startup_timeout_s,
            )
            problem = self.container.exit_problem()
            if problem:
                raise RemoteEnvironmentError(problem)
            return self.container.url
        argv = server_argv(self.server_app, self.server_command)
        return managed_server(argv, cwd=self.server_cwd, startup_timeout_s=self.startup_timeout_s).url

    def _client(self) -> OpenEnvClient:
        if self.client is None:
            self.client = OpenEnvClient(
                self.base_url(),
                transport=self.transport,
                connect_timeout_s=self.connect_timeout_s,
                step_timeout_s=self.step_timeout_s,
            )
            # The trainer never closes environments: end the session when this object goes away.
            weakref.finalize(self, close_client, self.client)
        return self.client

    def action_schema(self) -> dict[str, Any]:
        """The server's action schema, fetched once per server and process (environments live one episode)."""
        if self._action_schema is None:
            client = self._client()
            if client.url not in _ACTION_SCHEMAS:
                _ACTION_SCHEMAS[client.url] = dict(client.schema().get("action") or {})
            self._action_schema = _ACTION_SCHEMAS[client.url]
        return self._action_schema

    def close(self) -> None:
        if self.client is not None:
            close_client(self.client)
            self.client = None

    # -- tasks

    def tasks(self, split: Split, n: int, seed: int) -> list[Task]:
        """Episode seeds: train and eval seeds split by a hash of the seed, so the eval set is fixed."""

        def make(candidate: int) -> tuple[str, Task]:
            key = f"seed:{candidate}"
            prompt = self.task_prompt or f"OpenEnv episode (seed {candidate})"
            return key, Task(id=task_id(self.kind, key), prompt=prompt, meta={"seed": candidate})

        return seed_tasks(make, split=split, n=n, seed=seed, eval_fraction=self.eval_fraction)

    # -- the episode

    def system_prompt(self) -> str:
        parts = [self.extra_prompt.strip()] if self.extra_prompt.strip() else []
        if self.action_format == "tools":
            parts.append(format_tools_prompt(self.tools))
        elif self.action_format == "json":
            schema = {k: v for k, v in self.action_schema().items() if k not in ("title", "description")}
            props = {k: v for k, v in (schema.get("properties") or {}).items() if k != "metadata"}
            parts.append(
                "Reply with your action as one JSON object with these fields: "
                + json.dumps(props, separators=(",", ":"))
            )
        return "\n\n".join(parts)

    def reset(self, task: Task, seed: int) -> str:
        super().reset(task, seed)
        self._remote_reward, self._remote_done = 0.0, False
        client = self._client()
        episode_seed = int(task.meta.get("seed", seed))
        self.seed = episode_seed
        reply = client.reset(
            seed=episode_seed, episode_id=f"{task.id}-{uuid.uuid4().hex[:8]}", **self.reset_args
        )
        if self.action_format == "tools":
            self.tools = [
                ToolSpec(
                    t["name"],
                    t.get("description") or "",
                    t.get("inputSchema") or t.get("input_schema") or {"type": "object", "properties": {}},
                )
                for t in client.list_tools()
            ]
        elif self.action_format == "json" or not self.action_field:
            self.action_schema()
        self._last_observation = reply.get("observation")
        first = render_observation(reply.get("observation"), self.observation_field)
        return f"{self.task_prompt}\n\n{first}".strip() if self.task_prompt else first

    def _send(self, action: dict[str, Any]) -> dict[str, Any]:
        assert self.client is not None
        try:
            reply = self.client.step(action)
        except RemoteEnvironmentError:
            problem = self.container.exit_problem() if self.container is not None else None
            if problem:  # the container died: say that, not "connection refused"
                raise RemoteEnvironmentError(problem) from None
            raise
        self._remote_reward += float(reply.get("reward") or 0.0)
        self._remote_done = bool(reply.get("done"))
        self._last_observation = reply.get("observation")
        if self._remote_done:
            self.client.close()  # one session per episode: give the server its slot back now
        return reply

    def step(self, assistant_text: str) -> StepResult:
        if self.action_format == "tools":
            self._remote_reward = 0.0
            result = super().step(assistant_text)  # tool calls run through run_tool() below
            result.reward += self._remote_reward
            if self._remote_done and not result.done:
                self.done = True
                result.done = True
            if result.done:
                self._finish()
            return result
        if self.task is None or self.done:
            raise RuntimeError("The episode is over (or never started): call reset() first.")
        self.turn += 1
        if self.action_format == "json":
            action = extract_json_action(assistant_text)
            problem = action if isinstance(action, str) else self._schema_problem(action)
            if problem:
                self.failed_calls += 1
                return self._after_turn(
                    StepResult(f"{TOOL_ERROR_PREFIX} {problem}", 0.0, False, {"invalid_action": True})
                )
        else:
            field = self.action_field or default_action_field(self.action_schema())
            action = {field: assistant_text.strip()}
        reply = self._send(action)  # type: ignore[arg-type]
        observation = render_observation(reply.get("observation"), self.observation_field)
        result = StepResult(
            observation, float(reply.get("reward") or 0.0), self._remote_done, {"action": action}
        )
        return self._after_turn(result)

    def _after_turn(self, result: StepResult) -> StepResult:
        if not result.done and self.turn >= self.max_turns:
            result.done = True
            result.info["truncated"] = True
        if result.done:
            self.done = True
            self._finish()
        return result

    def _finish(self) -> None:
        if self.client is not None:
            self.client.close()

    def _schema_problem(self, action: dict[str, Any]) -> str | None:
        errors = sorted(
            Draft202012Validator(self.action_schema()).iter_errors(action), key=lambda e: list(e.path)
        )
        if not errors:
            return None
        where = ".".join(str(p) for p in errors[0].absolute_path)
        return f"The action does not match the environment's action schema: {where + ': ' if where else ''}{errors[0].message}."

    def run_tool(self, call: ToolCall) -> str:
        reply = self._send({"type": "call_tool", "tool_name": call.name, "arguments": call.arguments})
        text = render_observation(reply.get("observation"), self.observation_field)
        if text.startswith(TOOL_ERROR_PREFIX):
            raise ToolError(text[len(TOOL_ERROR_PREFIX) :].strip())
        return text

    def grade(self, text: str) -> tuple[float, dict[str, Any]]:
        """A message without a tool call ends a tools episode; the reward is what the server gave."""
        self.last_answer = text
        return 0.0, {"outcome": "stopped"}

    def state(self) -> dict[str, Any]:
        return {
            "task_id": self.task.id if self.task else None,
            "seed": self.seed,
            "turn": self.turn,
            "done": self.done or self._remote_done,
            "transport": self.client.mode if self.client else None,
            "observation": self._last_observation,
        }

    # -- preview (trainers.envs.preview)

    @staticmethod
    def check_config(config: dict[str, Any]) -> dict[str, list[str]]:
        return check_openenv_config(config)

    def preview_can_reset(self) -> bool:
        return bool(self.url)  # a server this kind would start runs on the workers, not in the preview

    def preview_health(self) -> str:
        """One line for the form: is the server there, and what does it accept."""
        if not self.url:
            what = f"image {self.image}" if self.image else self.server_app or self.server_command
            return f"The server ({what}) is started by each rollout worker; the preview does not start it."
        client = OpenEnvClient(
            self.url,
            transport=self.transport,
            connect_timeout_s=self.connect_timeout_s,
            step_timeout_s=self.connect_timeout_s,
        )
        try:
            status = client.health().get("status", "unknown")
            action = client.schema().get("action") or {}
        finally:
            close_client(client)
        fields = ", ".join(k for k in (action.get("properties") or {}) if k != "metadata") or "none"
        return f"{self.url} is {status}; action fields: {fields}."


def check_openenv_config(config: dict[str, Any]) -> dict[str, list[str]]:
    """What the JSON schema cannot say: exactly one way to reach the server, a usable app path."""
    errors: dict[str, list[str]] = {}
    ways = [name for name in ("url", "server_app", "server_command", "image") if config.get(name)]
    if not ways:
        errors["url"] = ["Give the server's URL, or a server app, command or Docker image to start."]
    elif len(ways) > 1:
        errors[ways[1]] = [
            f"Give only one of URL, server app, server command and image (got {', '.join(ways)})."
        ]
    app = config.get("server_app") or ""
    if app and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", app):
        errors.setdefault("server_app", []).append(
            "Write the app as module:attribute, e.g. my_env.server.app:app."
        )
    command = config.get("server_command") or ""
    if command and "{port}" not in command:
        errors.setdefault("server_command", []).append(
            "The command must contain {port}, where the server should listen."
        )
    return errors

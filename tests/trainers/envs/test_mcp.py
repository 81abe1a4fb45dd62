"""Tools from real MCP servers (FastMCP, started by the tests over stdio and Streamable HTTP).

The environment shows the model only the tools a server's allow-list names, checks arguments against
the tools' own schemas, limits calls per episode and time per call, and turns every refusal, failure,
time-out and dead server into an `Error:` observation, never an exception or a hang.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainers.envs.base import run_episode
from trainers.envs.mcp import McpServerError, close_all, hub
from trainers.registry import environment_kind, validate_config
from trainers.rollout.toolcalls import format_tool_call, is_error_observation
from trainers.types import Task, ToolCall

pytestmark = pytest.mark.slow  # every test here starts server processes

SERVER = Path(__file__).with_name("mcp_server.py")
STDIO = [sys.executable, str(SERVER), "stdio"]
TASKS = [
    {"prompt": "What is 2 + 3? Use the add tool.", "answer": 5},
    {"prompt": "What is 40 + 2?", "answer": 42},
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_http_server() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the MCP test server exited early")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the MCP test server did not listen within 60 s")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def http_url():
    proc, url = start_http_server()
    yield url
    stop(proc)


@pytest.fixture(autouse=True)
def no_sessions_left():
    yield
    close_all()
    assert not hub().connections


def mcp_env(server: dict, **config):
    spec = environment_kind("mcp_tools")
    config = {
        "tasks": TASKS,
        "mcp_servers": [{"name": "tools", "allow_tools": ["add", "shout", "slow", "boom", "pid"], **server}],
        **config,
    }
    assert validate_config(spec.config_schema, config) == {}
    env = spec.build(config)
    env.reset(Task(id="t", prompt=TASKS[0]["prompt"], answer=5), seed=0)
    return env


def call(name: str, **arguments) -> str:
    return format_tool_call(ToolCall(name, arguments))


def test_a_stdio_servers_allowed_tools_become_the_environments_tools():
    env = mcp_env({"command": STDIO, "allow_tools": ["add", "shout"]})
    assert [t.name for t in env.tools] == ["add", "shout"]  # read_secrets, slow… stay hidden
    add = env.tools[0]
    assert add.description == "Add two integers."
    assert add.parameters["properties"] == {"a": {"type": "integer"}, "b": {"type": "integer"}}
    assert '"add"' not in env.system_prompt() or "add:" in env.system_prompt()
    result = env.step(call("add", a=2, b=3))
    assert result.observation == "Result: 5" and result.info["tool_error"] is False
    env.close()


def test_refused_and_failed_calls_are_error_observations():
    env = mcp_env({"command": STDIO, "max_calls": 3})
    hidden = env.step(call("read_secrets"))
    assert is_error_observation(hidden.observation) and "Unknown tool 'read_secrets'" in hidden.observation
    bad_arguments = env.step(
        call("add", a="two", b=3)
    )  # refused by the tool's schema before anything is sent
    assert (
        is_error_observation(bad_arguments.observation)
        and "'two' is not of type 'integer'" in bad_arguments.observation
    )
    broken = env.step(call("boom"))
    assert is_error_observation(broken.observation) and "the tool broke" in broken.observation
    env.close()


def test_a_server_allows_max_calls_per_episode():
    env = mcp_env({"command": STDIO, "max_calls": 1}, max_tool_calls=5)
    assert env.step(call("add", a=1, b=1)).observation == "Result: 2"
    second = env.step(call("shout", text="hi"))
    assert is_error_observation(second.observation) and "allows 1 calls per episode" in second.observation
    env.reset(Task(id="t2", prompt="again", answer=1), seed=1)  # a new episode, a new budget
    assert env.step(call("shout", text="hi")).observation == "Result: HI"
    env.close()


def test_a_slow_call_times_out_and_the_server_stays_usable():
    env = mcp_env({"command": STDIO, "timeout_s": 0.5}, max_tool_calls=5)
    started = time.monotonic()
    slow = env.step(call("slow", seconds=5))
    assert time.monotonic() - started < 4
    assert is_error_observation(slow.observation) and "timed out after 0.5 s" in slow.observation
    assert env.step(call("add", a=20, b=22)).observation == "Result: 42"
    env.close()


def test_a_killed_stdio_server_is_a_visible_error_and_the_next_episode_gets_a_new_one():
    env = mcp_env({"command": STDIO}, max_tool_calls=5)
    server_pid = int(env.step(call("pid")).observation.removeprefix("Result: "))
    os.kill(server_pid, signal.SIGKILL)
    started = time.monotonic()
    dead = env.step(call("add", a=1, b=2))
    assert time.monotonic() - started < 15
    assert is_error_observation(dead.observation) and "not available" in dead.observation
    env.close()
    fresh = mcp_env({"command": STDIO}, max_tool_calls=5)
    assert fresh.step(call("add", a=1, b=2)).observation == "Result: 3"
    fresh.close()


def test_a_session_nobody_holds_closes_and_its_server_exits():
    hub().linger_s = 0.2
    try:
        env = mcp_env({"command": STDIO})
        server_pid = int(env.step(call("pid")).observation.removeprefix("Result: "))
        env.close()
        deadline = time.monotonic() + 10
        while hub().connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not hub().connections
        while time.monotonic() < deadline:
            try:
                os.kill(server_pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the stdio server outlived its session")
    finally:
        hub().linger_s = 120.0


def test_environments_built_from_one_config_share_one_server():
    first, second = mcp_env({"command": STDIO}), mcp_env({"command": STDIO})
    assert first.step(call("pid")).observation == second.step(call("pid")).observation
    first.close()
    second.close()


def test_streamable_http_server(http_url):
    env = mcp_env({"url": http_url, "allow_tools": ["*"], "timeout_s": 0.5}, max_tool_calls=5)
    assert {t.name for t in env.tools} >= {"add", "read_secrets"}  # "*" opts in to every tool
    assert env.step(call("shout", text="mcp")).observation == "Result: MCP"
    assert "timed out" in env.step(call("slow", seconds=3)).observation
    assert env.step(call("add", a=2, b=2)).observation == "Result: 4"
    env.close()


def test_a_killed_http_server_is_a_visible_error():
    proc, url = start_http_server()
    try:
        # The SDK's HTTP transport does not pass a refused connection on to the call waiting for its
        # answer: the call ends at the server's timeout_s (10 s unless set), as an error.
        env = mcp_env({"url": url, "timeout_s": 4}, max_tool_calls=5)
        assert env.step(call("add", a=1, b=1)).observation == "Result: 2"
    finally:
        stop(proc)
    started = time.monotonic()
    dead = env.step(call("add", a=1, b=2))
    assert time.monotonic() - started < 4 + 5
    assert is_error_observation(dead.observation)
    env.close()


@pytest.mark.parametrize(
    ("server", "why"),
    [
        ({"url": "http://127.0.0.1:{port}/mcp"}, "could not be reached"),
        (
            {
                "command": [
                    sys.executable,
                    "-c",
                    "import sys; print('no such server', file=sys.stderr); sys.exit(3)",
                ]
            },
            "no such server",
        ),
    ],
)
def test_an_unreachable_server_fails_the_build_with_its_reason(server, why):
    server = {k: v.format(port=free_port()) if isinstance(v, str) else v for k, v in server.items()}
    with pytest.raises(McpServerError, match=why) as raised:
        mcp_env(server)
    assert "'tools'" in str(raised.value)


def test_an_allow_list_naming_a_missing_tool_fails_the_build():
    with pytest.raises(McpServerError, match="has no tool 'delete_everything'"):
        mcp_env({"command": STDIO, "allow_tools": ["add", "delete_everything"]})


def test_an_episode_with_mcp_tools_from_call_to_graded_answer():
    env = mcp_env({"command": STDIO})
    replies = iter([call("add", a=2, b=3), "<answer>5</answer>"])
    trajectory = run_episode(
        env, Task(id="t", prompt=TASKS[0]["prompt"], answer=5), 0, lambda messages: next(replies)
    )
    assert [t.role for t in trajectory.turns] == ["system", "user", "assistant", "tool", "assistant"]
    assert trajectory.turns[3].tool_result == "Result: 5"
    assert trajectory.env_reward == 1.0 and trajectory.info["last_step"]["correct"] is True
    env.close()


def test_an_existing_kind_takes_mcp_tools_beside_its_own():
    spec = environment_kind("arithmetic_calculator")
    config = {"mcp_servers": [{"name": "tools", "command": STDIO, "allow_tools": ["shout"]}]}
    assert validate_config(spec.config_schema, config) == {}
    env = spec.build(config)
    env.reset(env.tasks("train", 1, seed=0)[0], seed=0)
    assert [t.name for t in env.tools] == ["calculator", "shout"]
    assert env.step(call("shout", text="ok")).observation == "Result: OK"
    assert env.step(call("calculator", expression="2*3")).observation == "Result: 6"
    env.close()


def test_a_stopped_hub_loop_is_replaced_and_the_next_build_reaches_its_server():
    stopped = hub()
    stopped.loop.call_soon_threadsafe(stopped.loop.stop)
    stopped.thread.join(timeout=5)
    assert not stopped.thread.is_alive()
    started = time.monotonic()
    env = mcp_env({"command": STDIO, "allow_tools": ["add"]})
    assert env.step(call("add", a=2, b=3)).observation == "Result: 5"
    assert hub() is not stopped and time.monotonic() - started < 20  # not a connect time-out
    env.close()

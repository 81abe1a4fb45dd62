"""MCP over HTTP to a current server: a server built on the mcp 2.x SDK (its own venv, `make venv-mcp2`),
reached with MCP's stateless 2026-07-28 revision — every request one self-contained POST, no handshake, no
session — and, for comparison, with the older handshake the installed 1.x SDK speaks."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.trainers.envs.test_mcp import SERVER as FASTMCP_SERVER
from tests.trainers.envs.test_mcp import call, free_port, mcp_env, stop
from trainers.envs.mcp import STATELESS_REVISION, McpServerError, _StatelessClient, close_all, hub
from trainers.rollout.toolcalls import is_error_observation

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
MCP2_PYTHON = ROOT / ".venv-mcp2" / "bin" / "python"
MCP2_SERVER = Path(__file__).with_name("mcp2_server.py")


def serve(command: list[str], port: int) -> subprocess.Popen:
    import socket

    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{command} exited early")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{command} did not listen within 60 s")


@pytest.fixture(scope="module")
def mcp2_url():
    if not MCP2_PYTHON.exists():
        pytest.skip("the mcp 2.x server venv is missing: run `make venv-mcp2` (make test does)")
    version = subprocess.run(
        [str(MCP2_PYTHON), "-c", "import importlib.metadata as m; print(m.version('mcp'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert version.startswith("2."), version
    port = free_port()
    proc = serve([str(MCP2_PYTHON), str(MCP2_SERVER), str(port)], port)
    yield f"http://127.0.0.1:{port}/mcp"
    stop(proc)


@pytest.fixture(autouse=True)
def no_sessions_left():
    yield
    close_all()
    assert not hub().connections


def connection_of(env) -> object:
    return env.toolbox._connections["tools"].client


@pytest.mark.parametrize("protocol", ["auto", STATELESS_REVISION])
def test_the_stateless_revision_lists_and_calls_tools_with_the_same_permissions(mcp2_url, protocol):
    env = mcp_env({"url": mcp2_url, "protocol": protocol, "max_calls": 3}, max_tool_calls=6, max_turns=8)
    assert isinstance(connection_of(env), _StatelessClient)  # no session, no handshake
    assert [t.name for t in env.tools] == ["add", "shout", "slow", "boom", "pid"]  # read_secrets stays hidden
    assert env.tools[0].parameters["properties"]["a"]["type"] == "integer"
    assert env.step(call("add", a=2, b=3)).observation == "Result: 5"
    hidden = env.step(call("read_secrets"))
    assert is_error_observation(hidden.observation) and "Unknown tool 'read_secrets'" in hidden.observation
    broken = env.step(call("boom"))  # mcp 2.x servers do not pass the exception's text on
    assert is_error_observation(broken.observation) and "Tool 'boom' failed" in broken.observation
    assert env.step(call("shout", text="hi")).observation == "Result: HI"
    over = env.step(call("add", a=1, b=1))
    assert is_error_observation(over.observation) and "allows 3 calls per episode" in over.observation
    env.close()


def test_a_slow_stateless_call_times_out_and_the_next_one_works(mcp2_url):
    env = mcp_env(
        {"url": mcp2_url, "protocol": STATELESS_REVISION, "timeout_s": 0.5}, max_tool_calls=5, max_turns=8
    )
    started = time.monotonic()
    slow = env.step(call("slow", seconds=5))
    assert is_error_observation(slow.observation) and "timed out" in slow.observation
    assert time.monotonic() - started < 4
    assert env.step(call("add", a=1, b=2)).observation == "Result: 3"
    env.close()


def test_the_handshake_revision_still_reaches_the_same_server(mcp2_url):
    env = mcp_env({"url": mcp2_url, "protocol": "session"})
    assert not isinstance(connection_of(env), _StatelessClient)
    assert env.step(call("add", a=20, b=22)).observation == "Result: 42"
    env.close()


def test_asking_an_older_server_for_the_stateless_revision_is_a_clear_error_and_auto_falls_back():
    import sys

    port = free_port()
    proc = serve([sys.executable, str(FASTMCP_SERVER), "http", str(port)], port)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        env = mcp_env({"url": url})  # auto: the handshake when the stateless request is refused
        assert env.step(call("add", a=2, b=2)).observation == "Result: 4"
        env.close()
        with pytest.raises(McpServerError, match="2026-07-28"):
            mcp_env({"url": url, "protocol": STATELESS_REVISION})
    finally:
        stop(proc)


def test_an_unreachable_stateless_server_fails_the_build_with_its_address():
    url = f"http://127.0.0.1:{free_port()}/mcp"
    with pytest.raises(McpServerError, match="could not be reached"):
        mcp_env({"url": url, "protocol": STATELESS_REVISION})

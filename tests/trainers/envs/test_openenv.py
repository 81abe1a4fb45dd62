"""The `openenv` kind against real OpenEnv servers (OpenEnv's own server classes, PyPI `openenv` 0.10) on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from trainers.envs.base import run_episode
from trainers.envs.openenv import (
    OpenEnvEnvironment,
    check_openenv_config,
    default_action_field,
    extract_json_action,
)
from trainers.envs.openenv_client import RemoteEnvironmentError
from trainers.envs.openenv_server import managed_server, server_argv, stop_managed_servers
from trainers.envs.ports import free_port
from trainers.registry import environment_kind
from trainers.rubrics import score_trajectory

pytestmark = pytest.mark.slow  # every test here starts a server process

ROOT = Path(__file__).resolve().parents[3]
GUESS_APP = "tests.fixtures.openenv_guess.server:app"


def secret_of(seed: int) -> int:
    import random

    return random.Random(seed).randint(1, 20)


def binary_search_policy():
    """Plays the guessing game well: halves the interval after each hint."""
    bounds = [1, 20]

    def policy(messages: list[dict[str, str]]) -> str:
        last = messages[-1]["content"]
        if "go higher" in last:
            bounds[0] = int(last.split()[0]) + 1
        elif "go lower" in last:
            bounds[1] = int(last.split()[0]) - 1
        return str((bounds[0] + bounds[1]) // 2)

    return policy


@pytest.fixture(scope="module")
def guess_url():
    """A real server started the way users start theirs: uvicorn on a free port, in its own process."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            GUESS_APP,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # importing openenv-core (gradio…) is slow on a busy machine
        while True:
            try:
                if requests.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.1)
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail("the test server did not start")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(autouse=True, scope="module")
def _stop_servers_we_started():
    yield
    stop_managed_servers()


def build(**config) -> OpenEnvEnvironment:
    return environment_kind("openenv").build(config)


def test_a_ws_episode_plays_the_game_and_the_servers_reward_is_the_environment_reward(guess_url):
    env = build(url=guess_url)
    task = env.tasks("train", 1, seed=0)[0]
    trajectory = run_episode(env, task, 0, binary_search_policy())

    assert trajectory.turns[1].text.startswith("I picked a number from 1 to 20")
    assert trajectory.turns[-2].text == str(secret_of(task.meta["seed"]))
    assert trajectory.status == "ok" and trajectory.env_reward == 1.0
    assert env.state()["transport"] == "ws" and env.state()["done"]
    score = score_trajectory({"criteria": [{"name": "env", "kind": "env_reward"}]}, trajectory)
    assert score.total == 1.0


def test_each_episode_has_its_own_session_like_a_training_step(guess_url):
    envs = [build(url=guess_url) for _ in range(16)]
    tasks = envs[0].tasks("train", 4, seed=3)
    firsts = [env.reset(tasks[i % 4], 0) for i, env in enumerate(envs)]  # all open at once, as in a GRPO step
    assert all(first.startswith("I picked") for first in firsts)
    replies = [env.step(str(secret_of(tasks[i % 4].meta["seed"]))) for i, env in enumerate(envs)]
    assert all(r.done and r.reward == 1.0 for r in replies)


def test_tasks_are_seeds_split_by_hash_and_fixed(guess_url):
    env = build(url=guess_url)
    train, evals = env.tasks("train", 50, seed=0), env.tasks("eval", 10, seed=0)
    assert not {t.id for t in train} & {t.id for t in evals}
    assert [t.id for t in env.tasks("eval", 10, seed=7)] == [t.id for t in evals]  # whatever the run's seed
    assert {t.id for t in env.tasks("train", 50, seed=7)} != {t.id for t in train}


def test_http_transport_for_a_server_that_keeps_its_own_state(guess_url):
    env = build(server_app="tests.fixtures.openenv_guess.server:http_app", transport="http")
    task = env.tasks("train", 1, seed=5)[0]
    trajectory = run_episode(env, task, 0, binary_search_policy())
    assert trajectory.env_reward == 1.0 and env.state()["transport"] == "http"


def test_json_actions_are_checked_against_the_servers_schema(guess_url):
    env = build(url=guess_url, action_format="json", max_turns=4)
    task = env.tasks("train", 1, seed=0)[0]
    env.reset(task, 0)
    assert '"message"' in env.system_prompt()

    bad = env.step("I guess seven")
    assert bad.observation.startswith("Error: No JSON action") and not bad.done
    wrong_field = env.step('{"guess": "7"}')
    assert wrong_field.observation.startswith("Error: The action does not match") and not wrong_field.done
    right = env.step(f'```json\n{{"message": "{secret_of(task.meta["seed"])}"}}\n```')
    assert right.done and right.reward == 1.0


def test_mcp_tools_are_offered_as_tool_specs_and_each_call_is_a_step(guess_url):
    env = build(server_app="tests.fixtures.openenv_guess.server:mcp_app", action_format="tools")
    task = env.tasks("train", 1, seed=0)[0]
    env.reset(task, 0)
    assert [t.name for t in env.tools] == ["guess"]
    assert env.tools[0].parameters["properties"]["number"]["type"] == "integer"
    assert "guess" in env.system_prompt()

    miss = env.step('<tool_call>{"name": "guess", "arguments": {"number": 0}}</tool_call>')
    assert miss.observation == "Result: 0 is wrong: go higher." and not miss.done
    refused = env.step('<tool_call>{"name": "guess", "arguments": {"number": "seven"}}</tool_call>')
    assert refused.observation.startswith("Error:") and not refused.done  # the schema check happens here
    secret = secret_of(task.meta["seed"])
    hit = env.step(f'<tool_call>{{"name": "guess", "arguments": {{"number": {secret}}}}}</tool_call>')
    assert hit.done and hit.reward == 1.0


def test_a_production_mode_server_plays_its_tools_over_ws_and_http_says_why_it_cannot():
    """OpenEnv 0.10's production mode serves no /reset, /step or /state: episodes over /ws, tools at /mcp."""
    env = build(server_app="tests.fixtures.openenv_guess.server:production_app", action_format="tools")
    task = env.tasks("train", 1, seed=0)[0]
    env.reset(task, 0)
    assert [t.name for t in env.tools] == ["guess"]
    secret = secret_of(task.meta["seed"])
    hit = env.step(f'<tool_call>{{"name": "guess", "arguments": {{"number": {secret}}}}}</tool_call>')
    assert hit.done and hit.reward == 1.0 and hit.observation == f"Result: {secret} is right!"

    over_http = build(
        server_app="tests.fixtures.openenv_guess.server:production_app",
        action_format="tools",
        transport="http",
    )
    with pytest.raises(
        RemoteEnvironmentError, match="production mode .* set the environment's transport to ws"
    ):
        over_http.reset(task, 0)


def test_a_message_without_a_tool_call_ends_a_tools_episode(guess_url):
    env = build(server_app="tests.fixtures.openenv_guess.server:mcp_app", action_format="tools")
    env.reset(env.tasks("train", 1, seed=0)[0], 0)
    result = env.step("I give up.")
    assert result.done and result.reward == 0.0


def test_a_server_command_is_started_once_per_process_on_a_free_port():
    command = f"{sys.executable} -m uvicorn server:app --host 127.0.0.1 --port {{port}}"
    cwd = str(ROOT / "tests" / "fixtures" / "openenv_guess")
    first = build(server_command=command, server_cwd=cwd)
    second = build(server_command=command, server_cwd=cwd)
    assert first.base_url() == second.base_url()
    task = first.tasks("train", 1, seed=0)[0]
    assert first.reset(task, 0).startswith("I picked")


def test_a_server_that_dies_at_startup_is_a_clear_error():
    with pytest.raises(RemoteEnvironmentError, match="(?s)exited with code 3.*boom"):
        managed_server(
            [sys.executable, "-c", "print('boom'); raise SystemExit(3)", "{port}"],
            cwd="",
            startup_timeout_s=20,
        )


def test_an_unreachable_server_fails_fast_with_its_address():
    port = free_port()  # nothing listens there
    env = build(url=f"http://127.0.0.1:{port}", connect_timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(RemoteEnvironmentError, match=f"127.0.0.1:{port}.*unreachable"):
        env.reset(env.tasks("train", 1, seed=0)[0], 0)
    assert time.monotonic() - started < 5


def test_a_server_that_never_answers_times_out_instead_of_hanging():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # accepts connections, never answers
    port = listener.getsockname()[1]
    try:
        env = build(url=f"http://127.0.0.1:{port}", connect_timeout_s=0.5, step_timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(RemoteEnvironmentError):
            env.reset(env.tasks("train", 1, seed=0)[0], 0)
        assert time.monotonic() - started < 5
    finally:
        listener.close()


def test_a_server_dying_mid_episode_is_an_error_not_a_hang():
    env = build(server_app=GUESS_APP, startup_timeout_s=120)
    env.reset(env.tasks("train", 1, seed=0)[0], 0)
    server = managed_server(server_argv(GUESS_APP, ""), cwd="", startup_timeout_s=120)
    server.stop()
    with pytest.raises(RemoteEnvironmentError, match="broke|unreachable|closed"):
        env.step("7")


def test_servers_started_for_the_process_are_stopped_at_exit():
    code = (
        "import sys; sys.path.insert(0, '.')\n"
        "from trainers.envs.openenv_server import managed_server, server_argv\n"
        f"server = managed_server(server_argv({GUESS_APP!r}, ''), cwd='', startup_timeout_s=120)\n"
        "print(server.process.pid, flush=True)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    pid = int(out.stdout.split()[-1])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    pytest.fail(f"server process {pid} outlived its parent")


def test_mapping_helpers():
    assert (
        default_action_field(
            {
                "properties": {"message": {"type": "string"}, "metadata": {"type": "object"}},
                "required": ["message"],
            }
        )
        == "message"
    )
    assert default_action_field({"properties": {"x": {"type": "integer"}}}) == "message"
    assert extract_json_action('say {"a": 1} then ```json\n{"b": 2}\n```') == {"b": 2}
    assert extract_json_action("[1, 2]").startswith("No JSON action")


def test_config_cross_checks():
    assert "url" in check_openenv_config({})
    assert "server_app" in check_openenv_config({"url": "http://x", "server_app": "a:b"})
    assert check_openenv_config({"server_app": "not an app"})["server_app"][0].startswith("Write the app")
    assert "server_command" in check_openenv_config({"server_command": "python serve.py"})
    assert check_openenv_config({"server_command": "python serve.py --port {port}"}) == {}


def test_session_threads_do_not_leak(guess_url):
    before = threading.active_count()
    for _ in range(5):
        env = build(url=guess_url)
        env.reset(env.tasks("train", 1, seed=0)[0], 0)
        env.step("1")
        env.close()
    assert threading.active_count() <= before + 1

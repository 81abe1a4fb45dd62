"""The `harbor` kind: a Harbor task folder (tests/fixtures/harbor_tasks/hello-file) run in Docker — the
agent's bash commands in the task's container, the task's own tests/test.sh as the verifier — and its
task.toml read as Harbor's own TaskConfig reads it.

Needs a Docker daemon (`dockerd &`) and the local base image scripts/docker-harbor-base.sh makes (Docker Hub
is not reachable here); skipped without a daemon."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.trainers.sdk.test_atif_harbor import harbor
from trainers.envs.base import run_episode
from trainers.envs.harbor_task import read_task
from trainers.registry import environment_kind

ROOT = Path(__file__).resolve().parents[3]
TASKS = ROOT / "tests" / "fixtures" / "harbor_tasks"
HELLO = TASKS / "hello-file"


def test_task_toml_reads_as_harbors_task_config():
    ours = read_task(HELLO)
    theirs = json.loads(harbor("task-config", (HELLO / "task.toml").read_text()))
    assert ours["verifier_timeout_s"] == theirs["verifier"]["timeout_sec"] == 60.0
    assert ours["build_timeout_s"] == theirs["environment"]["build_timeout_sec"] == 120.0
    assert ours["instruction"] == "Create the file /app/hello.txt containing the single word hello."


def test_a_folder_that_is_not_a_task_is_refused_in_words(tmp_path):
    (tmp_path / "task.toml").write_text("[verifier]\n")
    with pytest.raises(ValueError, match="needs task.toml and instruction.md"):
        environment_kind("harbor").build({"path": str(tmp_path)})
    (tmp_path / "instruction.md").write_text("Do it.")
    with pytest.raises(ValueError, match=r"only Docker environments \(environment/Dockerfile, or"):
        environment_kind("harbor").build({"path": str(tmp_path)})
    (tmp_path / "task.toml").write_text('[environment]\ndocker_image = "local/harbor-base:1"\n')
    with pytest.raises(ValueError, match="the verifier tests/test.sh is missing"):
        environment_kind("harbor").build({"path": str(tmp_path)})
    with pytest.raises(ValueError, match="is not a Harbor task folder or a folder of them"):
        environment_kind("harbor").build({"path": str(tmp_path.parent / "nothing-here")})


@pytest.fixture(scope="module")
def docker_ready():
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        pytest.skip("no Docker daemon (start one: dockerd &)")
    made = subprocess.run(
        ["bash", str(ROOT / "scripts" / "docker-harbor-base.sh")], capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr


def scripted(*replies: str):
    queue = list(replies)
    return lambda messages: queue.pop(0)


def bash_call(command: str) -> str:
    return f'<tool_call>{{"name": "bash", "arguments": {{"command": {json.dumps(command)}}}}}</tool_call>'


@pytest.mark.slow
def test_the_tasks_tests_judge_what_the_agent_did_in_its_container(docker_ready):
    env = environment_kind("harbor").build({"path": str(TASKS), "max_turns": 4})
    [task] = env.tasks("train", 1, seed=0)
    assert task.prompt.startswith("Create the file /app/hello.txt")

    solved = run_episode(
        env, task, 0, scripted(bash_call("echo hello > /app/hello.txt && pwd && cat /app/hello.txt"), "Done.")
    )
    container = env.container
    env.close()
    wrong = run_episode(env, task, 0, scripted(bash_call("echo bye > /app/hello.txt"), "Done."))
    env.close()
    out_of_turns = run_episode(env, task, 0, scripted(*[bash_call("echo hello > /app/hello.txt")] * 4))
    env.close()

    assert solved.env_reward == 1.0 and wrong.env_reward == 0.0 and out_of_turns.env_reward == 1.0
    assert "/app\nhello\n(exit code 0)" in solved.turns[3].text
    harbor_info = solved.info["last_step"]["harbor"]
    assert harbor_info["rewards"] == {"reward": 1.0} and "hello.txt is right" in harbor_info["test_output"]
    assert "hello.txt is missing or wrong" in wrong.info["last_step"]["harbor"]["test_output"]
    # each episode had a fresh container, removed at the end; no network inside
    assert subprocess.run(["docker", "inspect", container], capture_output=True).returncode != 0


@pytest.mark.slow
def test_grpo_trains_the_real_model_on_a_harbor_task(docker_ready, policy_copy):
    from trainers.recipes.grpo import train
    from trainers.sdk.events import MemorySink

    model, tokenizer = policy_copy
    config = {
        "preset": "grpo",
        "environment": {"kind": "harbor", "config": {"path": str(TASKS), "max_turns": 2}},
        "rubric": {
            "aggregation": "weighted_sum",
            "criteria": [{"name": "tests", "kind": "env_reward", "weight": 1.0, "params": {}}],
        },
        "max_steps": 1,
        "group_size": 2,
        "prompts_per_step": 1,
        "max_new_tokens": 24,
        "max_turns": 2,
        "eval_tasks": 0,
        "checkpoint_every": 0,
        "learning_rate": 1e-5,
        "seed": 1,
    }
    sink = MemorySink()

    result = train(config, sink=sink, model=model, tokenizer=tokenizer)

    assert result.status == "SUCCEEDED" and result.step == 1
    items = [i for e in sink.events if e["type"] == "trajectories" for i in e["items"]]
    assert len(items) == 2 and all(i["task_id"] == "harbor:hello-file" for i in items)
    for item in items:  # every episode was judged by the task's own tests, in its own container
        assert item["env_state"]["harbor"]["task"] == "hello-file"
        assert item["reward"] == item["env_state"]["harbor"]["reward"] in (0.0, 1.0)


@pytest.mark.slow
def test_a_prebuilt_docker_image_is_used_as_it_is(docker_ready, tmp_path):
    task_dir = tmp_path / "hello-prebuilt"
    shutil.copytree(HELLO, task_dir, ignore=shutil.ignore_patterns("environment"))
    toml = (
        (task_dir / "task.toml")
        .read_text()
        .replace("[environment]", '[environment]\ndocker_image = "local/harbor-base:1"')
    )
    (task_dir / "task.toml").write_text(toml)
    env = environment_kind("harbor").build({"path": str(task_dir)})
    [task] = env.tasks("train", 1, seed=0) or env.tasks("eval", 1, seed=0)

    solved = run_episode(env, task, 0, scripted(bash_call("echo hello > /app/hello.txt"), "Done."))
    env.close()

    assert solved.env_reward == 1.0

"""The `agent` kind: the user's agent, unchanged, run once per episode against the gateway.

The agents (tests/trainers/envs/agents.py, agent_command.py) use the real `openai` client; the model
side is a `ScriptedModel` on the bundled model's tokenizer (it always calls the calculator, then
answers), except in the slow test at the end, which trains the real model for two GRPO steps.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.trainers.envs import agents
from tests.trainers.gateway.scripted import ScriptedModel, calculator_rule
from trainers.envs.agent import AgentEnv
from trainers.registry import environment_kind
from trainers.rollout.chat import ChatFormat
from trainers.rollout.episodes import generate_rollouts
from trainers.rollout.toolformats import STUDIO
from trainers.types import Task

COMMAND = str(Path(__file__).with_name("agent_command.py"))
TASKS = [
    Task("t1", "What is 31 + 45?", 76),
    Task("t2", "What is 12 * 3?", 36, meta={"fields": {"crash": True}}),
]
OPTIONS = dict(
    max_turns=4,
    max_new_tokens=64,
    max_context_tokens=4096,
    temperature=1.0,
    top_p=1.0,
    generation_seed=0,
    stop=STUDIO.stop,
)


@pytest.fixture(scope="module")
def smollm_tokenizer():
    from trainers.models import load_tokenizer

    return load_tokenizer("smollm2-135m")


@pytest.fixture()
def model(smollm_tokenizer):
    return ScriptedModel(smollm_tokenizer, calculator_rule("studio"))


@pytest.fixture()
def chat(smollm_tokenizer):
    return ChatFormat(smollm_tokenizer, STUDIO)


def agent_env(**config) -> AgentEnv:
    return environment_kind("agent").build({"tasks": [{"prompt": "What is 1 + 1?", "answer": 2}], **config})


def roll(env: AgentEnv, model, chat, tasks=TASKS, group_size=2, **options):
    seeds = [[100 * g + s for s in range(group_size)] for g in range(len(tasks))]
    started = time.monotonic()
    groups = generate_rollouts(model, chat, lambda: env, tasks, seeds, **{**OPTIONS, **options})
    return groups, time.monotonic() - started


def test_each_episode_runs_the_agent_and_becomes_a_rollout_of_its_group(model, chat):
    # A wide batching window, so a loaded test machine cannot split a turn's batch.
    env = agent_env(entry_point="tests.trainers.envs.agents:calculator_agent", batch_window_ms=2000)

    groups, _ = roll(env, model, chat, first_group=3, policy_version=7)

    assert [[(r.group, r.sample, r.task.id) for r in g] for g in groups] == [
        [(3, 0, "t1"), (3, 1, "t1")],
        [(4, 0, "t2"), (4, 1, "t2")],
    ]
    for rollout in (r for g in groups for r in g):
        traj = rollout.trajectory
        assert traj.status == "ok" and traj.env_reward == 1.0 and traj.info["correct"] is True
        assert [t.role for t in traj.turns] == ["system", "user", "assistant", "tool", "assistant"]
        assert rollout.policy_version == 7 and sum(rollout.loss_mask) == sum(
            len(t.token_ids) for t in traj.turns if t.role == "assistant"
        )
        item = rollout.to_item()
        assert item["status"] == "ok" and item["env_state"]["calls"] == 2
    assert model.batches[:2] == [4, 4]  # the four episodes' calls were sampled together, turn by turn


def test_max_parallel_bounds_the_agents_running_at_once(model, chat):
    env = agent_env(entry_point="tests.trainers.envs.agents:calculator_agent", max_parallel=1)

    groups, _ = roll(env, model, chat)

    assert all(r.trajectory.status == "ok" for g in groups for r in g)
    assert model.batches == [1] * 8  # one episode at a time: 4 episodes × 2 calls, never batched


def test_a_crashing_agent_leaves_an_error_trajectory_and_the_other_episodes_finish(model, chat):
    env = agent_env(entry_point="tests.trainers.envs.agents:flaky_agent")

    [fine, crashed], _ = roll(env, model, chat)

    assert {r.trajectory.status for r in fine} == {"ok"}
    for rollout in crashed:
        assert rollout.trajectory.status == "error"
        assert rollout.trajectory.info["error"] == "ValueError: the agent broke on task t2"
        assert rollout.to_item()["env_state"]["error"] == "ValueError: the agent broke on task t2"
        # Its one call is kept, for review (a user message without a system prompt: one rendered piece).
        assert [t.role for t in rollout.trajectory.turns] == ["user", "assistant"]
    # …and the environment keeps working: the next step's episodes run as usual.
    [again], _ = roll(env, model, chat, tasks=TASKS[:1])
    assert {r.trajectory.status for r in again} == {"ok"}


def test_a_hanging_agent_times_out_and_nothing_waits_for_it(model, chat):
    env = agent_env(entry_point="tests.trainers.envs.agents:hanging_agent", timeout_s=1)
    try:
        [group], elapsed = roll(env, model, chat, tasks=TASKS[:1])
    finally:
        agents.RELEASE_HANGING.set()

    assert elapsed < 15
    for rollout in group:
        assert rollout.trajectory.status == "error"
        assert rollout.trajectory.info["error"] == "the agent did not finish within 1 s"
        assert rollout.trajectory.info["calls"] == 1


def test_a_hanging_agent_in_its_own_process_is_killed(model, chat):
    env = agent_env(entry_point="tests.trainers.envs.agents:sleeping_agent", isolation="process", timeout_s=3)
    episodes = []
    original = env._run_process
    env._run_process = lambda episode, *args: (
        episodes.append(episode),
        original(episode, *args),
    )  # to see its child

    [group], elapsed = roll(env, model, chat, tasks=TASKS[:1])

    assert elapsed < 20
    assert [r.trajectory.info["error"] for r in group] == ["the agent did not finish within 3 s"] * 2
    assert all(e.process.poll() is not None for e in episodes)  # no agent process is left running


def test_an_entry_point_may_run_in_a_process_of_its_own(model, chat):
    env = agent_env(
        entry_point="tests.trainers.envs.agents:calculator_agent", isolation="process", timeout_s=60
    )

    [group], _ = roll(env, model, chat, tasks=TASKS[:1])

    assert [(r.trajectory.status, r.trajectory.env_reward, r.trajectory.info["correct"]) for r in group] == [
        ("ok", 1.0, True)
    ] * 2


def test_a_command_agent_gets_its_endpoint_and_task_and_reports_its_reward(model, chat):
    env = agent_env(command=[sys.executable, COMMAND, "{base_url}", "{task_json}"], timeout_s=60)

    [group], _ = roll(env, model, chat, tasks=TASKS[:1])

    for rollout in group:
        assert rollout.trajectory.status == "ok" and rollout.trajectory.info["by"] == "command"
        assert rollout.trajectory.env_reward == 0.5  # its one call got a tool call, not the answer
        assert [t.role for t in rollout.trajectory.turns] == ["user", "assistant"]


def test_a_failing_command_shows_its_exit_status_and_stderr(model, chat):
    env = agent_env(command=[sys.executable, COMMAND, "{base_url}", "{task_json}", "--fail"], timeout_s=60)

    [group], _ = roll(env, model, chat, tasks=TASKS[:1], group_size=1)

    assert group[0].trajectory.status == "error"
    assert group[0].trajectory.info["error"] == "the agent exited with status 3: cannot solve t1: no strategy"


def test_an_agent_that_never_calls_the_model_is_an_error(model, chat):
    env = agent_env(entry_point="tests.trainers.envs.agents:silent_agent")

    [group], _ = roll(env, model, chat, tasks=TASKS[:1], group_size=1)

    assert group[0].trajectory.info["error"] == "the agent finished without calling the model"
    assert group[0].prompt_ids == [] and group[0].completion_ids == []


def test_the_kind_checks_its_config():
    spec = environment_kind("agent")
    tasks = [{"prompt": "p"}]
    assert spec.validate({"tasks": tasks}) == {
        "entry_point": ["Set an entry point (module:function) or a command."]
    }
    assert (
        "not both"
        in spec.validate({"tasks": tasks, "entry_point": "a:b", "command": ["x"]})["entry_point"][0]
    )
    assert spec.validate({"entry_point": "a:b"}) == {
        "tasks": ["Write some tasks here or give the path of a JSONL file."]
    }
    assert "entry_point" in spec.validate({"tasks": tasks, "entry_point": "not a path"})
    with pytest.raises(ValueError, match="cannot be loaded"):
        spec.build({"tasks": tasks, "entry_point": "tests.trainers.envs.agents:no_such_agent"})


def test_tasks_come_inline_or_from_a_jsonl_file_with_their_own_fields(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "a", "prompt": "Fix the bug", "repo": "org/app"}\n{"prompt": "Add a test"}\n')
    env = agent_env(
        entry_point="tests.trainers.envs.agents:calculator_agent",
        tasks=[],
        path=str(path),
        eval_fraction=0.01,
    )

    tasks = env.tasks("train", 4, seed=0)

    assert {t.prompt for t in tasks} == {"Fix the bug", "Add a test"} and len(tasks) == 4
    from trainers.envs.agent import task_payload

    fix = next(t for t in tasks if t.id == "a")
    assert task_payload(fix) == {"id": "a", "prompt": "Fix the bug", "answer": None, "repo": "org/app"}


# ---- with the real model and the trainer ---------------------------------------------------------


@pytest.mark.slow
def test_grpo_trains_the_real_model_through_an_unchanged_agent(policy_copy, tmp_path):
    from trainers.recipes.grpo import train
    from trainers.sdk.events import MemorySink

    model, tokenizer = policy_copy
    config = {
        "preset": "grpo",
        "environment": {
            "kind": "agent",
            "config": {
                "entry_point": "tests.trainers.envs.agents:flaky_agent",
                "tasks": [
                    {"id": "sum", "prompt": "What is 31 + 45?", "answer": 76},
                    {"id": "bad", "prompt": "What is 12 * 3?", "answer": 36, "crash": True},
                ],
                "eval_fraction": 0.01,
                "timeout_s": 1200,  # generous: busy test machines are slow
            },
        },
        "rubric": {
            "aggregation": "weighted_sum",
            "criteria": [
                {"name": "agent", "kind": "env_reward", "weight": 1.0, "params": {}},
                {"name": "short", "kind": "length", "weight": 0.1, "params": {"max_len": 40}},
            ],
        },
        "max_steps": 2,
        "group_size": 2,
        "prompts_per_step": 2,
        "max_new_tokens": 16,
        "max_turns": 3,
        "eval_tasks": 0,
        "checkpoint_every": 0,
        "learning_rate": 1e-5,
        "seed": 3,
    }
    sink = MemorySink()

    result = train(config, sink=sink, model=model, tokenizer=tokenizer)

    assert result.status == "SUCCEEDED" and result.step == 2
    merged: dict[int, list] = {}  # the trainer sends one event per group
    for event in sink.of_type("trajectories"):
        merged.setdefault(event["step"], []).extend(event["items"])
    steps = [{"step": step, "items": items} for step, items in sorted(merged.items())]
    metrics = [e["values"] for e in sink.events if e["type"] == "metrics"]
    assert len(steps) == 2 and all(len(e["items"]) == 4 for e in steps)
    items = [i for e in steps for i in e["items"]]
    assert {i["status"] for i in items if i["task_id"] == "bad"} == {"error"}  # the crash, every time…
    assert all(
        i["status"] in ("ok", "truncated") for i in items if i["task_id"] == "sum"
    )  # …and the rest ran
    assert all(i["turns"][-1]["role"] == "assistant" and i["completion_tokens"] > 0 for i in items)
    assert {c["name"] for c in items[0]["components"]} == {"agent", "short"}  # the rubric scored them
    assert [m["policy_version"] for m in metrics] == [1.0, 2.0] and all(
        m["error_fraction"] == 0.5 for m in metrics
    )
    assert all("loss" in m for m in metrics)

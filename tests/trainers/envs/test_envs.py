"""Built-in environments: deterministic tasks, disjoint splits, permissions, scripted episodes."""

import json
import re

import pytest

from trainers.envs.base import run_episode
from trainers.envs.countdown import check_countdown
from trainers.envs.from_dataset import DatasetError
from trainers.envs.safe_math import ExpressionError, evaluate, format_number
from trainers.registry import environment_kind
from trainers.rollout.toolcalls import format_tool_call, is_error_observation
from trainers.rubrics import score_trajectory
from trainers.types import ToolCall


def build(kind, **config):
    return environment_kind(kind).build(config)


def call(name, **arguments):
    return format_tool_call(ToolCall(name, arguments))


def since_task(messages, task):
    """The messages of the episode proper, after the few-shot example."""
    start = max(i for i, m in enumerate(messages) if m["role"] == "user" and m["content"] == task.prompt)
    return messages[start:]


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "tasks.jsonl"
    rows = [{"prompt": f"What is {i} times 3?", "answer": i * 3} for i in range(60)]
    rows.append({"prompt": "Capital of France?", "answer": "Paris", "id": "capital"})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def all_envs(dataset_path):
    return {
        "arithmetic_calculator": build("arithmetic_calculator"),
        "countdown": build("countdown"),
        "frozen_lake": build("frozen_lake"),
        "python_tool": build("python_tool"),
        "from_dataset": build("from_dataset", path=str(dataset_path), tools=["calculator"], match="numeric"),
    }


# ---- tasks ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind", ["arithmetic_calculator", "countdown", "frozen_lake", "python_tool", "from_dataset"]
)
def test_tasks_are_deterministic_and_splits_disjoint(kind, dataset):
    env = all_envs(dataset)[kind]
    again = all_envs(dataset)[kind]
    n_eval = 5
    train, eval_ = env.tasks("train", 40, seed=3), env.tasks("eval", n_eval, seed=3)
    assert [t.id for t in train] == [t.id for t in again.tasks("train", 40, seed=3)]
    assert [(t.prompt, t.answer) for t in eval_] == [
        (t.prompt, t.answer) for t in again.tasks("eval", n_eval, seed=3)
    ]
    assert len(train) == 40 and len(eval_) == n_eval
    assert {t.prompt for t in train}.isdisjoint({t.prompt for t in eval_})
    # other seeds give other train lists but never cross into eval
    other = env.tasks("train", 40, seed=4)
    assert [t.id for t in other] != [t.id for t in train]
    assert {t.prompt for t in other}.isdisjoint({t.prompt for t in env.tasks("eval", n_eval, seed=9)})
    with pytest.raises(ValueError):
        env.tasks("test", 1, seed=0)


def test_the_arithmetic_curriculum_goes_from_easy_to_hard():
    env = build("arithmetic_calculator", min_digits=1, max_digits=3, max_operands=3)
    tasks = env.tasks("train", 50, seed=0)
    first, last = tasks[0].meta["expression"], tasks[-1].meta["expression"]
    assert re.fullmatch(r"\d \+ \d", first)
    assert len(re.findall(r"\d+", last)) == 3 and all(len(n) == 3 for n in re.findall(r"\d+", last))
    difficulties = [t.meta["difficulty"] for t in tasks]
    assert difficulties == sorted(difficulties)
    assert all(t.answer == evaluate(t.meta["expression"]) for t in tasks)


def test_division_tasks_have_whole_answers():
    env = build("arithmetic_calculator", operations=["/"], curriculum=False)
    for task in env.tasks("train", 30, seed=1):
        assert "/" in task.meta["expression"] and isinstance(task.answer, int)


def test_every_countdown_task_is_solvable():
    env = build("countdown", num_numbers=4)
    for task in env.tasks("train", 30, seed=0):
        assert check_countdown(task.meta["solution"], task.meta["numbers"], task.meta["target"]).correct


# ---- the safe evaluator -------------------------------------------------------------------------


def test_the_calculator_evaluates_safely():
    assert evaluate("12 * (3 + 4)") == 84
    assert format_number(evaluate("7 / 2")) == "3.5"
    assert format_number(evaluate("2 ^ 10")) == "1024"
    assert format_number(evaluate("1/3")) == "0.3333333333"
    for bad in (
        "__import__('os').system('ls')",
        "(1).__class__",
        "x + 1",
        "9 ** 9 ** 9",
        "1 / 0",
        "10 ** 40",
        "[1, 2]",
        "",
        "1 +",
    ):
        with pytest.raises(ExpressionError):
            evaluate(bad)
    with pytest.raises(ExpressionError, match="too long"):
        evaluate("1+" * 200 + "1", max_chars=100)


def test_countdown_checker():
    assert check_countdown("(7 - 3) * 5", [3, 5, 7], 20).correct
    reuse = check_countdown("5 * 5 - 5", [5, 5], 20)
    assert not reuse.valid and "not available" in reuse.message
    wrong = check_countdown("3 + 5", [3, 5, 7], 20)
    assert wrong.valid and not wrong.correct
    assert not check_countdown("2 ** 3", [2, 3], 8).valid
    assert not check_countdown("open('x')", [1], 1).valid


# ---- scripted episodes ---------------------------------------------------------------------------


def arithmetic_solver(messages):
    last = messages[-1]["content"]
    if messages[-1]["role"] == "user":
        return call("calculator", expression=re.search(r"What is (.*?)\?", last).group(1))
    return f"The calculator says {last.removeprefix('Result: ')}, so <answer>{last.removeprefix('Result: ')}</answer>"


def test_arithmetic_correct_and_wrong_policies():
    env = build("arithmetic_calculator")
    task = env.tasks("train", 20, seed=0)[10]
    good = run_episode(env, task, 0, arithmetic_solver)
    assert [t.role for t in good.turns] == ["system", "user", "assistant", "tool", "assistant"]
    assert good.turns[2].tool_name == "calculator" and good.turns[3].tool_result == f"Result: {task.answer}"
    assert good.status == "ok" and good.env_reward == pytest.approx(1.2)  # correct + tool call + answer tag
    assert good.info["final_state"]["tool_calls"] == 1 and good.info["last_step"]["correct"] is True

    wrong = run_episode(env, task, 0, lambda m: f"<answer>{task.answer + 1}</answer>")
    assert wrong.status == "ok" and wrong.env_reward == pytest.approx(0.1)  # only the tag's partial credit
    untagged = run_episode(env, task, 0, lambda m: f"It is {task.answer}.")
    assert untagged.env_reward == pytest.approx(1.0)
    strict = build("arithmetic_calculator", require_answer_tag=True)
    assert run_episode(strict, task, 0, lambda m: f"It is {task.answer}.").env_reward == 0.0

    spec = {
        "aggregation": "weighted_sum",
        "criteria": [
            {"name": "correct", "kind": "numeric_match", "weight": 1.0, "params": {}},
            {
                "name": "tools",
                "kind": "tool_calls",
                "weight": 0.5,
                "params": {"min_calls": 1, "max_calls": 2},
            },
        ],
    }
    assert score_trajectory(spec, good).total == 1.5
    assert score_trajectory(spec, wrong).total == 0.0


def test_tool_permissions_are_enforced_in_step():
    env = build("arithmetic_calculator", max_tool_calls=1, max_expression_chars=10, max_turns=6)
    task = env.tasks("eval", 1, seed=0)[0]
    env.reset(task, 0)
    too_long = env.step(call("calculator", expression="1+1+1+1+1+1+1"))
    assert is_error_observation(too_long.observation) and "too long" in too_long.observation
    assert too_long.info["tool_error"] and not too_long.done
    unknown = env.step(call("python", code="print(1)"))
    assert "Unknown tool 'python'" in unknown.observation
    assert env.step(call("calculator", expression="2*3")).observation == "Result: 6"
    over = env.step(call("calculator", expression="2*3"))
    assert "used all 1 tool calls" in over.observation
    bad_json = env.step("<tool_call>{not json}</tool_call>")
    assert "not valid JSON" in bad_json.observation
    assert env.state()["tool_calls"] == 1 and env.state()["failed_tool_calls"] == 4
    last = env.step(call("calculator", expression="1"))
    assert last.done and last.info["truncated"]
    with pytest.raises(RuntimeError):
        env.step("<answer>1</answer>")


def test_the_worked_example_is_shown_to_the_policy_but_not_recorded():
    env = build("arithmetic_calculator")
    task = env.tasks("train", 1, seed=0)[0]
    seen = []
    trajectory = run_episode(
        env, task, 0, lambda m: seen.append(list(m)) or "<answer>0</answer>", tool_message_role="user"
    )
    roles = [m["role"] for m in seen[0]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert seen[0][2]["content"].startswith("<tool_call>") and seen[0][-1]["content"] == task.prompt
    assert [t.role for t in trajectory.turns] == ["system", "user", "assistant"]
    assert trajectory.tool_calls == 0 and len(trajectory.info["prompt_examples"]) == 4
    plain = build("arithmetic_calculator", few_shot=False)
    assert plain.example_messages() == [] and "Example:" in plain.system_prompt()
    for kind in ("countdown", "frozen_lake", "python_tool"):
        messages = build(kind).example_messages()
        assert messages and messages[0]["role"] == "user" and messages[-1]["role"] in ("assistant", "tool"), (
            kind
        )


def test_a_policy_that_never_answers_is_truncated():
    env = build("arithmetic_calculator", max_turns=3)
    task = env.tasks("train", 1, seed=0)[0]
    trajectory = run_episode(env, task, 0, lambda m: call("calculator", expression="1+1"))
    assert trajectory.status == "truncated"
    assert [t.role for t in trajectory.turns].count("assistant") == 3


def test_countdown_correct_and_wrong_policies():
    env = build("countdown")
    task = env.tasks("train", 5, seed=0)[2]
    good = run_episode(env, task, 0, lambda m: f"<answer>{task.meta['solution']}</answer>")
    assert good.env_reward == 1.0 and good.info["last_step"]["correct"]
    numbers = task.meta["numbers"]
    wrong = run_episode(env, task, 0, lambda m: f"<answer>{numbers[0]} * {numbers[0]} * 1000</answer>")
    assert wrong.env_reward == 0.0 and not wrong.info["last_step"]["valid"]
    near = run_episode(env, task, 0, lambda m: f"<answer>{numbers[0]}</answer>")
    assert near.env_reward == pytest.approx(0.1) or numbers[0] == task.answer
    checked = run_episode(
        env,
        task,
        0,
        lambda m: (
            call("calculator", expression=task.meta["solution"])
            if m[-1]["role"] == "user"
            else f"<answer>{task.meta['solution']}</answer>"
        ),
    )
    assert checked.env_reward == 1.0 and checked.tool_calls == 1


def test_frozen_lake_tool_and_text_interfaces():
    env = build("frozen_lake")
    task = env.tasks("train", 3, seed=0)[0]
    path = task.answer.split()

    def walker(messages):
        return call("move", direction=path[sum(m["role"] == "assistant" for m in since_task(messages, task))])

    good = run_episode(env, task, 0, walker)
    assert good.env_reward == 1.0 and good.info["final_state"]["outcome"] == "goal"
    assert good.info["final_state"]["grid"][-1].endswith("P")
    assert good.tool_calls == len(path)

    stays = run_episode(env, task, 0, lambda m: call("move", direction="up"))  # walks into the top edge
    assert stays.status == "truncated" and stays.env_reward == 0.0
    assert "edge" in stays.turns[3].text

    text_env = build("frozen_lake", interface="text")
    assert text_env.tools == []
    solved = run_episode(text_env, task, 0, lambda m: f"<answer>{' '.join(path)}</answer>")
    assert solved.env_reward == 1.0 and len(solved.turns) == 4
    lost = run_episode(text_env, task, 0, lambda m: "I would rather not move.")
    assert lost.status == "truncated" and "No moves found" in lost.turns[3].text


def test_frozen_lake_falls_into_holes_and_gives_progress_credit():
    env = build("frozen_lake", size=5, hole_fraction=0.3, reward_progress=0.5, interface="text")
    tasks = env.tasks("train", 20, seed=0)
    task = next(t for t in tasks if t.meta["grid"][1][0] == "H")
    fell = run_episode(env, task, 0, lambda m: "<answer>down</answer>")
    assert fell.info["final_state"]["outcome"] == "hole" and fell.env_reward == 0.0
    first_half = task.answer.split()[: len(task.answer.split()) // 2]
    env_short = build(
        "frozen_lake", size=5, hole_fraction=0.3, reward_progress=0.5, interface="text", max_turns=1
    )
    partial = run_episode(env_short, task, 0, lambda m: f"<answer>{' '.join(first_half)}</answer>")
    assert 0 < partial.env_reward < 0.5


def test_python_tool_correct_and_wrong_policies():
    env = build("python_tool", task_types=["sum_of_squares"])
    task = env.tasks("train", 1, seed=0)[0]
    n = int(re.search(r"to (\d+)", task.prompt).group(1))

    def coder(messages):
        if messages[-1]["role"] == "user":
            return call("python", code=f"print(sum(i * i for i in range(1, {n} + 1)))")
        return f"<answer>{messages[-1]['content'].removeprefix('Result: ')}</answer>"

    good = run_episode(env, task, 0, coder)
    assert good.turns[3].tool_result == f"Result: {task.answer}"
    assert good.env_reward == pytest.approx(1.1)

    def crasher(messages):
        if messages[-1]["role"] == "user":
            return call("python", code="import socket")
        return "<answer>0</answer>"

    bad = run_episode(env, task, 0, crasher)
    assert is_error_observation(bad.turns[3].tool_result) and "sandbox" in bad.turns[3].tool_result
    assert bad.env_reward == 0.0


def test_from_dataset_episodes_and_per_line_tools(dataset, tmp_path):
    env = build("from_dataset", path=str(dataset), tools=["calculator"], match="numeric")
    task = next(t for t in env.all_tasks if t.id != "capital")
    x = int(re.search(r"What is (\d+)", task.prompt).group(1))
    good = run_episode(
        env,
        task,
        0,
        lambda m: (
            call("calculator", expression=f"{x}*3")
            if m[-1]["role"] == "user"
            else f"<answer>{x * 3}</answer>"
        ),
    )
    assert good.env_reward == 1.0 and "calculator" in good.turns[0].text
    assert run_episode(env, task, 0, lambda m: "<answer>-1</answer>").env_reward == 0.0

    narrowed = tmp_path / "narrow.jsonl"
    narrowed.write_text(json.dumps({"prompt": "Say hi", "answer": "hi", "tools": []}) + "\n")
    text_env = build("from_dataset", path=str(narrowed), tools=["calculator"], eval_fraction=0.01)
    only = text_env.tasks("train", 1, seed=0)[0]
    text_env.reset(only, 0)
    assert text_env.tools == [] and "<answer>" in text_env.system_prompt()
    assert run_episode(text_env, only, 0, lambda m: "<answer> HI </answer>").env_reward == 1.0


def test_from_dataset_reports_bad_files_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="Dataset file not found"):
        build("from_dataset", path=str(tmp_path / "missing.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"prompt": "ok", "answer": 1}\nnot json\n{"answer": 2}\n\n["list"]\n{"prompt": "x", "answer": 1, "tools": ["shell"]}\n'
    )
    with pytest.raises(DatasetError) as exc:
        build("from_dataset", path=str(bad))
    message = str(exc.value)
    assert "4 bad line(s)" in message
    for fragment in (
        "line 2: not valid JSON",
        'line 3: missing "prompt"',
        "line 5: must be a JSON object",
        'line 6: "tools"',
    ):
        assert fragment in message


def test_a_long_runs_tasks_repeat_quickly_once_the_task_space_is_used_up():
    """Issue 39 (bench/soak.py): a run of 100k steps drew every step's task up front, searching 400
    candidates for a fresh one each time once the space was used up — its setup was busy for minutes, deaf
    to Cancel. After the first task that finds none, later ones look at a few candidates only."""
    from trainers.envs.base import EXHAUSTED_SPACE_ATTEMPTS, Task, draw_tasks

    calls = [0]

    def make(rng, index):
        calls[0] += 1
        key = str(rng.randint(1, 20))  # twenty tasks in all
        return key, Task(id=key, prompt=f"task {key}", answer=key, meta={})

    tasks = draw_tasks(make, kind="tiny", split="train", n=5000, seed=0, eval_fraction=0.0)
    assert len(tasks) == 5000 and len({t.id for t in tasks}) == 20  # every task once before repeats
    assert calls[0] < 5000 * EXHAUSTED_SPACE_ATTEMPTS + 400 * 25  # not 400 candidates a task

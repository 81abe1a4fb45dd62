"""The curriculum's LLM generator: a model rewrites a failed task into variants with their answers, kept only
when they are new and the environment's own verifier grades the stated answer; everything else is refused
by reason, counted in the task_pool event, and never fails the run. With a real OpenAI-compatible server
process on 127.0.0.1 and with the bundled SmolLM2 through the project's own backend."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from trainers.config import resolve_run_config, validate_run_config
from trainers.envs.from_dataset import DatasetEnv
from trainers.learn.curriculum import TaskPool, generator_of
from trainers.learn.curriculum_llm import (
    REFUSALS,
    LLMVariants,
    arithmetic_disagrees,
    parse_variants,
    variant_prompt,
)
from trainers.run_config import RunConfig
from trainers.types import Task

SUMS = [
    {"prompt": f"What is {a} + {b}?", "answer": a + b} for a, b in [(37, 48), (29, 64), (55, 38), (71, 19)]
]
SUMS += [
    {"prompt": f"What is {a} + {b}?", "answer": a + b} for a, b in [(46, 27), (83, 18), (64, 59), (92, 35)]
]


def sums_env(match: str = "numeric") -> DatasetEnv:
    return DatasetEnv(tasks=SUMS, match=match, max_turns=1)


def failed() -> Task:
    return Task("dataset-hard", "What is 37 + 48?", 85, {"line": 1})


def speaking(*answers: str):
    """A model that answers each prompt with the next of `answers` (the rules under test read its text)."""
    queue = list(answers)
    calls: list[int] = []

    def ask(prompts: list[str]) -> list[str]:
        calls.append(len(prompts))
        return [queue.pop(0) for _ in prompts]

    ask.calls = calls  # type: ignore[attr-defined]
    return ask


def group(task, wins: list[bool]):
    return [
        SimpleNamespace(
            task=task, reward=float(w), trajectory=SimpleNamespace(info={"correct": w}, env_reward=float(w))
        )
        for w in wins
    ]


# ---- the format ---------------------------------------------------------------------------------------


def test_the_format_is_read_through_a_chatty_models_numbering_and_bold():
    pairs, refused = parse_variants(
        "Sure, here you go!\n"
        "1. **Task 1:** What is 36 + 48?\n   **Answer:** 84\n"
        "- TASK: A farmer has 12 sheep\nand buys 5 more. How many now?\nANSWER: 17\n"
        "TASK: What is 2 + 2?\n"  # no answer before the next task
        "TASK: What is 3 + 3?\nANSWER: 6\n"
        "Hope this helps. ANSWER: 9\n"
    )
    assert pairs == [
        ("What is 36 + 48?", "84"),
        ("A farmer has 12 sheep and buys 5 more. How many now?", "17"),
        ("What is 3 + 3?", "6"),
    ]
    assert refused == ["no_answer"]
    assert parse_variants("I cannot help with that.") == ([], ["no_variant"])
    assert parse_variants("TASK: What is 1 + 1?") == ([], ["no_answer"])


def test_the_prompt_shows_the_failed_task_its_answer_and_the_format():
    prompt = variant_prompt(failed(), 3)
    assert "What is 37 + 48?" in prompt and "Its answer: 85" in prompt
    assert "Write 3 new tasks" in prompt and prompt.endswith("ANSWER: <its correct final answer alone>")


def test_arithmetic_the_task_states_must_give_the_stated_answer():
    assert arithmetic_disagrees("What is 12 + 7?", "20")
    assert not arithmetic_disagrees("What is 12 + 7?", "19")
    assert not arithmetic_disagrees("Calculate (4 + 5) × 2.", "18")
    # nothing to check: no expression, an equation, a word answer
    assert not arithmetic_disagrees("A 3-digit number ends in 7; name one.", "107")
    assert not arithmetic_disagrees("Solve 2x + 3 = 7 for x.", "2")
    assert not arithmetic_disagrees("What is 12 + 7?", "nineteen")


# ---- the refusals -------------------------------------------------------------------------------------


def test_only_new_variants_the_verifier_grades_are_kept_and_each_refusal_is_counted():
    answer = (
        "TASK: What is 36 + 48?\nANSWER: 84\n"  # kept
        "TASK: What is 37 + 48?\nANSWER: 85\n"  # the failed task itself
        "TASK: What is 30 + 40?\nANSWER: seventy\n"  # the failed task's answer is a number
        "TASK: What is 20 + 48?\nANSWER: 69\n"  # its own sum says 68
        "TASK: <the new task, stated in full>\nANSWER: <its correct final answer alone>\n"
        "TASK: what is 36 + 48\nANSWER: 84\n"  # the first one again
        f"TASK: {SUMS[1]['prompt']}\nANSWER: {SUMS[1]['answer']}\n"  # a held-out task
        f"TASK: {'What is 1 + 1? ' * 200}\nANSWER: 2\n"
        "TASK: What is 10 + 11?\nANSWER:\n"
        "TASK: What is 11 + 12?\nANSWER: 23\n"  # kept
    )
    maker = LLMVariants(speaking(answer), sums_env, model="tutor", held_out=[SUMS[1]["prompt"]])
    made = maker(failed(), 5, 0, set())
    assert [(t.prompt, t.answer) for t in made] == [("What is 36 + 48?", 84), ("What is 11 + 12?", 23)]
    assert all(t.meta["generator"] == "llm:tutor" and t.meta["variant_of"] == "dataset-hard" for t in made)
    assert maker.take() == {
        "copy": 2,
        "not_a_number": 1,
        "wrong_answer": 1,
        "placeholder": 1,
        "held_out": 1,
        "too_long": 1,
        "empty": 1,
    }
    assert maker.take() == {}  # counted once
    assert set(maker.refused) <= set(REFUSALS)


def test_what_smollm2_wrote_for_reasoning_gym_sums_is_refused():
    """SmolLM2-135M's answers, verbatim, when asked for variants of failed basic_arithmetic tasks: the failed
    sum again with its answer in the task, an expression as the answer, a sentence as the answer."""
    from trainers.envs.reasoning_gym_env import ReasoningGymEnvironment

    gym = lambda: ReasoningGymEnvironment(dataset="basic_arithmetic", pool_size=20)  # noqa: E731
    entry = {"entry": {"metadata": {"source_dataset": "basic_arithmetic"}}}
    said = [
        (
            Task("a", "Calculate 8 - 0.", "8", entry),
            "TASK: \nThe new task is to calculate 8 - 0.\nIts answer is 8.\n\nANSWER: 8 - 0.",
        ),
        (
            Task("b", "Calculate 6 - 7.", "-1", entry),
            "TASK: \nThe new task is to calculate 6 - 7.\nIts answer is -1.\n\nANSWER: \nThe answer is -1.",
        ),
        (
            Task("c", "Calculate 10 + 6 - 6.", "10", entry),
            "TASK: 10 + 6 - 6 = 10\nANSWER: 10\n\nTASK: 10 + 6 - 6 = 10\nANSWER: 10",
        ),
        (Task("d", "Calculate 5 + 5.", "10", entry), "TASK: What is 4 + 5? The answer is 9.\nANSWER: 9"),
    ]
    maker = LLMVariants(speaking(*(answer for _, answer in said)), gym, model="smollm2-135m")
    assert [maker(task, 2, 0, set()) for task, _ in said] == [[], [], [], []]
    assert maker.take() == {"copy": 3, "empty": 1, "gives_answer": 1}
    # …and its arithmetic the rules read: a word answer to a sum, the failed sum restated
    maker = LLMVariants(speaking("TASK: Calculate 7 - 0.\nANSWER: seven"), gym, model="m")
    assert maker(Task("a", "Calculate 8 - 0.", "8"), 1, 0, set()) == []
    assert maker.take() == {"not_a_number": 1}


def test_a_variant_already_in_the_pool_is_a_copy_and_more_than_asked_is_not_counted():
    maker = LLMVariants(
        speaking("TASK: What is 36 + 48?\nANSWER: 84\nTASK: What is 35 + 48?\nANSWER: 83\nTASK: junk\n"),
        sums_env,
        model="tutor",
    )
    [first] = LLMVariants(speaking("TASK: What is 36 + 48?\nANSWER: 84"), sums_env, model="t")(
        failed(), 1, 0, set()
    )
    made = maker(failed(), 1, 0, {first.id})
    assert [t.prompt for t in made] == ["What is 35 + 48?"]
    assert maker.take() == {"copy": 1, "no_answer": 1}


def test_a_model_that_fails_costs_its_variants_not_the_run():
    def down(prompts: list[str]) -> list[str]:
        raise ConnectionError("the endpoint is down")

    said: list[tuple[str, str]] = []
    maker = LLMVariants(down, sums_env, model="tutor", log=lambda m, level: said.append((level, m)))
    assert maker(failed(), 2, 0, set()) == []
    assert maker.take() == {"model_error": 1}
    assert said == [("warning", "curriculum generator llm:tutor: ConnectionError: the endpoint is down")]


def test_an_exact_match_dataset_keeps_word_answers_and_reasoning_gym_gets_an_entry_of_its_own():
    capitals = lambda: DatasetEnv(tasks=[{"prompt": "Capital of France?", "answer": "Paris"}], match="exact")  # noqa: E731
    maker = LLMVariants(speaking("TASK: Capital of Italy?\nANSWER: Rome"), capitals, model="m")
    [rome] = maker(Task("c", "Capital of France?", "Paris"), 1, 0, set())
    assert rome.answer == "Rome"

    from trainers.envs.reasoning_gym_env import ReasoningGymEnvironment

    gym = lambda: ReasoningGymEnvironment(dataset="basic_arithmetic", pool_size=20)  # noqa: E731
    parent = gym().tasks("train", 1, 0)[0]
    maker = LLMVariants(
        speaking("TASK: Calculate 2 + 3.\nANSWER: 5\nTASK: Calculate 2 + 4.\nANSWER: 7"), gym, model="m"
    )
    [five] = maker(parent, 2, 0, set())
    assert five.meta["entry"]["question"] == "Calculate 2 + 3." and five.meta["entry"]["answer"] == "5"
    assert five.meta["dataset"] == "basic_arithmetic"
    assert maker.take() == {"wrong_answer": 1}  # reasoning-gym's scorer took "7"; the sum did not


def test_with_math_verify_in_the_rubric_it_must_read_the_answer():
    maker = LLMVariants(
        speaking("TASK: Half of 1?\nANSWER: \\frac{1}{2}\nTASK: Half of 3?\nANSWER: ???"),
        lambda: DatasetEnv(tasks=SUMS, match="contains"),
        model="m",
        math_verify=True,
    )
    made = maker(Task("h", "Half of 2?", "1"), 2, 0, set())
    assert [t.answer for t in made] == ["\\frac{1}{2}"]
    assert maker.take() == {"unverifiable": 1}


def test_an_environment_that_grades_no_answer_is_refused_at_setup():
    from trainers.envs.frozen_lake import FrozenLakeEnv

    with pytest.raises(ValueError, match="needs an environment that grades a task's stated answer"):
        LLMVariants(speaking(), FrozenLakeEnv, model="m")


# ---- the pool: lineage, the band, the event -------------------------------------------------------------


def llm_pool(answers: list[str], **knobs) -> TaskPool:
    config = RunConfig.build(
        resolve_run_config(
            "grpo", {"curriculum": "from_failures", "prompts_per_step": 2, "curriculum_variants": 2, **knobs}
        )
    )
    stream = iter(sums_env().tasks("train", 100, 0))
    maker = LLMVariants(speaking(*answers), sums_env, model="tutor")
    return TaskPool(config, base=lambda n: [next(stream) for _ in range(n)], variants=maker)


def test_llm_variants_keep_their_lineage_and_enter_the_frontier_only_through_the_band():
    p = llm_pool(
        [
            "TASK: What is 10 + 5?\nANSWER: 15\nTASK: What is 10 + 6?\nANSWER: 16\n",
            "I don't know.",
        ],
        curriculum_band_low=0.25,
        curriculum_band_high=0.75,
    )
    hard, hard2 = p.next_tasks(2)
    p.observe(1, [group(hard, [False] * 4), group(hard2, [False] * 4)])
    assert p.variants.ask.calls == [2]  # the step's two failures in one batch
    born = [e for e in p.entries.values() if e.parent]
    assert [(e.parent, e.generator, e.born, e.state) for e in born] == [
        (hard.id, "llm:tutor", 1, "new"),
        (hard.id, "llm:tutor", 1, "new"),
    ]
    report = p.report(1)
    assert (report["generator"], report["generated"], report["refused"]) == (
        "llm:tutor",
        2,
        {"no_variant": 1},
    )
    a, b = (e.task for e in born)
    assert p.next_tasks(2) == [a, b]  # tried next…
    p.observe(2, [group(a, [True, False, True, False]), group(b, [True] * 4)])
    assert p.entries[a.id].state == "frontier" and p.frontier == [a.id]  # …kept while in the band
    assert p.entries[b.id].state == "mastered"
    row = next(r for r in p.report(2)["entries"] if r["id"] == a.id)
    assert (row["parent"], row["generator"], row["born"], row["rate"]) == (hard.id, "llm:tutor", 1, 0.5)
    assert p.report(2)["refused"] == {} and p.report(2)["generated"] == 0


def test_the_batch_asks_only_about_the_failures_the_frontier_has_room_for():
    p = llm_pool(
        ["I don't know."] * 3, prompts_per_step=1, curriculum_variants=2
    )  # room: 4, two failures' worth
    tasks = [p.next_tasks(1)[0] for _ in range(3)]
    p.observe(1, [group(t, [False] * 2) for t in tasks])
    assert p.variants.ask.calls == [2] and p.report(1)["refused"] == {"no_variant": 2}


def test_the_knobs_choose_the_generator_and_refuse_what_cannot_run():
    def errors(**knobs):
        return validate_run_config(resolve_run_config("grpo", {"curriculum": "from_failures", **knobs}))

    assert generator_of({"curriculum_generator": "auto"}) == "environment"
    assert (
        generator_of({"curriculum_generator": "auto", "curriculum_generator_model": "smollm2-135m"}) == "llm"
    )
    assert (
        generator_of({"curriculum_generator": "environment", "curriculum_generator_model": "x"})
        == "environment"
    )
    assert "curriculum_generator_model" in errors(curriculum_generator="llm")
    assert errors(curriculum_generator_base_url="http://127.0.0.1:1/v1", curriculum_generator_model="policy")
    assert "curriculum_generator" in errors(curriculum_generator="gpt")
    assert errors(curriculum_generator="llm", curriculum_generator_model="smollm2-135m") == {}


# ---- real models ----------------------------------------------------------------------------------------


@pytest.fixture()
def tutor():
    """The OpenAI-compatible tutor server (tutor_server.py) as its own process: its base URL."""
    server = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("tutor_server.py"))], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.mark.slow
def test_a_run_grows_its_pool_from_an_endpoint_models_variants(tiny, tutor, tmp_path):
    """A GRPO run on a JSONL-style task list (no generator of its own) with a tiny, always failing model:
    step 1's failures go to the tutor endpoint, its good variants are step 2's tasks with their lineage,
    its wrong answer and its task without an answer are refused and counted in the task_pool events."""
    from trainers.learn.trainer import train

    from trainers.sdk import wire_check
    from trainers.sdk.events import MemorySink

    model, tokenizer = tiny
    sink = MemorySink()
    dataset = tmp_path / "sums.jsonl"
    dataset.write_text("".join(json.dumps(row) + "\n" for row in SUMS))
    config = {
        "environment": {"kind": "from_dataset", "config": {"path": str(dataset), "match": "numeric"}},
        "curriculum": "from_failures",
        "curriculum_generator_model": "tutor",  # auto: the LLM, since a model is named
        "curriculum_generator_base_url": tutor,
        "max_steps": 2,
        "group_size": 2,
        "prompts_per_step": 2,
        "max_new_tokens": 4,
        "max_turns": 1,
        "eval_tasks": 0,
        "checkpoint_every": 0,
    }
    assert train(config, sink=sink, model=model, tokenizer=tokenizer).status == "SUCCEEDED"
    assert wire_check.check_batch({"events": sink.events}) == {}
    logs = " ".join(e["message"] for e in sink.events if e["type"] == "log")
    assert f"variants written by tutor at {tutor}" in logs
    pools = [e for e in sink.events if e["type"] == "task_pool"]
    assert [p["step"] for p in pools] == [1, 2]
    first = pools[0]
    assert first["generator"] == "llm:tutor" and first["generated"] == 2
    assert first["refused"] == {"wrong_answer": 2, "no_answer": 2}
    failed_ids = {e["id"] for e in first["entries"] if e["state"] == "failed"}
    born = [e for e in first["entries"] if e["parent"]]
    assert len(born) == 2 and {e["parent"] for e in born} == failed_ids
    assert all(e["generator"] == "llm:tutor" and e["born"] == 1 and e["id"].startswith("llm-") for e in born)
    step2 = {
        i["task_id"]
        for e in sink.events
        if e["type"] == "trajectories" and e["step"] == 2
        for i in e["items"]
    }
    assert step2 == {e["id"] for e in born}
    # failed again: below the band, retired — and they seeded the next generation through the tutor
    second = {e["id"]: e for e in pools[1]["entries"]}
    assert all(second[i]["state"] == "retired" for i in step2)
    assert any(e["parent"] in step2 and e["born"] == 2 for e in second.values())


@pytest.mark.slow
def test_the_bundled_model_through_the_local_backend_either_writes_graded_variants_or_is_refused(smollm):
    """SmolLM2-135M, through the same resolver and backend a run uses: whatever it writes, what is kept is
    graded correct by the environment, and everything else is a refusal with a reason — no exception."""
    from trainers.rollout.backends import make_backend
    from trainers.rubrics.judge_models import JudgePool, generation_model

    model, tokenizer = smollm
    pool = JudgePool(
        policy_model="smollm2-135m",
        load_backend=lambda name: make_backend("transformers", model=model, tokenizer=tokenizer),
    )
    try:
        ask = generation_model(pool, model="smollm2-135m", max_tokens=48)
        maker = LLMVariants(ask, sums_env, model="smollm2-135m")
        made = maker(failed(), 2, 0, set())
        refused = maker.take()
    finally:
        pool.close()
    assert len(made) + sum(refused.values()) >= 1 and set(refused) <= set(REFUSALS)
    env = sums_env()
    for task in made:
        env.reset(task, 0)
        assert env.grade(f"<answer>{task.answer}</answer>")[1]["correct"]
        assert task.meta["generator"] == "llm:smollm2-135m"

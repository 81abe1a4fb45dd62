"""verifiers 0.4 (verifiers.v1: Taskset, Harness, Trace) environments, served from their own venv.

The environment is tests/fixtures/vf04_echo, written against 0.4's own API, installed in .venv-vf04
(`make venv-vf04`; `make test` builds it). The trainer talks to it through the bridge
(trainers/envs/verifiers_v1_bridge.py); verifiers runs each episode with its own `null` harness (its
chat program, synced by uv) and interception proxy, with the model endpoint at the run's gateway.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trainers.registry import environment_kind
from trainers.rubrics import score_trajectory

ROOT = Path(__file__).resolve().parents[3]
VF04_PYTHON = ROOT / ".venv-vf04" / "bin" / "python"


@pytest.fixture(scope="module")
def vf04_python() -> str:
    if not VF04_PYTHON.exists():
        pytest.skip("the verifiers 0.4 venv is missing: run `make venv-vf04` (make test does)")
    return str(VF04_PYTHON)


def test_the_taskset_gives_the_tasks_and_its_rewards_become_criteria(vf04_python):
    env = environment_kind("verifiers").build({"environment": "vf04-echo", "python": vf04_python})

    assert env.bridge.version.startswith("0.4")
    train, evals = env.tasks("train", 12, seed=0), env.tasks("eval", 2, seed=0)
    assert all(t.prompt.startswith("Say the word ") for t in train + evals)
    assert {t.id for t in train}.isdisjoint({t.id for t in evals})
    assert env.preview_extra()["rubric_criteria"] == [
        {"name": "brief", "kind": "verifiers_rubric", "weight": 0.5, "params": {"function": "brief"}},
        {
            "name": "said_the_word",
            "kind": "verifiers_rubric",
            "weight": 1.0,
            "params": {"function": "said_the_word"},
        },
    ]


def test_an_endless_taskset_with_an_env_of_its_own_serves_its_first_max_tasks(vf04_python):
    """The shape of the tasksets verifiers ships (TextArena's): INFINITE, and an Env whose seat is `player`."""
    env = environment_kind("verifiers").build(
        {"environment": "vf04-echo-endless", "python": vf04_python, "max_tasks": 12}
    )

    assert len(env.bridge.tasks) == 12 and env.bridge.tasks[11]["id"] == "endless-11"
    assert set(env.bridge.rewards) == {"said_the_word", "brief"}


def test_a_config_without_a_venv_is_refused_in_words(monkeypatch):
    monkeypatch.delenv("ROLLOUT_STUDIO_VF04_PYTHON", raising=False)
    with pytest.raises(ValueError, match="api: v1 needs the Python of a venv with verifiers 0.4"):
        environment_kind("verifiers").build({"environment": "vf04-echo", "api": "v1"})
    with pytest.raises(ValueError, match="is not an interpreter"):
        environment_kind("verifiers").build({"environment": "vf04-echo", "python": "/nowhere/python"})


def test_an_unknown_taskset_is_its_loaders_error(vf04_python):
    with pytest.raises(ValueError, match="taskset 'vf04-nothing' not found"):
        environment_kind("verifiers").build({"environment": "vf04-nothing", "python": vf04_python})


@pytest.mark.slow
def test_grpo_trains_the_real_model_through_the_taskset_its_harness_and_its_rewards(policy_copy):
    from trainers.recipes.grpo import train
    from trainers.sdk.events import MemorySink

    model, tokenizer = policy_copy
    criteria = [
        {
            "name": "said_the_word",
            "kind": "verifiers_rubric",
            "weight": 1.0,
            "params": {"function": "said_the_word"},
        },
        {"name": "brief", "kind": "verifiers_rubric", "weight": 0.5, "params": {"function": "brief"}},
    ]
    config = {
        "preset": "grpo",
        "environment": {
            "kind": "verifiers",
            "config": {"environment": "vf04-echo", "python": str(VF04_PYTHON), "step_timeout_s": 600},
        },
        "rubric": {"aggregation": "weighted_sum", "criteria": criteria},
        "max_steps": 1,
        "group_size": 2,
        "prompts_per_step": 2,
        "max_new_tokens": 12,
        "max_turns": 2,
        "eval_tasks": 0,
        "checkpoint_every": 0,
        "learning_rate": 1e-5,
        "seed": 5,
    }
    if not VF04_PYTHON.exists():
        pytest.skip("the verifiers 0.4 venv is missing: run `make venv-vf04` (make test does)")
    sink = MemorySink()

    result = train(config, sink=sink, model=model, tokenizer=tokenizer)

    assert result.status == "SUCCEEDED" and result.step == 1
    items = [i for e in sink.events if e["type"] == "trajectories" for i in e["items"]]
    assert len(items) == 4 and all(i["status"] in ("ok", "truncated") for i in items)
    assert all(i["turns"][0]["role"] == "system" and "Say the word" in i["turns"][1]["text"] for i in items)
    assert all(i["turns"][-1]["role"] == "assistant" and i["completion_tokens"] > 0 for i in items)
    for item in items:  # the rubric's values are the taskset's own @vf.reward scores, weighted as there
        scores = item["env_state"]["info"]["verifiers"] if "info" in item["env_state"] else None
        components = {c["name"]: c for c in item["components"]}
        assert set(components) == {"said_the_word", "brief"}
        assert components["brief"]["weighted"] == pytest.approx(0.5 * components["brief"]["raw"])
        word = item["turns"][1]["text"].removeprefix("Say the word ").rstrip(".")
        said = word in item["turns"][-1]["text"].lower()
        assert components["said_the_word"]["raw"] == (1.0 if said else 0.0), scores
    metrics = [e["values"] for e in sink.events if e["type"] == "metrics"]
    assert [m["policy_version"] for m in metrics] == [1.0] and all("loss" in m for m in metrics)


TAUGHT_LAYERS, TAUGHT_LR = 8, 1e-4


def _learn_to_call_spell(model, tokenizer, words: list[str], steps: int = 6) -> None:
    """A few supervised steps on one worked exchange (the call, then the answer from its result), in the
    studio format the gateway shows the bundled model: a 135M model never chooses a tool on its own, so it
    is taught this one; what it then samples is its own output, parsed like any model's."""
    import torch

    from trainers.rollout.toolcalls import ToolExample, format_tools_prompt
    from trainers.rollout.toolformats import STUDIO
    from trainers.types import ToolCall, ToolSpec

    spell = ToolSpec(
        "spell",
        "Spell a word letter by letter, in capitals joined by dashes.",
        {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
    )
    system = {
        "role": "system",
        "content": f"Spell words with the tool spell.\n\n{format_tools_prompt([spell])}",
    }
    # One sequence per exchange, both assistant messages taught in it (the call, then the answer): the
    # same tokens learnt as from one example per message, in half the rows (each padded to the widest).
    examples = []
    for word in words:
        spelled = "-".join(word.upper())
        exchange = STUDIO.example_messages(
            ToolExample(f"Spell the word {word}.", ToolCall("spell", {"word": word}), spelled, spelled)
        )
        messages = [system, *exchange]
        ids, taught, rendered = [], [], ""
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            prefix = tokenizer.apply_chat_template(messages[:i], tokenize=False, add_generation_prompt=True)
            whole = tokenizer.apply_chat_template(messages[: i + 1], tokenize=False)
            assert prefix.startswith(rendered), "the chat template re-rendered an earlier message"
            context_ids = tokenizer(prefix[len(rendered) :], add_special_tokens=False)["input_ids"]
            target_ids = tokenizer(whole[len(prefix) :], add_special_tokens=False)["input_ids"]
            ids += context_ids + target_ids
            taught += [False] * len(context_ids) + [True] * len(target_ids)
            rendered = whole
        examples.append((ids, taught))
    # Only the top layers learn it: the backward pass then stops there instead of crossing all 30 layers
    # and the tied 49k-token embedding (the call is a fixed text to reproduce, which the top layers hold).
    # Every weight takes part again for the run itself.
    trained = [p for layer in model.model.layers[-TAUGHT_LAYERS:] for p in layer.parameters()]
    for param in model.parameters():
        param.requires_grad_(False)
    for param in trained:
        param.requires_grad_(True)
    # The examples as one right-padded batch: a step is one forward and one backward pass.
    width = max(len(ids) for ids, _ in examples)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    input_ids, attention, labels = [], [], []
    for ids, taught in examples:
        padding = width - len(ids)
        input_ids.append(ids + [pad] * padding)
        attention.append([1] * len(ids) + [0] * padding)
        labels.append(
            [token if learnt else -100 for token, learnt in zip(ids, taught, strict=True)] + [-100] * padding
        )
    inputs = {"input_ids": torch.tensor(input_ids), "attention_mask": torch.tensor(attention)}
    # The LM head (49k × 576, a fifth of a forward pass) runs only where a token is taught: the loss
    # is the one `model(..., labels=…)` computes, without the logits of every prompt token.
    next_tokens = torch.tensor(labels)[:, 1:]
    taught = next_tokens != -100
    # The frozen layers below give the same states at every step: computed once, each step runs only
    # the taught layers on them (the model's own forward, its layer list cut to those).
    layers = model.model.layers
    with torch.no_grad():
        below = model.model(**inputs, output_hidden_states=True).hidden_states[-TAUGHT_LAYERS - 1]
    model.model.layers = torch.nn.ModuleList(layers[-TAUGHT_LAYERS:])
    mask = inputs["attention_mask"]
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(trained, lr=TAUGHT_LR)
    model.train()
    try:
        for _ in range(steps):
            hidden = model.model(inputs_embeds=below, attention_mask=mask).last_hidden_state[:, :-1]
            loss = torch.nn.functional.cross_entropy(model.lm_head(hidden[taught]), next_tokens[taught])
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    finally:
        model.model.layers = layers
    for param in model.parameters():
        param.requires_grad_(True)
    model.eval()


@pytest.mark.slow
def test_a_toolsets_tool_is_called_by_the_model_and_its_answer_is_in_the_trace(policy_copy):
    """tests/fixtures/vf04_echo/vf04_spell: a Task whose Toolset (an MCP server verifiers starts per rollout)
    offers `spell`; verifiers' harness lists it to the model through the gateway, the model's call is
    parsed from its tokens, verifiers runs it on the Toolset, and the task's reward reads the Trace."""
    from trainers.recipes.grpo import train
    from trainers.sdk.events import MemorySink

    if not VF04_PYTHON.exists():
        pytest.skip("the verifiers 0.4 venv is missing: run `make venv-vf04` (make test does)")
    model, tokenizer = policy_copy
    _learn_to_call_spell(model, tokenizer, ["apple", "river", "stone"])
    config = {
        "preset": "grpo",
        "environment": {
            "kind": "verifiers",
            "config": {"environment": "vf04-spell", "python": str(VF04_PYTHON), "step_timeout_s": 600},
        },
        "rubric": {
            "aggregation": "weighted_sum",
            "criteria": [
                {
                    "name": "used_the_tool",
                    "kind": "verifiers_rubric",
                    "weight": 1.0,
                    "params": {"function": "used_the_tool"},
                }
            ],
        },
        "max_steps": 1,
        "group_size": 2,
        "prompts_per_step": 1,
        "max_new_tokens": 30,
        "max_turns": 3,
        "temperature": 0.0,
        "eval_tasks": 0,
        "checkpoint_every": 0,
        "learning_rate": 1e-5,
        "seed": 5,
    }
    sink = MemorySink()

    result = train(config, sink=sink, model=model, tokenizer=tokenizer)

    assert result.status == "SUCCEEDED"
    items = [i for e in sink.events if e["type"] == "trajectories" for i in e["items"]]
    assert len(items) == 2
    for item in items:
        roles = [t["role"] for t in item["turns"]]
        word = item["turns"][1]["text"].removeprefix("Spell the word ").rstrip(".")
        # The Toolset's tool, with its docstring, is what the model was shown.
        assert "spell" in item["turns"][0]["text"] and "letter by letter" in item["turns"][0]["text"]
        assert roles[:5] == ["system", "user", "assistant", "tool", "assistant"], roles
        assert item["turns"][3]["text"].count("-".join(word.upper())) == 1
        assert {c["name"]: c["raw"] for c in item["components"]} == {"used_the_tool": 1.0}


def test_the_criterion_reads_a_v1_episodes_scores():
    from trainers.types import Task, Trajectory, Turn

    trajectory = Trajectory(
        task=Task(id="t", prompt="Say the word apple.", answer=None),
        turns=[Turn("user", "Say the word apple."), Turn("assistant", "apple")],
        info={
            "verifiers": {
                "environment": "vf04-echo",
                "api": "v1",
                "rewards": {"said_the_word": 1.0, "brief": 1.0},
                "weights": {"said_the_word": 1.0, "brief": 0.5},
            }
        },
    )
    result = score_trajectory(
        {"criteria": [{"name": "vf", "kind": "verifiers_rubric", "weight": 1.0, "params": {}}]}, trajectory
    )
    assert result.total == pytest.approx(1.5)


def test_an_episode_that_failed_before_it_was_scored_earns_nothing_and_the_run_goes_on():
    from trainers.types import Task, Trajectory, Turn

    failed = Trajectory(
        task=Task(id="t", prompt="Spell the word apple.", answer=None),
        turns=[Turn("user", "Spell the word apple.")],
        status="error",
        info={"error": 'model call refused: {"code": "max_turns_exceeded"}'},
    )
    result = score_trajectory(
        {"criteria": [{"name": "vf", "kind": "verifiers_rubric", "weight": 1.0, "params": {}}]}, failed
    )
    assert result.total == 0.0
    assert "failed before the environment scored it" in result.components[0].explanation
    assert "max_turns_exceeded" in result.components[0].explanation

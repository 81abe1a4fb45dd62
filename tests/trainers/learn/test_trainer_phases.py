"""The trainer never leaves the run page guessing: it says which phase it is in (with progress within
generation and evaluation), writes one log line per step, and the worker's logging warnings reach the
run's log. On the real SmolLM2."""

from __future__ import annotations

import logging

import pytest

from trainers.recipes.grpo import Trainer
from trainers.sdk import wire_check
from trainers.sdk.events import LogForwarder, MemorySink

pytestmark = pytest.mark.slow

TINY = {
    "max_steps": 1,
    "group_size": 2,
    "prompts_per_step": 2,
    "max_new_tokens": 4,
    "eval_tasks": 2,
    "eval_every": 0,
    "checkpoint_every": 0,
    "learning_rate": 1e-4,
}


def test_a_run_reports_its_phases_in_order_with_progress(policy_copy, toy_env, tmp_path):
    model, tokenizer = policy_copy

    class Chatty(toy_env):
        def step(self, text):
            logging.getLogger("envs.chatty").warning("the tool answered slowly")
            # What a library prints to a Celery worker's stderr arrives as warnings of celery.redirected.
            logging.getLogger("celery.redirected").warning(
                "Loading weights: 100%|██████████| 272/272 [00:00<00:00]"
            )
            logging.getLogger("py.warnings").warning(
                "/root/.venv/lib/python3.11/site-packages/torch/nn/x.py:12: FutureWarning: `y` is deprecated\n"
                "  warnings.warn("
            )
            return super().step(text)

    sink = MemorySink()
    result = Trainer(
        TINY, sink=sink, env_factory=Chatty, model=model, tokenizer=tokenizer, out_dir=tmp_path
    ).run()
    assert result.status == "SUCCEEDED"
    phases = sink.of_type("phase")
    for event in phases:
        assert wire_check.check_event(event) == {}, event  # what the dashboard accepts

    # Each phase once when it begins (progress updates repeat the phase), in the order a step runs them.
    begun = [(e["phase"], e["step"]) for e in phases if e["elapsed_s"] == 0.0]
    assert begun == [
        ("loading", 0),
        ("evaluating", 0),
        ("generating", 1),
        ("scoring", 1),
        ("updating", 1),
        ("syncing", 1),
        ("evaluating", 1),
        ("checkpointing", 1),
    ]
    # Generation reports after every turn how many groups are done, ending with all of them.
    generating = [e for e in phases if e["phase"] == "generating" and e["step"] == 1]
    assert generating[0]["done"] == 0 and generating[0]["total"] == 2
    assert generating[-1]["done"] == generating[-1]["total"] == 2 and "turn" in generating[-1]["message"]
    assert [e["elapsed_s"] for e in generating] == sorted(e["elapsed_s"] for e in generating)
    evaluating = [e for e in phases if e["phase"] == "evaluating" and e["step"] == 0]
    assert evaluating[-1]["done"] == evaluating[-1]["total"] == 2

    # One line per step with the reward and where the time went.
    lines = [e["message"] for e in sink.of_type("log") if e["message"].startswith("step ")]
    assert len(lines) == 1 and lines[0].startswith("step 1/1: reward ")
    assert "generate" in lines[0] and "learn" in lines[0] and lines[0].count(" s") >= 3

    # One line per evaluation with its accuracy and reward on the held-out tasks.
    evaluations = [
        e["message"] for e in sink.of_type("log") if e["message"].startswith("evaluation at step ")
    ]
    assert [line.split(":")[0] for line in evaluations] == ["evaluation at step 0", "evaluation at step 1"]
    assert "reward " in evaluations[0] and "2 held-out tasks" in evaluations[0]

    # The environment's logging warning reached the run's log, named after its logger, once: its repeats
    # are left out (and counted at the end); the library's warning is one line without a local path; the
    # progress bar is on the phase line, not in the log.
    warnings = [e["message"] for e in sink.of_type("log") if e["level"] == "warning"]
    assert warnings == [
        "envs.chatty: the tool answered slowly",
        "FutureWarning: `y` is deprecated (torch/nn/x.py:12)",
    ]
    assert sink.of_type("log")[-1]["message"].endswith("library messages were left out of this log")
    assert not any("Loading weights" in e["message"] for e in sink.of_type("log"))
    assert any(e["message"].endswith("Loading weights 272/272 (100%)") for e in phases)
    # …and the forwarder is gone once the run is over.
    assert not any(isinstance(h, LogForwarder) for h in logging.getLogger().handlers)


def test_the_trainers_own_warnings_are_logged_once(policy_copy, toy_env):
    model, tokenizer = policy_copy
    sink = MemorySink()
    config = {
        **TINY,
        "max_steps": 1,
        "eval_tasks": 0,
        "checkpoint_every": 0,
        "dynamic_sampling": True,
        "dynamic_sampling_max_rounds": 0,
        "group_size": 1,
    }
    Trainer(config, sink=sink, env_factory=toy_env, model=model, tokenizer=tokenizer).run()
    warned = [e["message"] for e in sink.of_type("log") if e["level"] == "warning"]
    # A group of one has no reward variance: dynamic sampling says so once, not once more via logging.
    assert len(warned) == 1 and "dynamic sampling found 0 of 2 groups" in warned[0]

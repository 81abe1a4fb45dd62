"""Training with `backend: vllm`: the trainer's own loop, rollouts from the vLLM engine in process."""

from __future__ import annotations

import pytest

from tests.trainers.conftest import ToyEnv
from tests.vllm.learner import CHAT, LOGPROB_TOLERANCE, learner_logprobs, max_gap
from trainers.recipes.grpo import Trainer, train
from trainers.sdk.events import MemorySink

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

TINY = {
    "max_steps": 2,
    "group_size": 2,
    "prompts_per_step": 1,
    "max_new_tokens": 12,
    "eval_tasks": 0,
    "checkpoint_every": 0,
    "learning_rate": 1e-4,
    "backend": "vllm",
}


def test_two_steps_on_the_arithmetic_environment_succeed():
    sink = MemorySink()
    result = train(
        {**TINY, "max_turns": 2, "environment": {"kind": "arithmetic_calculator", "config": {}}}, sink=sink
    )
    assert result.status == "SUCCEEDED" and result.step == 2
    assert [e["status"] for e in sink.of_type("status")] == ["RUNNING", "SUCCEEDED"]
    items = [i for b in sink.of_type("trajectories") for i in b["items"] if i["split"] == "train"]
    # Step 2 sampled from the weights step 1 pushed.
    assert [i["policy_version"] for i in items] == [0, 0, 1, 1]
    for item in items:
        assert item["completion_tokens"] > 0 and item["turns"][2]["role"] == "assistant"


def test_after_a_step_the_engine_samples_from_the_updated_policy(policy):
    from trainers.rollout.backends.vllm_backend import VLLMBackend

    base, _ = policy
    trainer = Trainer({**TINY, "group_size": 4, "learning_rate": 1e-3}, env_factory=ToyEnv)
    trainer.setup()
    try:
        engine = trainer.rollouts.backend
        assert isinstance(engine, VLLMBackend)
        metrics = trainer.train_step()
        assert metrics["zero_variance_fraction"] < 1  # the step had something to learn from
        prompt = engine.prompt_token_ids(CHAT)
        sample = engine.generate([CHAT], max_new_tokens=16, temperature=1.0, seed=5)[0]
        assert (
            max_gap(sample.logprobs, learner_logprobs(trainer.model, prompt, sample.token_ids))
            <= LOGPROB_TOLERANCE
        )
        assert (
            max_gap(sample.logprobs, learner_logprobs(base, prompt, sample.token_ids))
            > 10 * LOGPROB_TOLERANCE
        )
    finally:
        trainer.rollouts.close()

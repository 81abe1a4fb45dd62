"""The gateway in front of the real bundled model (slow: it loads SmolLM2-135M)."""

from __future__ import annotations

import pytest
import torch

from tests.trainers.envs.agents import chatty_agent
from trainers.envs.agent import AgentEnv, environment_agent
from trainers.envs.arithmetic import ArithmeticCalculatorEnv
from trainers.learn.losses import completion_logprobs
from trainers.rollout.backends import make_backend
from trainers.rollout.chat import ChatFormat
from trainers.rollout.episodes import generate_rollouts
from trainers.rollout.toolformats import resolve_tool_format
from trainers.types import Task

pytestmark = pytest.mark.slow

OPTIONS = dict(max_turns=3, max_new_tokens=24, max_context_tokens=2048, top_p=1.0, generation_seed=11)


@pytest.fixture(scope="module")
def served(smollm):
    model, tokenizer = smollm
    chat = ChatFormat(tokenizer, resolve_tool_format("auto", tokenizer))
    return model, make_backend("transformers", model=model, tokenizer=tokenizer), chat


def test_the_recorded_log_probs_are_the_policys_own(served):
    """The learner, scoring the recorded tokens in their recorded context, finds the sampler's
    log-probs: the gateway recorded exactly what the model saw and wrote."""
    model, backend, chat = served
    env = AgentEnv(
        agent=chatty_agent, tasks=[{"prompt": "unused"}], timeout_s=1800
    )  # busy test machines are slow
    tasks = [Task("a", "Name a colour.", None)]

    groups = env.drive_rollouts(backend, chat, tasks, [[1, 2]], temperature=1.0, stop=(), **OPTIONS)

    rollouts = [r for g in groups for r in g]
    for rollout in rollouts:
        assert rollout.trajectory.status in ("ok", "truncated"), rollout.trajectory.info
        assert rollout.trajectory.info["calls"] == 2
    with torch.no_grad():
        logp, mask, _ = completion_logprobs(model, rollouts, [r.loss_mask for r in rollouts], temperature=1.0)
    for row, rollout in enumerate(rollouts):
        recorded = torch.tensor(rollout.behaviour_logprobs)
        width = len(recorded)
        assert mask[row, :width].tolist() == [float(m) for m in rollout.loss_mask]
        assert torch.allclose(logp[row, :width] * mask[row, :width], recorded, atol=2e-3)


def test_greedy_episodes_through_the_gateway_match_in_process_rollouts_token_for_token(served):
    _, backend, chat = served

    def make_env():
        return ArithmeticCalculatorEnv(max_digits=2)

    task = make_env().tasks("train", 1, seed=4)[0]
    [[local]] = generate_rollouts(
        backend, chat, make_env, [task], [[0]], temperature=0.0, stop=chat.tool_format.stop, **OPTIONS
    )
    env = AgentEnv(
        agent=environment_agent(make_env, tool_format=chat.tool_format),
        tasks=[{"prompt": "unused"}],
        timeout_s=1800,
    )
    [[remote]] = env.drive_rollouts(
        backend, chat, [task], [[0]], temperature=0.0, stop=chat.tool_format.stop, **OPTIONS
    )

    assert remote.prompt_ids == local.prompt_ids
    assert remote.completion_ids == local.completion_ids and remote.loss_mask == local.loss_mask
    assert [t.text for t in remote.trajectory.turns] == [t.text for t in local.trajectory.turns]

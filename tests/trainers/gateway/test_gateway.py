"""The agent gateway, driven by the real `openai` client over HTTP on 127.0.0.1.

The model side is a `ScriptedModel` (a rule that always calls the calculator, then answers) on the
real tokenizers, so a tool-using episode happens every time and its tokens can be compared exactly
with what `generate_rollouts` produces for an environment. The real model is in test_gateway_model.py.
"""

from __future__ import annotations

import json
import threading

import openai
import pytest
import requests

from tests.trainers.envs.agents import CALCULATOR_TOOL, calculator_agent
from tests.trainers.gateway.scripted import ScriptedModel, calculator_rule
from tests.trainers.template_tokenizers import template_tokenizer
from trainers.envs.agent import AgentEnv, environment_agent, task_payload
from trainers.envs.arithmetic import ArithmeticCalculatorEnv
from trainers.gateway import Gateway
from trainers.rollout.chat import ChatFormat
from trainers.rollout.episodes import generate_rollouts
from trainers.rollout.toolformats import FORMATS, STUDIO
from trainers.types import Task

TASK = Task("t1", "What is 31 + 45?", 76)


@pytest.fixture(scope="module")
def smollm_tokenizer():
    from trainers.models import load_tokenizer

    return load_tokenizer("smollm2-135m")


@pytest.fixture()
def gateway(smollm_tokenizer):
    """A gateway on the bundled model's tokenizer and chat template (the studio tool format)."""
    model = ScriptedModel(smollm_tokenizer, calculator_rule("studio"))
    with Gateway(model, ChatFormat(smollm_tokenizer, STUDIO), max_new_tokens=64, batch_window_s=1.0) as gw:
        gw.model = model
        yield gw


def client_for(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="not-checked", max_retries=0, timeout=30)


def error_of(excinfo) -> dict:
    return excinfo.value.body if "error" not in excinfo.value.body else excinfo.value.body["error"]


# ---- one episode, recorded exactly ---------------------------------------------------------------


def test_an_agent_calls_its_tool_and_answers_and_the_episode_is_recorded_token_by_token(
    gateway, smollm_tokenizer
):
    session = gateway.open_session(TASK)

    result = calculator_agent(task_payload(TASK), client_for(gateway.session_url(session.id)))
    gateway.end_session(session.id)
    rollout = session.to_rollout(group=0, sample=0, seed=0, split="train")

    assert result == {"reward": 1.0, "correct": True}
    traj = rollout.trajectory
    assert traj.status == "ok" and traj.info["calls"] == 2
    assert [t.role for t in traj.turns] == ["system", "user", "assistant", "tool", "assistant"]
    assert (traj.turns[2].tool_name, traj.turns[2].tool_args) == ("calculator", {"expression": "31 + 45"})
    assert (traj.turns[3].text, traj.turns[3].tool_result, traj.turns[3].tool_name) == (
        "76",
        "76",
        "calculator",
    )
    assert traj.final_answer == "<answer>76</answer>" and traj.tool_calls == 1
    # The loss trains exactly the sampled tokens, with the sampler's log-probs; all else is masked.
    sampled = [i for t in traj.turns if t.role == "assistant" for i in t.token_ids]
    assert [i for i, m in zip(rollout.completion_ids, rollout.loss_mask, strict=True) if m] == sampled
    assert [lp for lp, m in zip(rollout.behaviour_logprobs, rollout.loss_mask, strict=True) if not m] == [
        0.0
    ] * (len(rollout.loss_mask) - len(sampled))
    assert rollout.prompt_ids + rollout.completion_ids == [i for t in traj.turns for i in t.token_ids]
    # …and the sequence is the chat template's rendering of the conversation (tools in the system prompt).
    conversation = [
        {"role": "system", "content": traj.turns[0].text},
        {"role": "user", "content": TASK.prompt},
        {"role": "assistant", "content": traj.turns[2].text},
        {"role": "tool", "content": "76"},
        {"role": "assistant", "content": "<answer>76</answer>"},
    ]
    rendered = smollm_tokenizer.apply_chat_template(conversation, tokenize=False)
    assert smollm_tokenizer.decode(rollout.prompt_ids + rollout.completion_ids) == rendered.removesuffix("\n")
    assert "calculator: Evaluates an arithmetic expression." in traj.turns[0].text


def test_the_reply_is_an_openai_tool_call_with_logprobs_and_token_ids(gateway):
    session = gateway.open_session(TASK)
    reply = client_for(gateway.session_url(session.id)).chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": TASK.prompt}],
        tools=[CALCULATOR_TOOL],
        logprobs=True,
        extra_body={"return_token_ids": True},
    )

    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert (call.type, call.function.name, json.loads(call.function.arguments)) == (
        "function",
        "calculator",
        {"expression": "31 + 45"},
    )
    [segment] = session.segments
    assert choice.model_extra["token_ids"] == segment.completion_ids
    assert reply.model_extra["prompt_token_ids"] == segment.prompt_ids
    assert [t.logprob for t in choice.logprobs.content] == segment.logprobs
    assert (
        reply.usage.prompt_tokens == len(segment.prompt_ids)
        and reply.usage.completion_tokens == len(call_ids := segment.completion_ids)
        and call_ids
    )
    assert client_for(gateway.session_url(session.id)).models.list().data[0].id == "policy"


def test_a_streamed_reply_carries_the_same_message(gateway):
    session = gateway.open_session(TASK)
    chunks = list(
        client_for(gateway.session_url(session.id)).chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": TASK.prompt}],
            tools=[CALCULATOR_TOOL],
            stream=True,
            stream_options={"include_usage": True},
        )
    )

    calls = [c for chunk in chunks for choice in chunk.choices for c in (choice.delta.tool_calls or [])]
    assert [c.function.name for c in calls] == ["calculator"]
    assert [choice.finish_reason for chunk in chunks for choice in chunk.choices if choice.finish_reason] == [
        "tool_calls"
    ]
    assert chunks[-1].usage.completion_tokens == len(session.segments[0].completion_ids)


# (family, new tokens per turn, how the episode ends): 24 tokens cut the studio call short, so the
# environment answers a malformed call with an Error: tool message until the turns run out.
EPISODES = [
    ("studio", 256, "ok"),
    ("hermes", 256, "ok"),
    ("llama3", 256, "ok"),
    ("mistral", 256, "ok"),
    ("studio", 24, "truncated"),
]


@pytest.mark.parametrize(
    ("family", "max_new_tokens", "status"), EPISODES, ids=[f"{f}-{n}" for f, n, _ in EPISODES]
)
def test_an_environment_played_through_the_gateway_has_exactly_the_tokens_of_its_own_episode(
    family, max_new_tokens, status, smollm_tokenizer
):
    tokenizer = smollm_tokenizer if family == "studio" else template_tokenizer(family)
    fmt = STUDIO if family == "studio" else FORMATS[family]
    chat = ChatFormat(tokenizer, fmt)

    def make_env():
        return ArithmeticCalculatorEnv(max_digits=2)

    options = dict(
        max_turns=4,
        max_new_tokens=max_new_tokens,
        max_context_tokens=100_000,
        temperature=1.0,
        top_p=1.0,
        generation_seed=0,
        stop=fmt.stop,
    )
    [[local]] = generate_rollouts(
        ScriptedModel(tokenizer, calculator_rule(family)), chat, make_env, [TASK], [[5]], **options
    )
    agent_env = AgentEnv(agent=environment_agent(make_env, tool_format=fmt), tasks=[{"prompt": "unused"}])
    [[remote]] = agent_env.drive_rollouts(
        ScriptedModel(tokenizer, calculator_rule(family)), chat, [TASK], [[5]], **options
    )

    assert local.trajectory.status == remote.trajectory.status == status
    assert remote.prompt_ids == local.prompt_ids
    assert remote.completion_ids == local.completion_ids
    assert remote.loss_mask == local.loss_mask
    assert remote.behaviour_logprobs == local.behaviour_logprobs
    assert remote.finish_reasons == local.finish_reasons
    fields = [
        (t.role, t.text, t.tool_name, t.tool_args, t.tool_result, t.token_ids, t.loss_mask)
        for t in local.trajectory.turns
    ]
    assert [
        (t.role, t.text, t.tool_name, t.tool_args, t.tool_result, t.token_ids, t.loss_mask)
        for t in remote.trajectory.turns
    ] == fields
    assert remote.trajectory.env_reward == pytest.approx(local.trajectory.env_reward)
    assert remote.trajectory.info.get("correct") is (True if status == "ok" else None)
    assert remote.trajectory.info["prompt_examples"]


def test_concurrent_agents_share_one_batched_generate_call(gateway):
    sessions = [gateway.open_session(Task(f"t{i}", f"What is {10 + i} + 5?", 15 + i)) for i in range(4)]
    results = {}

    def run(session):
        results[session.id] = calculator_agent(
            task_payload(session.task), client_for(gateway.session_url(session.id))
        )

    threads = [threading.Thread(target=run, args=(s,)) for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert all(r["correct"] for r in results.values()) and len(results) == 4
    assert gateway.model.batches[:2] == [4, 4]  # every turn of the four episodes sampled together


def test_a_rewritten_history_starts_a_new_segment_and_the_episode_trains_on_the_last(gateway):
    session = gateway.open_session(TASK)
    client = client_for(gateway.session_url(session.id))
    client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": TASK.prompt}], tools=[CALCULATOR_TOOL]
    )
    # The agent drops its history and asks afresh, with the result in the question.
    client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": f"{TASK.prompt} (It is 76.)"}],
        tools=[CALCULATOR_TOOL],
    )
    gateway.end_session(session.id)
    rollout = session.to_rollout(group=0, sample=0, seed=0, split="train")

    assert rollout.trajectory.info["segments"] == 2
    assert [t.role for t in rollout.trajectory.turns] == ["system", "user", "assistant"] * 2
    assert rollout.trajectory.turns[0].token_ids is None  # shown for review, not trained
    assert rollout.prompt_ids == rollout.trajectory.turns[3].token_ids + rollout.trajectory.turns[4].token_ids
    assert rollout.trajectory.final_answer == "<answer>76</answer>"


# ---- the session API ---------------------------------------------------------------------------------


def test_the_session_api_opens_rewards_and_ends_an_episode(gateway):
    opened = requests.post(
        f"{gateway.url}/v1/sessions",
        json={"task": {"id": "t9", "prompt": "What is 2 + 2?", "answer": 4, "level": "easy"}},
        timeout=10,
    )
    assert opened.status_code == 201
    body = opened.json()
    sid = body["session_id"]
    assert body["base_url"] == f"{gateway.url}/s/{sid}/v1" and body["status"] == "open" and body["calls"] == 0

    client_for(body["base_url"]).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "What is 2 + 2?"}]
    )
    by_header = requests.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"X-Session-Id": sid},
        timeout=10,
        json={"messages": [{"role": "user", "content": "What is 3 + 3?"}]},
    )
    assert by_header.status_code == 200 and by_header.json()["object"] == "chat.completion"
    rewarded = requests.post(
        f"{gateway.url}/v1/sessions/{sid}/reward",
        json={"reward": 0.5, "info": {"correct": False}},
        timeout=10,
    )
    assert rewarded.json()["reward"] == 0.5
    ended = requests.post(f"{gateway.url}/v1/sessions/{sid}/end", json={}, timeout=10).json()
    assert (ended["status"], ended["outcome"], ended["calls"]) == ("finished", "ok", 2)
    assert requests.get(f"{gateway.url}/v1/sessions/{sid}", timeout=10).json()["status"] == "finished"

    rollout = gateway.session(sid).to_rollout(group=0, sample=0, seed=0, split="train")
    assert rollout.trajectory.env_reward == 0.5 and rollout.trajectory.info["correct"] is False
    assert rollout.task.meta["level"] == "easy"


def test_an_agent_may_end_its_episode_as_an_error(gateway):
    sid = requests.post(f"{gateway.url}/v1/sessions", json={"task": {"prompt": "x"}}, timeout=10).json()[
        "session_id"
    ]
    ended = requests.post(
        f"{gateway.url}/v1/sessions/{sid}/end",
        json={"status": "error", "error": "tool server down"},
        timeout=10,
    ).json()
    assert (ended["outcome"], ended["error"]) == ("error", "tool server down")


def test_unknown_and_finished_sessions_get_openai_shaped_errors(gateway):
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.NotFoundError) as unknown:
        client_for(f"{gateway.url}/s/sess_nope/v1").chat.completions.create(model="m", messages=messages)
    assert unknown.value.status_code == 404 and error_of(unknown)["code"] == "session_not_found"

    session = gateway.open_session(TASK)
    gateway.end_session(session.id)
    with pytest.raises(openai.ConflictError) as finished:
        client_for(gateway.session_url(session.id)).chat.completions.create(model="m", messages=messages)
    assert finished.value.status_code == 409 and error_of(finished)["code"] == "session_finished"
    gateway.release(session.id)  # forgotten, but still "finished", not "unknown"
    with pytest.raises(openai.ConflictError):
        client_for(gateway.session_url(session.id)).chat.completions.create(model="m", messages=messages)
    again = requests.post(f"{gateway.url}/v1/sessions/{session.id}/end", json={}, timeout=10)
    assert again.status_code == 409

    with pytest.raises(openai.BadRequestError) as loose:
        client_for(f"{gateway.url}/v1").chat.completions.create(model="m", messages=messages)
    assert error_of(loose)["code"] == "session_required"


@pytest.mark.parametrize(
    ("body", "status", "code", "param"),
    [
        (b"{not json", 400, "malformed_json", None),
        (json.dumps({"messages": []}).encode(), 400, "invalid_value", "messages"),
        (
            json.dumps({"messages": [{"role": "user", "content": "x"}], "n": 2}).encode(),
            400,
            "unsupported_value",
            "n",
        ),
        (
            json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode(),
            400,
            "invalid_value",
            "messages.0.role",
        ),
        (
            json.dumps({"messages": [{"role": "tool", "content": "x"}]}).encode(),
            400,
            "invalid_value",
            "messages.0.tool_call_id",
        ),
        (
            json.dumps({"messages": [{"role": "user", "content": "x"}], "temperature": 9}).encode(),
            400,
            "invalid_value",
            "temperature",
        ),
    ],
)
def test_a_bad_request_is_refused_with_the_field_it_concerns(gateway, body, status, code, param):
    session = gateway.open_session(TASK)
    answer = requests.post(
        f"{gateway.session_url(session.id)}/chat/completions",
        data=body,
        timeout=10,
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == status
    error = answer.json()["error"]
    assert (error["code"], error["param"], error["type"]) == (code, param, "invalid_request_error")
    assert error["message"]
    assert session.calls == 0


def test_unknown_routes_and_methods(gateway):
    assert requests.get(f"{gateway.url}/v1/embeddings", timeout=10).json()["error"]["code"] == "not_found"
    assert requests.get(f"{gateway.url}/v1/chat/completions", timeout=10).status_code == 405


# ---- limits ------------------------------------------------------------------------------------------


def test_a_call_past_the_turn_limit_is_refused_and_the_episode_is_truncated(smollm_tokenizer):
    model = ScriptedModel(smollm_tokenizer, calculator_rule("studio"))
    with Gateway(model, ChatFormat(smollm_tokenizer, STUDIO), max_turns=1) as gateway:
        session = gateway.open_session(TASK)
        client = client_for(gateway.session_url(session.id))
        first = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": TASK.prompt}], tools=[CALCULATOR_TOOL]
        )
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(
                model="m",
                tools=[CALCULATOR_TOOL],
                messages=[
                    {"role": "user", "content": TASK.prompt},
                    first.choices[0].message.model_dump(exclude_none=True),
                    {
                        "role": "tool",
                        "tool_call_id": first.choices[0].message.tool_calls[0].id,
                        "content": "76",
                    },
                ],
            )
        gateway.end_session(session.id)

    assert error_of(refused)["code"] == "max_turns_exceeded"
    assert session.to_rollout(group=0, sample=0, seed=0, split="train").trajectory.status == "truncated"


def test_a_conversation_longer_than_the_context_is_refused(smollm_tokenizer):
    model = ScriptedModel(smollm_tokenizer, calculator_rule("studio"))
    with Gateway(model, ChatFormat(smollm_tokenizer, STUDIO), max_context_tokens=40) as gateway:
        session = gateway.open_session(TASK)
        with pytest.raises(openai.BadRequestError) as refused:
            client_for(gateway.session_url(session.id)).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "word " * 60}]
            )
    assert error_of(refused)["code"] == "context_length_exceeded" and session.outcome == "truncated"
    assert model.batches == []


def test_a_session_too_many_policy_versions_old_gets_429(gateway):
    gateway.max_staleness = 1
    session = gateway.open_session(TASK)
    gateway.set_policy_version(2)
    with pytest.raises(openai.RateLimitError) as stale:
        client_for(gateway.session_url(session.id)).chat.completions.create(
            model="m", messages=[{"role": "user", "content": TASK.prompt}]
        )
    assert error_of(stale)["code"] == "stale_session" and session.outcome == "error"
    fresh = gateway.open_session(TASK)
    client_for(gateway.session_url(fresh.id)).chat.completions.create(
        model="m", messages=[{"role": "user", "content": TASK.prompt}]
    )


def test_opening_more_sessions_than_allowed_gets_429_with_retry_after(gateway):
    gateway.max_open_sessions = 1
    first = requests.post(f"{gateway.url}/v1/sessions", json={"task": {"prompt": "a"}}, timeout=10).json()
    refused = requests.post(f"{gateway.url}/v1/sessions", json={"task": {"prompt": "b"}}, timeout=10)
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
    assert refused.json()["error"]["code"] == "too_many_sessions"
    requests.post(f"{gateway.url}/v1/sessions/{first['session_id']}/end", json={}, timeout=10)
    assert (
        requests.post(f"{gateway.url}/v1/sessions", json={"task": {"prompt": "c"}}, timeout=10).status_code
        == 201
    )


def test_closing_the_gateway_ends_open_sessions_and_frees_the_port(smollm_tokenizer):
    model = ScriptedModel(smollm_tokenizer, calculator_rule("studio"))
    gateway = Gateway(model, ChatFormat(smollm_tokenizer, STUDIO)).start()
    session = gateway.open_session(TASK)
    client = client_for(gateway.session_url(session.id))
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": TASK.prompt}])
    port = gateway.port

    gateway.close()

    assert session.outcome == "error" and "shut down" in session.error
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": TASK.prompt}])
    with Gateway(model, ChatFormat(smollm_tokenizer, STUDIO), port=port) as again:  # the port is free again
        assert requests.get(f"{again.url}/health", timeout=10).json()["status"] == "ok"

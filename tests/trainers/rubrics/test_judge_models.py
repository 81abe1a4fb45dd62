"""LLM judges as rewards: where their model runs (the bundled model on this machine, an OpenAI-compatible
endpoint — here the project's own agent gateway, a real HTTP server), the group mode, and what they cost."""

from __future__ import annotations

import socket

import pytest

from trainers.gateway.server import Gateway
from trainers.rollout.backends import make_backend
from trainers.rollout.chat import ChatFormat
from trainers.rollout.toolformats import resolve_tool_format
from trainers.rubrics import build_rubric, validate_rubric
from trainers.rubrics.judge import clear_judge_cache
from trainers.rubrics.judge_models import (
    JudgePool,
    JudgeUnavailable,
    attach_judges,
    endpoint_problem,
    judge_usage_metrics,
    secret_names,
    servable_models,
)
from trainers.types import Task, Trajectory, Turn


def answered(text: str, prompt: str = "What is 2 + 2?", answer: str = "4") -> Trajectory:
    return Trajectory(
        task=Task("t", prompt, answer),
        turns=[Turn("user", prompt), Turn("assistant", text)],
    )


def judge_spec(**params) -> dict:
    return {"criteria": [{"name": "judge", "kind": "llm_judge", "weight": 1.0, "params": params}]}


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_judge_cache()
    yield
    clear_judge_cache()


def test_group_mode_asks_once_per_group_and_reads_one_relative_score_per_answer():
    asked: list[str] = []

    def judge(prompts):
        asked.extend(prompts)
        return ["The first is wrong, the second right.\nAnswer 1: 2\nAnswer 2: 9\nAnswer 2: 8"]

    rubric = build_rubric(judge_spec(mode="group", model="tiny"), generate=judge)
    scores = rubric.score_group([answered("<answer>5</answer>"), answered("<answer>4</answer>")])

    assert len(asked) == 1
    assert "Answer 1:\n<answer>5</answer>" in asked[0] and "Answer 2:\n<answer>4</answer>" in asked[0]
    assert [s.total for s in scores] == [pytest.approx(0.2), pytest.approx(0.8)]  # the last line wins
    first = scores[0].components[0]
    assert first.explanation.startswith("Judge score 2 for answer 1 of the group")
    assert first.provenance["judge_mode"] == "group" and first.provenance["judge_where"] == "model"
    usage = judge_usage_metrics(rubric)
    assert usage["judge/judge/calls"] == 1 and judge_usage_metrics(rubric)["judge/judge/calls"] == 0


def test_an_answer_the_group_reply_leaves_out_gets_the_fallback():
    rubric = build_rubric(
        judge_spec(mode="group", model="tiny", on_parse_failure=-1.0), generate=lambda p: ["Answer 2: 10"]
    )
    scores = rubric.score_group([answered("a"), answered("b")])
    assert [s.total for s in scores] == [-1.0, 1.0]
    assert "No score found for answer 1" in scores[0].components[0].explanation


def test_it_refuses_judge_params_that_cannot_work():
    errors = validate_rubric(
        judge_spec(base_url="ftp://x", api_key_secret="1bad", group_template="Rate {prompt}")
    )
    assert "must be an http" in errors["criteria.0.params.base_url"][0]
    assert "letters, digits" in errors["criteria.0.params.api_key_secret"][0]
    assert "{responses}" in errors["criteria.0.params.group_template"][0]
    assert "needs the name of its model" in errors["criteria.0.params.model"][0]
    only_key = validate_rubric(judge_spec(api_key_secret="KEY"))
    assert "only an endpoint takes a key" in only_key["criteria.0.params.api_key_secret"][0]
    assert secret_names(judge_spec(base_url="http://h/v1", model="m", api_key_secret="KEY")) == ["KEY"]


def test_this_machine_serves_the_bundled_model_and_what_the_operator_lists(monkeypatch):
    monkeypatch.setenv("ROLLOUT_STUDIO_JUDGE_MODELS", "/models/judge-7b, org/other")
    assert servable_models()[:1] == ["smollm2-135m"]
    assert {"/models/judge-7b", "org/other"} <= set(servable_models())


def test_a_missing_secret_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("JUDGE_KEY", raising=False)
    rubric = build_rubric(judge_spec(base_url="http://127.0.0.1:9/v1", model="m", api_key_secret="JUDGE_KEY"))
    with pytest.raises(JudgeUnavailable, match="JUDGE_KEY"):
        attach_judges(rubric, JudgePool(policy_model="smollm2-135m", secrets={}))
    with pytest.raises(JudgeUnavailable, match="no environment variable"):
        attach_judges(rubric, JudgePool(policy_model="smollm2-135m"))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_an_endpoint_judge_scores_through_a_real_openai_compatible_server(smollm):
    model, tokenizer = smollm
    backend = make_backend("transformers", model=model, tokenizer=tokenizer)
    chat = ChatFormat(tokenizer, resolve_tool_format("studio", tokenizer))
    with Gateway(
        backend, chat, model_name="judge-135m", require_session=False, api_key="sk-judge", max_new_tokens=16
    ) as gateway:
        base_url = f"{gateway.url}/v1"
        assert endpoint_problem(base_url, "judge-135m", "sk-judge") is None
        assert "refused the key (HTTP 401)" in endpoint_problem(base_url, "judge-135m", "sk-wrong")
        assert "serves no model 'judge-7b'; it serves: judge-135m" in endpoint_problem(
            base_url, "judge-7b", "sk-judge"
        )
        closed = endpoint_problem(f"http://127.0.0.1:{_closed_port()}/v1", "judge-135m")
        assert closed.startswith("cannot reach the judge endpoint") and "refused" in closed

        rubric = build_rubric(
            judge_spec(base_url=base_url, model="judge-135m", api_key_secret="JUDGE_KEY", max_new_tokens=8)
        )
        pool = JudgePool(policy_model="smollm2-135m", secrets={"JUDGE_KEY": "sk-judge"})
        assert attach_judges(rubric, pool) == [
            f"LLM judge 'judge': model judge-135m at {base_url}, key from secret JUDGE_KEY; one prompt per trajectory"
        ]
        scores = rubric.score_group([answered("<answer>4</answer>"), answered("<answer>5</answer>")])
        calls = gateway.calls

    for score in scores:
        component = score.components[0]
        assert component.provenance["judge_where"] == "endpoint"
        assert component.provenance["judge_endpoint"] == base_url
        assert component.explanation  # the judge's reply, parsed or not
    assert calls == 2
    usage = judge_usage_metrics(rubric)
    assert usage["judge/judge/calls"] == 2 and usage["judge/judge/completion_tokens"] > 0
    assert usage["judge/judge/seconds"] > 0


@pytest.mark.slow
def test_the_bundled_model_judges_on_this_machine_loaded_once_per_run():
    rubric = build_rubric(
        {
            "criteria": [
                {
                    "name": "a",
                    "kind": "llm_judge",
                    "params": {"model": "smollm2-135m", "max_new_tokens": 4, "reply_prefix": "Score:"},
                },
                {
                    "name": "b",
                    "kind": "llm_judge",
                    "params": {"model": "smollm2-135m", "mode": "group", "max_new_tokens": 12},
                },
            ]
        }
    )
    pool = JudgePool(policy_model="smollm2-135m")
    try:
        attach_judges(rubric, pool)
        assert list(pool._backends) == ["smollm2-135m"]  # two criteria, one model
        scores = rubric.score_group([answered("<answer>4</answer>"), answered("<answer>5</answer>")])
    finally:
        pool.close()
    a = scores[0].components[0]
    assert a.provenance["judge_where"] == "model"
    assert "Score:" in a.explanation  # the reply starts with the prefix the model continued
    usage = judge_usage_metrics(rubric)
    assert usage["judge/a/calls"] == 2 and usage["judge/b/calls"] == 1
    assert usage["judge/a/prompt_tokens"] > 0 and usage["judge/a/completion_tokens"] > 0


def test_prefetching_asks_about_all_groups_in_one_batch_and_counts_no_hits():
    batches: list[int] = []

    def judge(prompts):
        batches.append(len(prompts))
        return ["Score: 10"] * len(prompts)

    rubric = build_rubric(judge_spec(model="tiny"), generate=judge)
    groups = [[answered(f"<answer>{i}</answer>"), answered(f"<answer>{i + 10}</answer>")] for i in range(3)]
    from trainers.rubrics.judge_models import prefetch_judges

    prefetch_judges(rubric, groups)
    scores = [rubric.score_group(g) for g in groups]
    assert batches == [6] and all(s.total == 1.0 for g in scores for s in g)
    usage = judge_usage_metrics(rubric)
    assert usage["judge/judge/calls"] == 6 and usage["judge/judge/cache_hits"] == 0

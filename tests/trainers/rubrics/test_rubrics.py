"""Rubric specs: validation errors, each criterion's arithmetic, both aggregation modes, the total invariant."""

import math
import random
import time

import pytest

from trainers.rubrics import (
    CriterionUnavailable,
    InvalidRubric,
    build_rubric,
    describe_path,
    parse_transcript,
    score_group,
    score_trajectory,
    validate_rubric,
)
from trainers.rubrics.criteria import find_numbers
from trainers.rubrics.judge import clear_judge_cache
from trainers.types import Task, Trajectory, Turn

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "12+7"}}</tool_call>'


def trajectory(final: str, answer=19, *, turns_before=(), token_ids=None, env_reward=0.0) -> Trajectory:
    turns = [Turn("user", "What is 12 + 7?"), *turns_before, Turn("assistant", final, token_ids=token_ids)]
    return Trajectory(
        task=Task(id="t1", prompt="What is 12 + 7?", answer=answer), turns=turns, env_reward=env_reward
    )


def rubric(*criteria, aggregation="weighted_sum"):
    return {
        "aggregation": aggregation,
        "criteria": [
            {"name": c[0], "kind": c[1], "weight": c[2], "params": c[3] if len(c) > 3 else {}}
            for c in criteria
        ],
    }


def one(kind, params, traj):
    return score_trajectory(rubric(("c", kind, 1.0, params)), traj).components[0]


# ---- validation ----------------------------------------------------------------------------------


def test_it_accepts_a_valid_rubric():
    assert (
        validate_rubric(rubric(("correct", "numeric_match", 1.0), ("short", "overlong_penalty", 0.5))) == {}
    )


def test_it_reports_errors_by_field_path():
    spec = {
        "aggregation": "max",
        "criteria": [
            {"name": "a", "kind": "nope", "weight": 1},
            {"name": "a", "kind": "regex", "weight": -0.5, "params": {"pattern": "(unclosed"}},
            {
                "name": "b",
                "kind": "exact_match",
                "weight": "heavy",
                "params": {"case_sensitive": "yes", "bogus": 1},
            },
            {"name": "", "kind": "length", "params": {"min_len": 10, "max_len": 5}},
        ],
    }
    errors = validate_rubric(spec)
    assert errors["aggregation"] == ["Aggregation must be one of: weighted_sum, group_normalized_sum."]
    assert errors["criteria.0.kind"] == ["Kind 'nope' is not a known criterion kind."]
    assert errors["criteria.1.name"] == ["Name 'a' is already used by criterion 1."]
    assert errors["criteria.1.weight"] == ["Weight must be 0 or more (got -0.5)."]
    assert errors["criteria.1.params.pattern"][0].startswith("invalid regular expression")
    assert errors["criteria.2.weight"] == ["Weight must be a number."]
    assert "criteria.2.params.case_sensitive" in errors
    assert errors["criteria.2.params"][0].startswith("Unknown field(s)")
    assert errors["criteria.3.name"] == ["Name is required."]
    assert errors["criteria.3.params.min_len"] == ["must be ≤ max length"]


def test_it_names_rubric_rows_from_one():
    assert describe_path("criteria.1.params.pattern") == "Criterion 2 · params.pattern"
    assert describe_path("criteria.0") == "Criterion 1"
    assert describe_path("aggregation") == "aggregation"


def test_it_checks_judge_templates_and_patterns():
    errors = validate_rubric(
        rubric(("j", "llm_judge", 1.0, {"template": "Rate {reply}", "score_pattern": "score"}))
    )
    assert "unknown field(s) {reply}" in errors["criteria.0.params.template"][0]
    assert errors["criteria.0.params.score_pattern"] == ["needs a capturing group ( … ) around the score"]


def test_it_rejects_shapes_that_are_not_rubrics():
    assert validate_rubric([]) == {"": ["must be an object with 'aggregation' and 'criteria'"]}
    assert validate_rubric({"criteria": []}) == {"criteria": ["A rubric needs at least one criterion."]}
    with pytest.raises(InvalidRubric) as exc:
        build_rubric({"criteria": [{"name": "x", "kind": "regex", "params": {"pattern": "["}}]})
    assert "criteria.0.params.pattern" in exc.value.errors


# ---- criteria ------------------------------------------------------------------------------------


def test_numeric_match_extracts_numbers():
    assert one("numeric_match", {}, trajectory("so <answer>19</answer>")).raw == 1.0
    assert one("numeric_match", {}, trajectory("12 + 7 = 19")).raw == 1.0
    assert one("numeric_match", {"extract": "first_number"}, trajectory("12 + 7 = 19")).raw == 0.0
    assert one("numeric_match", {"extract": "answer_tag"}, trajectory("12 + 7 = 19")).raw == 0.0
    assert one("numeric_match", {}, trajectory("<answer>1,234.0</answer>", answer="1234")).raw == 1.0
    assert one("numeric_match", {"rel_tolerance": 0.1}, trajectory("<answer>20</answer>")).raw == 1.0
    assert one("numeric_match", {"abs_tolerance": 0.5}, trajectory("<answer>20</answer>")).raw == 0.0
    assert "not a number" in one("numeric_match", {}, trajectory("19", answer="nineteen")).explanation
    assert find_numbers("12-7 is 5, -3 and 2.5e3") == [12, 7, 5, -3, 2500]


def test_exact_match_normalises():
    assert one("exact_match", {}, trajectory("<answer>  Paris </answer>", answer="paris")).raw == 1.0
    assert (
        one("exact_match", {"case_sensitive": True}, trajectory("<answer>Paris</answer>", answer="paris")).raw
        == 0.0
    )
    assert one("exact_match", {"strip_punctuation": True}, trajectory("Paris.", answer="paris")).raw == 1.0
    assert (
        one("exact_match", {"match": "contains"}, trajectory("It is Paris, France.", answer="paris")).raw
        == 1.0
    )
    assert one("exact_match", {"extract": "answer_tag"}, trajectory("Paris", answer="Paris")).raw == 0.0
    assert one("exact_match", {"target": "Lyon"}, trajectory("Lyon", answer="Paris")).raw == 1.0


def test_regex_scopes_and_per_turn_rewards():
    traj = trajectory(
        "<answer>19</answer>", turns_before=[Turn("assistant", CALL), Turn("tool", "Result: 19")]
    )
    assert one("regex", {"pattern": r"<answer>\d+</answer>"}, traj).raw == 1.0
    assert one("regex", {"pattern": "sorry", "must_match": False}, traj).raw == 1.0
    assert one("regex", {"pattern": "ANSWER", "flags": ["IGNORECASE"]}, traj).raw == 1.0
    each = one("regex", {"pattern": "<answer>", "scope": "each_assistant"}, traj)
    assert each.raw == 0.5 and each.turn_rewards == {1: 0.0, 3: 1.0}


def test_a_catastrophically_backtracking_pattern_gives_up_and_scores_as_failing():
    started = time.monotonic()
    result = one("regex", {"pattern": r"(a|aa)+$"}, trajectory("a" * 40 + "b"))
    assert time.monotonic() - started < 5
    assert result.raw == 0.0 and "gave up" in result.explanation


def test_a_long_trajectory_gets_one_time_budget_for_all_its_matches():
    turns = [Turn("assistant", "a" * 40 + "b") for _ in range(20)]
    started = time.monotonic()
    result = one(
        "regex",
        {"pattern": r"(a|aa)+$", "scope": "each_assistant"},
        trajectory("a" * 40 + "b", turns_before=turns),
    )
    assert time.monotonic() - started < 5  # 21 timeouts of 0.5 s would take 10.5 s
    assert result.raw == 0.0 and "on 21 text(s)" in result.explanation


def test_format_gives_partial_credit():
    checks = {"checks": ["answer_tag", "tool_call_syntax", "used_tool", "nothing_after_answer"]}
    good = trajectory(
        "<answer>19</answer>", turns_before=[Turn("assistant", CALL), Turn("tool", "Result: 19")]
    )
    assert one("format", checks, good).raw == 1.0
    bad = trajectory(
        "<answer>19</answer> hope that helps",
        turns_before=[Turn("assistant", "<tool_call>{calc}</tool_call>")],
    )
    result = one("format", checks, bad)
    assert result.raw == 0.25 and result.turn_rewards == {1: 0.0}


def test_overlong_penalty_follows_dapo():
    params = {"max_len": 10, "buffer": 4, "unit": "words"}
    values = [one("overlong_penalty", params, trajectory(" ".join(["w"] * n))).raw for n in (5, 6, 8, 10, 11)]
    assert values == [0.0, 0.0, -0.5, -1.0, -1.0]
    by_tokens = one(
        "overlong_penalty", {"max_len": 10, "buffer": 4}, trajectory("short", token_ids=list(range(9)))
    )
    assert by_tokens.raw == -0.75 and "9 tokens" in by_tokens.explanation
    by_words = one("overlong_penalty", {"max_len": 10, "buffer": 4}, trajectory("short"))
    assert by_words.raw == 0.0 and "1 words" in by_words.explanation
    with pytest.raises(CriterionUnavailable):
        one("overlong_penalty", {"unit": "tokens"}, trajectory("no token ids"))


def test_length_in_range():
    params = {"min_len": 4, "max_len": 8, "unit": "chars"}
    assert [one("length", params, trajectory("x" * n)).raw for n in (2, 4, 8, 12, 16, 20)] == [
        0.5,
        1,
        1,
        0.5,
        0,
        0,
    ]


def test_tool_calls_counts_failures_and_extras():
    ok_call = [
        Turn("assistant", CALL, tool_name="calculator"),
        Turn("tool", "Result: 19", tool_result="Result: 19"),
    ]
    failed = [
        Turn("assistant", "<tool_call>{oops</tool_call>"),
        Turn("tool", "Error: bad JSON", tool_result="Error: bad JSON"),
    ]
    params = {"min_calls": 1, "max_calls": 2, "penalty_per_extra_call": 0.5, "penalty_per_failed_call": 0.25}
    assert one("tool_calls", params, trajectory("<answer>19</answer>")).raw == 0.0  # below the range
    good = one("tool_calls", params, trajectory("<answer>19</answer>", turns_before=ok_call))
    assert good.raw == 1.0 and good.turn_rewards == {1: 0.5}
    many = one("tool_calls", params, trajectory("x", turns_before=ok_call * 3 + failed))
    # 4 calls (2 extra), 1 failed: 0 − 2·0.5 − 0.25
    assert many.raw == -1.25
    assert many.turn_rewards == {1: 0.5, 3: 0.5, 5: -0.5, 7: -0.25}


def test_env_reward_and_custom_python():
    traj = trajectory("x", env_reward=0.7)
    assert one("env_reward", {}, traj).raw == 0.7
    custom = one(
        "custom_python",
        {"function": "tests.trainers.reward_fns:length_bonus", "args": {"per_char": 0.5}},
        traj,
    )
    assert custom.raw == 0.5 and custom.provenance["function"] == "tests.trainers.reward_fns:length_bonus"
    with pytest.raises(CriterionUnavailable, match="not importable"):
        one("custom_python", {"function": "no_such_module:f"}, traj)
    with pytest.raises(CriterionUnavailable, match="entry point group"):
        one("custom_python", {"function": "not_registered_anywhere"}, traj)
    assert validate_rubric(rubric(("c", "custom_python", 1.0, {"function": "__import__('os').system('x')"})))


# ---- aggregation ---------------------------------------------------------------------------------


def test_weighted_sum_applies_weights():
    spec = rubric(("correct", "numeric_match", 2.0), ("format", "format", 0.5, {"checks": ["answer_tag"]}))
    score = score_trajectory(spec, trajectory("<answer>19</answer>"))
    assert [c.weighted for c in score.components] == [2.0, 0.5]
    assert score.total == 2.5
    wrong = score_trajectory(spec, trajectory("20"))
    assert wrong.total == 0.0 and [c.raw for c in wrong.components] == [0.0, 0.0]


def test_group_normalized_sum_uses_z_scores():
    spec = rubric(
        ("correct", "numeric_match", 2.0), ("env", "env_reward", 1.0), aggregation="group_normalized_sum"
    )
    group = [
        trajectory("<answer>19</answer>"),
        trajectory("<answer>3</answer>"),
        trajectory("<answer>19</answer>"),
        trajectory("no"),
    ]
    scores = score_group(spec, group)
    # correct raws 1,0,1,0: mean 0.5, std 0.5 → z = ±1; env reward is 0 for all → zero variance → 0
    assert [s.components[0].normalized for s in scores] == [1.0, -1.0, 1.0, -1.0]
    assert [s.components[1].normalized for s in scores] == [0.0] * 4
    assert [s.total for s in scores] == [2.0, -2.0, 2.0, -2.0]
    assert scores[0].components[0].raw == 1.0  # raw stays visible next to the weighted value


def test_total_is_always_the_sum_of_weighted_components():
    rng = random.Random(7)
    kinds = [
        ("numeric_match", {}),
        ("format", {"checks": ["answer_tag", "used_tool"]}),
        ("overlong_penalty", {"max_len": 6, "buffer": 3}),
        ("length", {"min_len": 2, "max_len": 5}),
        ("tool_calls", {}),
        ("regex", {"pattern": r"\d", "scope": "each_assistant"}),
        ("env_reward", {}),
    ]
    finals = ["<answer>19</answer>", "19", "I think 20", CALL, "", "<answer>19</answer> and more words here"]
    for aggregation in ("weighted_sum", "group_normalized_sum"):
        for _ in range(30):
            chosen = rng.sample(kinds, rng.randint(1, len(kinds)))
            spec = rubric(
                *[(f"c{i}", k, round(rng.uniform(0, 3), 3), p) for i, (k, p) in enumerate(chosen)],
                aggregation=aggregation,
            )
            group = [
                trajectory(rng.choice(finals), env_reward=rng.random()) for _ in range(rng.randint(1, 6))
            ]
            for score in score_group(spec, group):
                assert score.total == sum(c.weighted for c in score.components)
                assert all(math.isfinite(c.weighted) for c in score.components)
                assert score.to_dict()["total"] == score.total


def test_turn_rewards_combine_weighted_criteria():
    spec = rubric(
        ("tools", "tool_calls", 2.0, {"max_calls": 1}),
        ("fmt", "format", 1.0, {"checks": ["tool_call_syntax"]}),
    )
    traj = trajectory(
        "<answer>19</answer>", turns_before=[Turn("assistant", CALL), Turn("tool", "Result: 19")]
    )
    assert score_trajectory(spec, traj).turn_rewards == {1: 2.0 * 1.0 + 1.0 * 1.0}


# ---- model criteria and the preview --------------------------------------------------------------


def test_llm_judge_batches_caches_and_keeps_the_explanation():
    clear_judge_cache()
    seen: list[list[str]] = []

    def judge(prompts):
        seen.append(prompts)
        return ["Correct sum. Score: 8" if "<answer>19" in p else "Wrong. Score: 2/10" for p in prompts]

    spec = rubric(("judge", "llm_judge", 1.0, {"model": "tiny-judge"}))
    group = [
        trajectory("<answer>19</answer>"),
        trajectory("<answer>20</answer>"),
        trajectory("<answer>19</answer>"),
    ]
    scores = score_group(spec, group, generate=judge)
    assert [s.components[0].raw for s in scores] == [0.8, 0.2, 0.8]
    assert len(seen) == 1 and len(seen[0]) == 2  # one batch, identical prompts asked once
    assert "Correct sum" in scores[0].components[0].explanation
    assert scores[0].components[0].provenance["judge_model"] == "tiny-judge"
    again = score_group(spec, group, generate={"tiny-judge": judge})
    assert len(seen) == 1 and again[0].components[0].provenance["cache_hit"] is True


def test_llm_judge_unparsable_reply_uses_the_fallback():
    clear_judge_cache()
    spec = rubric(("judge", "llm_judge", 1.0, {"on_parse_failure": -1.0}))
    score = score_trajectory(
        spec, trajectory("<answer>19</answer>"), generate=lambda ps: ["I refuse." for _ in ps]
    )
    assert score.total == -1.0 and "No score found" in score.components[0].explanation


def test_preview_skips_criteria_that_need_a_model():
    clear_judge_cache()
    spec = rubric(
        ("correct", "numeric_match", 1.0),
        ("judge", "llm_judge", 5.0),
        ("rm", "learned_reward", 1.0, {"path": "/nonexistent/rm"}),
    )
    with pytest.raises(CriterionUnavailable):
        score_trajectory(spec, trajectory("<answer>19</answer>"))
    score = score_trajectory(spec, trajectory("<answer>19</answer>"), skip_unavailable=True)
    assert score.total == 1.0
    assert [c.skipped for c in score.components] == [False, True, True]
    assert "Reward model directory not found: /nonexistent/rm" in score.components[2].explanation


# ---- transcripts ---------------------------------------------------------------------------------


def test_parse_plain_chat_transcript():
    text = f"system: You add.\nuser: What is 12 + 7?\nassistant: {CALL}\ntool: Result: 19\nassistant: It is\n<answer>19</answer>"
    traj = parse_transcript(text, answer=19)
    assert [t.role for t in traj.turns] == ["system", "user", "assistant", "tool", "assistant"]
    assert traj.turns[2].tool_name == "calculator" and traj.turns[2].tool_args == {"expression": "12+7"}
    assert traj.turns[3].tool_result == "Result: 19" and traj.turns[3].tool_name == "calculator"
    assert traj.final_answer == "It is\n<answer>19</answer>" and traj.task.prompt == "What is 12 + 7?"
    assert score_trajectory(rubric(("c", "numeric_match", 1.0)), traj).total == 1.0


def test_parse_json_and_chatml_and_bare_text():
    as_json = parse_transcript(
        '{"task": {"id": "a", "prompt": "2+2?", "answer": 4}, "turns": [{"role": "user", "text": "2+2?"}, {"role": "assistant", "text": "4"}], "env_reward": 1}'
    )
    assert as_json.task.answer == 4 and as_json.env_reward == 1.0 and as_json.final_answer == "4"
    as_list = parse_transcript([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    assert as_list.final_answer == "hello"
    chatml = parse_transcript("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>")
    assert [t.role for t in chatml.turns] == ["user", "assistant"]
    bare = parse_transcript("The answer is 4.")
    assert [t.role for t in bare.turns] == ["assistant"]
    with pytest.raises(ValueError, match="role"):
        parse_transcript([{"role": "narrator", "text": "x"}])
    with pytest.raises(ValueError, match="does not parse"):
        parse_transcript('{"turns": [')

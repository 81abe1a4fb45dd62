"""The judge check on the judge example (reasoning-gym one-digit sums): the bundled 135M judge scores the
reference answer and another task's answer alike, so it cannot tell right from wrong — the judge that
drove bench/learning.py --judge's collapse — while a judge that compares the answers can."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from trainers.registry import criterion_kind, environment_kind
from trainers.rubrics.judge import clear_judge_cache
from trainers.rubrics.judge_check import KnownSample, judge_agreement, verifier_samples
from trainers.rubrics.judge_models import JudgePool

EXAMPLE = yaml.safe_load((Path(__file__).parents[3] / "trainers/examples/judge_grpo.yaml").read_text())
JUDGE_PARAMS = EXAMPLE["rubric"]["criteria"][0]["params"]


@pytest.fixture(scope="module")
def samples():
    env_spec = EXAMPLE["environment"]
    return verifier_samples(environment_kind(env_spec["kind"]).build(env_spec["config"]), tasks=3)


def test_the_environments_verifier_grades_the_right_and_the_wrong_answer(samples):
    assert len(samples) == 6
    assert [s.right for s in samples] == [True, False] * 3  # the reference, then another task's answer
    assert all(s.response.startswith("<answer>") for s in samples)


def comparing_judge(prompts: list[str]) -> list[str]:
    """A judge that reads the reference and the student's answer from its prompt and compares them."""
    replies = []
    for prompt in prompts:
        correct = re.search(r"Correct answer: (\S+)", prompt).group(1)
        said = re.search(r"<answer>(.*?)</answer>", prompt).group(1)
        replies.append("Score: 10" if said == correct else "Score: 0")
    return replies


def test_a_judge_that_compares_the_answers_agrees_with_the_verifier(samples):
    judge = criterion_kind("llm_judge").build(JUDGE_PARAMS)
    judge.attach_models(generate=comparing_judge)
    agreement = judge_agreement(judge, samples, source="verifier")
    assert (agreement.accuracy, agreement.auc, agreement.kappa) == (1.0, 1.0, 1.0)
    assert (agreement.right_judged_right, agreement.wrong_judged_wrong) == (3, 3)
    assert agreement.can_tell is True and "tells right from wrong" in agreement.verdict


@pytest.mark.slow
def test_the_bundled_judge_of_the_example_cannot_tell_right_from_wrong(samples):
    clear_judge_cache()  # the comparing judge's replies were cached under the same model name
    judge = criterion_kind("llm_judge").build(JUDGE_PARAMS)
    judge.attach_models(generate=JudgePool(policy_model="smollm2-135m").generate_for(judge))
    agreement = judge_agreement(judge, samples, source="verifier")
    assert agreement.n == 6 and agreement.can_tell is False
    assert agreement.auc is not None and agreement.auc < 0.7
    assert agreement.wrong_judged_right >= 2  # it calls wrong answers right
    assert "cannot tell right from wrong" in agreement.verdict


def test_one_kind_of_sample_says_nothing():
    judge = criterion_kind("llm_judge").build(JUDGE_PARAMS)
    judge.attach_models(generate=comparing_judge)
    only_right = [KnownSample("What is 1 + 1?\nCorrect answer: 2", "<answer>2</answer>", True, "2")]
    agreement = judge_agreement(judge, only_right, source="verifier")
    assert agreement.can_tell is None and agreement.auc is None and agreement.kappa is None

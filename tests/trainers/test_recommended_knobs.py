"""Recommended knobs per model size (trainers.config.recommended_knobs)."""

from trainers.config import (
    DEFAULT_MODEL,
    model_parameter_count,
    recommended_knobs,
    resolve_run_config,
    validate_run_config,
)


def test_the_bundled_model_gets_what_the_learning_bench_measured():
    recommendation = recommended_knobs(DEFAULT_MODEL)
    assert recommendation["knobs"] == {
        "learning_rate": 2e-5,
        "max_new_tokens": 48,
        "eval_tasks": 16,
        "eval_every": 10,
    }
    assert "bench/learning.py" in recommendation["why"] and "SmolLM2-135M" in recommendation["why"]
    assert validate_run_config(resolve_run_config("grpo", recommendation["knobs"])) == {}


def test_sizes_are_read_from_model_names():
    assert model_parameter_count("Qwen/Qwen2.5-0.5B-Instruct") == 0.5e9
    assert model_parameter_count("HuggingFaceTB/SmolLM2-360M-Instruct") == 360e6
    assert model_parameter_count("meta-llama/Llama-3.1-8B") == 8e9
    assert model_parameter_count("gpt2") is None


def test_a_model_with_nothing_measured_keeps_the_defaults_and_says_so():
    assert recommended_knobs("meta-llama/Llama-3.1-8B")["knobs"] == {}
    assert "general defaults" in recommended_knobs("gpt2")["why"]
    assert recommended_knobs("HuggingFaceTB/SmolLM2-360M-Instruct")["knobs"]["learning_rate"] == 2e-5

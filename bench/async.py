"""Bounded async: steps per minute and reward within a fixed wall-clock budget, at max_staleness 0, 1, 2.

    python bench/async.py [--seconds 120] [--staleness 0 1 2] [--samples 8] [--tokens 48] [--set k=v ...]

Each setting trains the bundled SmolLM2-135M-Instruct on the arithmetic environment with one Ray
rollout worker (its own process, one torch thread) and the learner in this process (one torch
thread), so on a 2-core machine each has a core: at max_staleness 0 they take turns; above 0 the
worker samples the next batches while the learner updates. The budget counts from the first step
(after the model, the worker and Ray have started) and ends after the first step that finishes past
it. Printed per setting: steps, steps per minute, the mean training reward over all steps and over
the last three, mean staleness, the sampler/learner log-prob mismatch and the mean importance weight.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._measure import smoke_parser  # noqa: E402


def run(staleness: int, seconds: float, base: dict) -> dict:
    from trainers.recipes.grpo import Trainer
    from trainers.sdk.events import MemorySink

    sink = MemorySink()
    trainer = Trainer({**base, "max_staleness": staleness}, sink=sink)
    trainer.setup()
    try:
        started = time.perf_counter()
        while time.perf_counter() - started < seconds and trainer.step < base["max_steps"]:
            trainer.train_step()
        elapsed = time.perf_counter() - started
    finally:
        trainer.rollouts.close()
    steps = [e["values"] for e in sink.of_type("metrics")]

    def mean(key: str, rows: list[dict]) -> float:
        values = [r[key] for r in rows if key in r]
        return statistics.fmean(values) if values else float("nan")

    return {
        "staleness": staleness,
        "steps": len(steps),
        "seconds": elapsed,
        "steps_per_min": 60 * len(steps) / elapsed,
        "reward": mean("reward/mean", steps),
        "reward_last3": mean("reward/mean", steps[-3:]),
        "staleness_mean": mean("staleness/mean", steps),
        "mismatch": mean("logprob_mismatch/mean", steps),
        "is_weight": mean("is_weight/mean", steps),
        "generate_wait": mean("time/generate", steps),
        "learn": mean("time/forward", steps) + mean("time/backward", steps) + mean("time/optimizer", steps),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--samples", type=int, default=8, help="completions per step (2 prompts)")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    smoke_parser(parser, seconds=5.0, staleness=[0, 1], samples=2, tokens=8)
    args = parser.parse_args()

    import transformers
    import yaml

    transformers.logging.set_verbosity_error()
    base = {
        "max_steps": 10_000,
        "group_size": args.samples // 2,
        "prompts_per_step": 2,
        "max_new_tokens": args.tokens,
        "max_turns": 1,
        "learning_rate": 2e-5,
        "eval_tasks": 0,
        "checkpoint_every": 0,
        "torch_threads": 1,
        "num_rollout_workers": 1,
        "environment": {"kind": "arithmetic_calculator", "config": {}},
    }
    for assignment in args.set:
        key, _, value = assignment.partition("=")
        base[key] = yaml.safe_load(value)
    results = []
    for staleness in args.staleness:
        result = run(staleness, args.seconds, base)
        results.append(result)
        print(
            f"max_staleness {staleness}: {result['steps']} steps in {result['seconds']:.0f} s = "
            f"{result['steps_per_min']:.2f} steps/min; reward {result['reward']:.3f} (last 3: "
            f"{result['reward_last3']:.3f}); staleness {result['staleness_mean']:.2f}; "
            f"log-prob mismatch {result['mismatch']:.4f}; IS weight {result['is_weight']:.3f}; "
            f"per step: waiting for rollouts {result['generate_wait']:.1f} s, learning {result['learn']:.1f} s",
            flush=True,
        )
    first = results[0]
    print()
    for result in results[1:]:
        print(
            f"steps/min max_staleness {result['staleness']} / {first['staleness']}: "
            f"{result['steps_per_min'] / first['steps_per_min']:.2f}"
        )


if __name__ == "__main__":
    main()

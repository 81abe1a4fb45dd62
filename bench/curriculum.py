"""WebRL's curriculum from failures against a fixed task distribution, at equal steps, in the same run.

    python bench/curriculum.py [--steps 12] [--group-size 6] [--eval-tasks 32]
    python bench/curriculum.py --quick            # a few minutes on a 2-core CPU
    python bench/curriculum.py --smoke            # CI's bench lane: it runs, prints, leaves nothing
    python bench/curriculum.py --generator llm    # the curriculum's variants written by an LLM instead
    python bench/curriculum.py --generator both --generator-model smollm2-135m   # both curricula and the fixed arm

Both arms start from the same weights and are evaluated on the same held-out tasks (fixed seeds, the eval
temperature) before and after the same number of steps. The task is reasoning-gym's `basic_arithmetic` with
difficulty levels — one- to three-digit terms, two or three of them — so a failed task has harder and easier
neighbours for the environment's generator to draw from. The fixed arm trains on the environment's task
stream (`curriculum: tasks`); the curriculum arm on `curriculum: from_failures` (failed tasks seed variants
nearest in difficulty, kept while their success rate is in the band, with a replay buffer of past
successes). With `--generator llm` (or `both`: three arms; the smoke runs `llm`) the curriculum's variants
are written by an LLM (`curriculum_generator: llm`, the bundled SmolLM2 unless `--generator-model` / `--base-url` name
another), kept only when the environment's verifier grades their stated answers. Printed: held-out accuracy
and reward before → after for each arm, each curriculum's pool at the end (frontier, replay; tasks born
from failures; what the LLM wrote and had refused, by reason) and each arm's minutes.

WebRL's figures (WebArena-Lite 4.8 % → 42.4 % with Llama-3.1-8B) come from hundreds of steps with an 8B
model; a 135M model at a dozen steps is expected to show little — the numbers printed are the result.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import PhaseRecorder, close_trainer, held_out_change, smoke_parser  # noqa: E402

LEVELS = {
    "min_terms": 2,
    "max_terms": 3,
    "min_digits": 1,
    "max_digits": 3,
    "operators": ["+", "-"],
    "allow_parentheses": False,
    "allow_negation": False,
}


class PoolRecorder(PhaseRecorder):
    """Also the last `task_pool` event the curriculum sent (its state at the end of the arm), and the
    variants generated and refused (by reason) over all its steps."""

    pool: dict[str, Any] | None = None
    generated = 0
    refused: dict[str, int]

    def emit(self, event: dict) -> None:
        if event.get("type") == "task_pool":
            self.pool = event
            self.generated += int(event.get("generated") or 0)
            self.refused = getattr(self, "refused", {})
            for reason, count in (event.get("refused") or {}).items():
                self.refused[reason] = self.refused.get(reason, 0) + int(count)
        super().emit(event)


def arm(config: dict[str, Any], steps: int, before: dict[str, float] | None) -> dict[str, Any]:
    """Evaluate (unless `before` is given: the same weights were evaluated already), train, evaluate."""
    from trainers.recipes.grpo import Trainer

    sink = PoolRecorder()
    trainer = Trainer(config, sink=sink)
    started = time.perf_counter()
    try:
        trainer.setup()
        before = before or trainer.evaluate()
        for _ in range(steps):
            last = trainer.train_step()
            print(
                f"  step {trainer.step}/{steps}: train accuracy {100 * last.get('accuracy', 0):.0f}%",
                flush=True,
            )
        return {
            "before": before,
            "after": trainer.evaluate(),
            "pool": sink.pool,
            "generated": sink.generated,
            "refused": getattr(sink, "refused", {}),
            "minutes": (time.perf_counter() - started) / 60,
        }
    finally:
        close_trainer(trainer)
        sink.close()


def pool_line(name: str, result: dict[str, Any]) -> str:
    pool = result.get("pool")
    if not pool:
        return f"{name}: no task pool event (the arm sent none)"
    entries = pool.get("entries") or []
    born = sum(1 for entry in entries if entry.get("parent"))
    refused = result.get("refused") or {}
    written = ""
    if str(pool.get("generator", "")).startswith("llm:"):
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(refused.items())) or "none"
        written = (
            f"; {pool['generator']} wrote {result.get('generated', 0)} kept variants, "
            f"{sum(refused.values())} refused ({reasons})"
        )
    return (
        f"{name}: pool after step {pool.get('step')}: {pool.get('size')} tasks, {pool.get('frontier')} on the "
        f"frontier, {pool.get('replay')} in the replay buffer, {born} born from failures; the last step drew "
        f"{pool.get('drawn')}{written}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--group-size", type=int, default=6)
    parser.add_argument("--prompts", type=int, default=2, help="groups per step")
    parser.add_argument("--eval-tasks", type=int, default=32)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--quick", action="store_true", help="--steps 4 --group-size 4 --eval-tasks 12")
    parser.add_argument(
        "--generator",
        choices=["environment", "llm", "both"],
        default="environment",
        help="what writes the curriculum's variants: the environment's generator, an LLM, or both (two arms)",
    )
    parser.add_argument("--generator-model", default="smollm2-135m", help="the LLM generator's model")
    parser.add_argument("--base-url", default="", help="an OpenAI-compatible endpoint serving it (…/v1)")
    parser.add_argument("--key-env", default="", help="the environment variable holding the endpoint's key")
    parser.add_argument(
        "--generator-tokens", type=int, default=160, help="the LLM's answer tokens per failure"
    )
    smoke_parser(parser, steps=1, group_size=2, prompts=1, eval_tasks=1, generator="llm", generator_tokens=48)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.group_size, args.eval_tasks = 4, 4, 12

    import transformers

    from trainers.cli import load_config

    transformers.logging.set_verbosity_error()
    base = load_config(str(ROOT / "trainers" / "examples" / "reasoning_gym_grpo.yaml"), args.set)
    base["environment"]["config"]["dataset_config"] = dict(LEVELS)
    shared = {
        "group_size": args.group_size,
        "prompts_per_step": args.prompts,
        "max_steps": args.steps,
        "eval_tasks": args.eval_tasks,
        "eval_every": 0,
        "checkpoint_every": 0,
    }
    if "--smoke" in sys.argv[1:]:
        shared["max_new_tokens"] = 8
    fixed = {**base, **shared, "curriculum": "tasks"}
    curriculum = {**base, **shared, "curriculum": "from_failures", "curriculum_generator": "environment"}
    written = {
        **curriculum,
        "curriculum_generator": "llm",
        "curriculum_generator_model": args.generator_model,
        "curriculum_generator_base_url": args.base_url,
        "curriculum_generator_api_key_secret": args.key_env,  # a CLI run reads the variable of that name
        "curriculum_generator_max_new_tokens": args.generator_tokens,
    }
    arms = {
        "environment": [("curriculum from failures", curriculum)],
        "llm": [("curriculum, LLM variants", written)],
        "both": [("curriculum from failures", curriculum), ("curriculum, LLM variants", written)],
    }[args.generator]
    print(
        f"reasoning_gym basic_arithmetic, {LEVELS['min_digits']}-{LEVELS['max_digits']} digits, "
        f"{LEVELS['min_terms']}-{LEVELS['max_terms']} terms: {args.steps} steps of {args.prompts} groups of "
        f"{args.group_size}; {args.eval_tasks} held-out tasks",
        flush=True,
    )
    results: list[tuple[str, dict[str, Any]]] = []
    before = None
    for name, config in arms:
        print(name, flush=True)
        results.append((name, arm(config, args.steps, before)))
        before = results[0][1]["before"]  # the same weights and held-out seeds
    print("fixed task distribution", flush=True)
    plain = arm(fixed, args.steps, before)

    print(f"\n{'arm':<26} {'held-out accuracy %':>24} {'held-out reward ×100':>24} {'minutes':>8}")
    for name, result in [*results, ("fixed distribution", plain)]:
        print(
            f"{name:<26} {held_out_change(result, 'accuracy'):>24} {held_out_change(result, 'reward/mean'):>24} "
            f"{result['minutes']:>8.1f}"
        )
    for name, result in results:
        print(pool_line(name, result))


if __name__ == "__main__":
    main()

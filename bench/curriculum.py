"""WebRL's curriculum from failures against a fixed task distribution, at equal steps, in the same run.

    python bench/curriculum.py [--steps 12] [--group-size 6] [--eval-tasks 32]
    python bench/curriculum.py --quick            # a few minutes on a 2-core CPU
    python bench/curriculum.py --smoke            # CI's bench lane: it runs, prints, leaves nothing

Both arms start from the same weights and are evaluated on the same held-out tasks (fixed seeds, the eval
temperature) before and after the same number of steps. The task is reasoning-gym's `basic_arithmetic` with
difficulty levels — one- to three-digit terms, two or three of them — so a failed task has harder and easier
neighbours for the environment's generator to draw from. The fixed arm trains on the environment's task
stream (`curriculum: tasks`); the curriculum arm on `curriculum: from_failures` (failed tasks seed variants
nearest in difficulty, kept while their success rate is in the band, with a replay buffer of past
successes). Printed: held-out accuracy and reward before → after for each arm, the curriculum's pool at
the end (frontier, replay, retired; tasks born from failures) and each arm's minutes.

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
    """Also the last `task_pool` event the curriculum sent (its state at the end of the arm)."""

    pool: dict[str, Any] | None = None

    def emit(self, event: dict) -> None:
        if event.get("type") == "task_pool":
            self.pool = event
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
            "minutes": (time.perf_counter() - started) / 60,
        }
    finally:
        close_trainer(trainer)
        sink.close()


def pool_line(pool: dict[str, Any] | None) -> str:
    if not pool:
        return "no task pool event (the curriculum arm sent none)"
    entries = pool.get("entries") or []
    born = sum(1 for entry in entries if entry.get("parent"))
    return (
        f"pool after step {pool.get('step')}: {pool.get('size')} tasks, {pool.get('frontier')} on the frontier, "
        f"{pool.get('replay')} in the replay buffer, {born} born from failures; the last step drew "
        f"{pool.get('drawn')}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--group-size", type=int, default=6)
    parser.add_argument("--prompts", type=int, default=2, help="groups per step")
    parser.add_argument("--eval-tasks", type=int, default=32)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--quick", action="store_true", help="--steps 4 --group-size 4 --eval-tasks 12")
    smoke_parser(parser, steps=1, group_size=2, prompts=1, eval_tasks=1)
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
    curriculum = {**base, **shared, "curriculum": "from_failures"}
    print(
        f"reasoning_gym basic_arithmetic, {LEVELS['min_digits']}-{LEVELS['max_digits']} digits, "
        f"{LEVELS['min_terms']}-{LEVELS['max_terms']} terms: {args.steps} steps of {args.prompts} groups of "
        f"{args.group_size}; {args.eval_tasks} held-out tasks",
        flush=True,
    )
    print("curriculum from failures", flush=True)
    grown = arm(curriculum, args.steps, None)
    print("fixed task distribution", flush=True)
    plain = arm(fixed, args.steps, grown["before"])  # the same weights and held-out seeds

    print(f"\n{'arm':<26} {'held-out accuracy %':>24} {'held-out reward ×100':>24} {'minutes':>8}")
    for name, result in (("curriculum from failures", grown), ("fixed distribution", plain)):
        print(
            f"{name:<26} {held_out_change(result, 'accuracy'):>24} {held_out_change(result, 'reward/mean'):>24} "
            f"{result['minutes']:>8.1f}"
        )
    print(pool_line(grown["pool"]))


if __name__ == "__main__":
    main()

"""Training-Free GRPO against plain GRPO on the same task set, in the same run of the bench.

    python bench/training_free.py [--tasks 16] [--epochs 2] [--group-size 5] [--eval-tasks 32]
    python bench/training_free.py --quick            # a few minutes on a 2-core CPU
    python bench/training_free.py --env reasoning_gym:basic_arithmetic
    python bench/training_free.py --experience-model NAME --base-url URL --key-env VAR   # an API model

Both arms start from the same weights, see the same `--tasks` training tasks for `--epochs` epochs (groups
of `--group-size`, two prompts a step) and are evaluated on the same held-out set (fixed seeds, the eval
temperature) before and after. Training-Free GRPO changes no weight: the groups with a contrast go to the
experience model (by default the policy itself, the bundled 135M model) and its edits build the library in
the prompt; GRPO takes an optimizer step per step. Printed: held-out accuracy and reward before → after for
each arm, what the library cost (the experience model's prompt and answer tokens, the prompt tokens the
library adds to every rollout), each arm's minutes, and the final library.

The paper's figures (math Mean@32 71.6 → 74.6) come from a large API model writing the experiences; a
135M model writing them is expected to add little or nothing — the numbers printed are the result.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import PhaseRecorder, close_trainer, held_out_change, smoke_parser  # noqa: E402


def arm(trainer_class: Any, config: dict[str, Any], steps: int, before: dict[str, float] | None) -> dict:
    """Evaluate (unless `before` is given: the same weights were evaluated already), train `steps`, evaluate."""
    sink = PhaseRecorder()
    trainer = trainer_class(config, sink=sink)
    started = time.perf_counter()
    try:
        trainer.setup()
        before = before or trainer.evaluate()
        last: dict[str, float] = {}
        for _ in range(steps):
            last = trainer.train_step()
            print(
                f"  step {trainer.step}/{steps}: train reward {last.get('reward/mean', 0):.3f}, "
                f"accuracy {100 * last.get('accuracy', 0):.0f}%"
                + (f", library {last['experience/items']:.0f}" if "experience/items" in last else ""),
                flush=True,
            )
        after = trainer.evaluate()
        library = getattr(trainer, "library", None)
        added = len(trainer.learner.tokenizer(library.prompt_block())["input_ids"]) if library else 0
        return {
            "before": before,
            "after": after,
            "last": last,
            "minutes": (time.perf_counter() - started) / 60,
            "library": dict(library.items) if library else {},
            "library_prompt_tokens": added,
        }
    finally:
        close_trainer(trainer)
        sink.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "trainers" / "examples" / "arithmetic_grpo.yaml"))
    parser.add_argument("--env", default=None, metavar="reasoning_gym:TASK")
    parser.add_argument("--tasks", type=int, default=16, help="training tasks the epochs go over")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=5)
    parser.add_argument("--eval-tasks", type=int, default=32)
    parser.add_argument("--experience-model", default="policy")
    parser.add_argument(
        "--base-url", default="", help="an OpenAI-compatible endpoint for the experience model"
    )
    parser.add_argument("--key-env", default="", help="the environment variable holding the endpoint's key")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--quick", action="store_true", help="--tasks 4 --epochs 1 --group-size 4 --eval-tasks 12"
    )
    smoke_parser(parser, tasks=1, epochs=1, group_size=2, eval_tasks=1)
    args = parser.parse_args()
    if args.quick:
        args.tasks, args.epochs, args.group_size, args.eval_tasks = 4, 1, 4, 12

    import transformers

    from trainers.cli import load_config
    from trainers.recipes.grpo import Trainer
    from trainers.recipes.training_free_grpo import TrainingFreeGRPO

    transformers.logging.set_verbosity_error()
    assignments = list(args.set)
    if args.env:
        kind, _, task = args.env.partition(":")
        if kind != "reasoning_gym" or not task:
            parser.error("--env takes reasoning_gym:<task>")
        args.config = str(ROOT / "trainers" / "examples" / "reasoning_gym_grpo.yaml")
        assignments.insert(0, f"environment.config.dataset={task}")
    prompts = 2 if args.tasks >= 2 else 1
    steps = max(1, args.epochs * args.tasks // prompts)
    shared = {
        "group_size": args.group_size,
        "prompts_per_step": prompts,
        "max_steps": steps,
        "eval_tasks": args.eval_tasks,
        "eval_every": 0,
        "checkpoint_every": 0,
    }
    if "--smoke" in sys.argv[1:]:
        shared.update({"max_new_tokens": 8, "max_turns": 1})
    base = load_config(args.config, assignments)
    # GRPO sees the same tasks: the task stream of a run of `tasks × epochs / prompts` steps, cut to the set.
    grpo = {**base, **shared}
    training_free = {
        **base,
        **shared,
        "preset": "training_free_grpo",
        "experience_task_set": args.tasks,
        "experience_model": args.experience_model,
        "experience_base_url": args.base_url,
        "experience_api_key_secret": args.key_env,
    }
    if args.key_env and args.key_env not in os.environ:
        parser.error(f"--key-env {args.key_env}: no such environment variable")
    print(
        f"{base['environment']['kind']} {base['environment']['config'].get('dataset', '')}: {args.tasks} training "
        f"tasks × {args.epochs} epochs = {steps} steps of {prompts} groups of {args.group_size}; "
        f"{args.eval_tasks} held-out tasks; experiences from {args.experience_model}",
        flush=True,
    )

    class GRPOOnTheSet(Trainer):
        def setup(self) -> None:
            super().setup()
            self.sampler.train_tasks = self.sampler.train_tasks[: args.tasks]

    print("Training-Free GRPO", flush=True)
    free = arm(TrainingFreeGRPO, training_free, steps, None)
    print("GRPO", flush=True)
    # The same weights and held-out seeds: the starting evaluation is the one just made.
    plain = arm(GRPOOnTheSet, grpo, steps, free["before"])

    print("\nfinal library:")
    for key, text in free["library"].items():
        print(f"  [{key}] {text}")
    last = free["last"]
    print(f"\n{'arm':<20} {'held-out accuracy %':>24} {'held-out reward ×100':>24} {'minutes':>8}")
    for name, result in (("Training-Free GRPO", free), ("GRPO", plain)):
        print(
            f"{name:<20} {held_out_change(result, 'accuracy'):>24} {held_out_change(result, 'reward/mean'):>24} "
            f"{result['minutes']:>8.1f}"
        )
    print(
        f"library cost: {last.get('experience/tokens_total', 0):.0f} experience-model tokens over {steps} steps "
        f"(prompt {last.get('experience/prompt_tokens', 0):.0f} + answer "
        f"{last.get('experience/completion_tokens', 0):.0f} at the last step); the library adds "
        f"{free['library_prompt_tokens']} prompt tokens to every rollout ({len(free['library'])} insights)"
    )


if __name__ == "__main__":
    main()

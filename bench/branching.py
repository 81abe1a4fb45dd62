"""Branching rollouts (ARPO) against plain GRPO at an equal sample budget, in the same run of the bench.

    python bench/branching.py [--steps 10] [--group-size 8] [--eval-tasks 32]
    python bench/branching.py --quick          # ~15 minutes on a 2-core CPU
    python bench/branching.py --set branch_budget_split=entropy --set entropy_balanced_clip=true   # AEPO

Both arms start from the same weights (the bundled SmolLM2-135M unless --set model=…), train `--steps` steps
on the same tasks of the calculator environment (trainers/examples/arithmetic_grpo.yaml: a tool-using task),
each step `prompts_per_step` groups of `--group-size` samples — the branching arm's group size is its
budget, so both arms generate the same number of trajectories — and are evaluated on the same held-out
set (fixed seeds, independent samples) before and after. Printed per arm: held-out accuracy and reward
before → after, held-out tool calls per solved task, and in training the tool calls spent per solved sample
(a branch's shared prefix ran its tools once, so its own segment's calls count), branches per step, minutes.

ARPO's claim (on 13 benchmarks, Qwen2.5/3 7–14B): better accuracy than trajectory-level GRPO with about half
the tool calls. A 135M model over a handful of steps is not expected to show it; the numbers are the result.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import PhaseRecorder, close_trainer, smoke_parser  # noqa: E402


def held_out_tool_calls_per_solved(trainer: Any) -> tuple[dict[str, float], float]:
    """Evaluate once; (the eval metrics, tool calls per solved held-out task)."""
    evaluate, seen = trainer.sampler.evaluate, []

    def keeping(*args: Any, **kwargs: Any) -> Any:
        groups = evaluate(*args, **kwargs)
        seen.extend(r for g in groups for r in g)
        return groups

    trainer.sampler.evaluate = keeping
    try:
        metrics = trainer.evaluate()
    finally:
        trainer.sampler.evaluate = evaluate
    calls = sum(sum(1 for t in r.trajectory.turns if t.role == "assistant" and t.tool_name) for r in seen)
    solved = sum(1 for r in seen if r.trajectory.info.get("correct"))
    return metrics, calls / solved if solved else float("nan")


def arm(config: dict[str, Any], steps: int) -> dict[str, Any]:
    from trainers.recipes.grpo import Trainer
    from trainers.rollout.branching import spent_tool_calls

    sink = PhaseRecorder()
    trainer = Trainer(config, sink=sink)
    spent = {"calls": 0, "solved": 0, "samples": 0, "branches": 0}
    started = time.perf_counter()
    try:
        trainer.setup()
        sample = trainer.sampler.sample

        def counting(*args: Any, **kwargs: Any) -> Any:
            sampled = sample(*args, **kwargs)
            for r in (r for g in sampled.generated for r in g):
                turns = [(t.role, t.tool_name) for t in r.trajectory.turns]
                spent["calls"] += spent_tool_calls(turns, r.branch)
                spent["solved"] += bool(r.trajectory.info.get("correct"))
                spent["samples"] += 1
                spent["branches"] += r.branch is not None
            return sampled

        trainer.sampler.sample = counting
        before, before_calls = held_out_tool_calls_per_solved(trainer)
        for _ in range(steps):
            last = trainer.train_step()
            print(
                f"  step {trainer.step}/{steps}: train reward {last.get('reward/mean', 0):.3f}, "
                f"accuracy {100 * last.get('accuracy', 0):.0f}%, branches so far {spent['branches']}",
                flush=True,
            )
        after, after_calls = held_out_tool_calls_per_solved(trainer)
        return {
            "before": before,
            "after": after,
            "calls_before": before_calls,
            "calls_after": after_calls,
            "spent": spent,
            "minutes": (time.perf_counter() - started) / 60,
        }
    finally:
        close_trainer(trainer)
        sink.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "trainers" / "examples" / "arithmetic_grpo.yaml"))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=2, help="groups per step")
    parser.add_argument("--eval-tasks", type=int, default=32)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="both arms")
    parser.add_argument("--quick", action="store_true", help="--steps 3 --group-size 4 --eval-tasks 12")
    smoke_parser(parser, steps=1, group_size=2, prompts=1, eval_tasks=1)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.group_size, args.eval_tasks = 3, 4, 12

    import transformers

    from trainers.cli import load_config

    transformers.logging.set_verbosity_error()
    shared = {
        "group_size": args.group_size,
        "prompts_per_step": args.prompts,
        "max_steps": args.steps,
        "eval_tasks": args.eval_tasks,
        "eval_every": 0,
        "checkpoint_every": 0,
    }
    if "--smoke" in sys.argv[1:]:
        shared.update({"max_new_tokens": 8, "max_turns": 2})
    base = {**load_config(args.config, list(args.set)), **shared}
    budget = args.steps * args.prompts * args.group_size
    print(
        f"{base['environment']['kind']}: {args.steps} steps × {args.prompts} groups × {args.group_size} samples "
        f"= {budget} training trajectories per arm; {args.eval_tasks} held-out tasks",
        flush=True,
    )
    print("GRPO (independent samples)", flush=True)
    plain = arm({**base, "rollout_strategy": "independent"}, args.steps)
    print("GRPO + branching rollouts (ARPO)", flush=True)
    branched = arm({**base, "rollout_strategy": "branching"}, args.steps)

    def change(result: dict, key: str) -> str:
        b, a = 100 * result["before"].get(f"eval/{key}", 0.0), 100 * result["after"].get(f"eval/{key}", 0.0)
        return f"{b:5.1f} → {a:5.1f} ({a - b:+.1f})"

    print(
        f"\n{'arm':<12} {'held-out accuracy %':>22} {'held-out reward ×100':>22} {'eval calls/solved':>18} "
        f"{'train calls/solved':>19} {'branches':>9} {'minutes':>8}"
    )
    for name, result in (("GRPO", plain), ("branching", branched)):
        spent = result["spent"]
        per_solved = spent["calls"] / spent["solved"] if spent["solved"] else float("nan")
        calls = f"{result['calls_before']:.2f} → {result['calls_after']:.2f}"
        print(
            f"{name:<12} {change(result, 'accuracy'):>22} {change(result, 'reward/mean'):>22} {calls:>18} "
            f"{per_solved:>19.2f} {spent['branches']:>9} {result['minutes']:>8.1f}"
        )
    print(
        f"each arm generated {plain['spent']['samples']} / {branched['spent']['samples']} training trajectories "
        "(equal budget); figures from a 2-core CPU shared with other work are noisy"
    )


if __name__ == "__main__":
    main()

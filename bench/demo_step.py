"""The demo's own training step, timed: `manage.py demo`'s run (environment, rubric and knobs from
seed_demo) for a few steps in this process, no dashboard.

    python bench/demo_step.py [--steps 3] [--baseline] [--turns] [--avx2] [--set key=value ...]

Prints each step's time, where it went (generation, learner forward/backward, optimizer), the sampled
tokens per second and the process's peak resident memory, beside the goals (issue 25: multi-turn
generation ≥ 50 tokens/s, a step ≤ 30 s). `--baseline` runs the same steps again in this process the
way the trainer ran them before (every turn re-encoded from scratch; the learner's whole batch in one
autograd graph) and prints the ratios. `--turns` runs them again with generation scheduling rows instead
of turns (`TransformersBackend(continuous=True)`: continuous batching, issue 37.6; the default still
decodes a turn of every episode at a time), alternating with the default so that a shared machine's load
falls on both, and prints the ratios. `--avx2` re-runs this script with PyTorch and oneDNN held to
AVX2 (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA): a CPU without bf16 matrix units, as on most laptops.
`--set key=value` changes one of the demo's knobs (JSON where it parses: `--set activation_checkpointing=true`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import smoke_parser  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))


def demo_config(steps: int, knobs: dict | None = None) -> dict:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()
    from webapp.core.management.commands.seed_demo import DEMO_ENVIRONMENT, DEMO_RUBRIC, DEMO_RUN

    return {
        "preset": DEMO_RUN["preset"],
        **DEMO_RUN["overrides"],
        "max_steps": steps,
        "eval_tasks": 0,
        "checkpoint_every": 0,
        "environment": {"kind": DEMO_ENVIRONMENT["kind"], "config": DEMO_ENVIRONMENT["config"]},
        "rubric": DEMO_RUBRIC["spec"],
        **(knobs or {}),
    }


def run(config: dict, baseline: bool, continuous: bool = False) -> tuple[list[dict], int, float]:
    """(each step's metrics, peak RSS in bytes, seconds to the first step's end)."""
    from _measure import PhaseRecorder

    from trainers.recipes.grpo import Trainer

    if baseline:
        config = {**config, "micro_batch_tokens": 0}
    recorder = PhaseRecorder()
    trainer = Trainer(config, sink=recorder)
    trainer.setup()
    if baseline:
        trainer.rollouts.backend.prefix_budget_bytes = 0  # no session: every turn encoded from scratch
    trainer.rollouts.backend.continuous = continuous
    started = time.perf_counter()
    first = 0.0
    while trainer.step < config["max_steps"]:
        trainer.train_step()
        first = first or time.perf_counter() - started
    recorder.close()
    return recorder.steps, recorder.peak, first


def report(label: str, steps: list[dict], peak: int) -> None:
    from _measure import gib

    print(f"\n{label}")
    print(
        f"  {'step':>4} {'total':>7} {'generate':>9} {'tokens/s':>9} {'forward':>8} {'backward':>9} {'optim':>6}"
    )
    for i, m in enumerate(steps, 1):
        print(
            f"  {i:>4} {m['step_time']:>6.1f}s {m['time/generate']:>8.1f}s {m['tokens_per_s']:>9.1f} "
            f"{m.get('time/forward', 0):>7.1f}s {m.get('time/backward', 0):>8.1f}s {m.get('time/optimizer', 0):>5.1f}s"
        )
    print(f"  peak resident memory {gib(peak)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--baseline", action="store_true", help="also run the previous path, same process")
    parser.add_argument("--turns", action="store_true", help="also generate a turn at a time, same process")
    parser.add_argument("--avx2", action="store_true", help="hold PyTorch and oneDNN to AVX2")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="one of the demo's knobs"
    )
    smoke_parser(parser, steps=1)
    args = parser.parse_args()
    if args.avx2 and os.environ.get("ATEN_CPU_CAPABILITY") != "avx2":
        env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
        argv = [a for a in sys.argv[1:] if a != "--avx2"]
        sys.exit(subprocess.call([sys.executable, __file__, *argv], env=env))

    import torch

    from trainers.models import cpu_runs_fast

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU dispatch "
        f"{torch.backends.cpu.get_cpu_capability()}, bf16 matrix units: {cpu_runs_fast(torch.bfloat16)}"
    )
    from _measure import knob_overrides

    config = demo_config(args.steps, knob_overrides(args.set))
    if args.set:
        print(f"the demo's knobs with {', '.join(args.set)}")
    steps, peak, first = run(config, baseline=False)
    report("this trainer", steps, peak)
    later = steps[1:] or steps
    step_time = statistics.median(m["step_time"] for m in later)
    tokens = statistics.median(m["tokens_per_s"] for m in later)
    print(f"\nfirst step done {first:.1f} s after the model was loaded")
    print(f"generation (median after the first step): {tokens:.1f} tokens/s   goal ≥ 50")
    print(f"step time (median after the first step): {step_time:.1f} s   goal ≤ 30")
    if args.turns:
        compare_schedules(config, steps)
    if args.baseline:
        base_steps, base_peak, _ = run(config, baseline=True)
        report("previous path (turns re-encoded, one autograd graph)", base_steps, base_peak)
        base_later = base_steps[1:] or base_steps
        base_time = statistics.median(m["step_time"] for m in base_later)
        base_gen = statistics.median(m["time/generate"] for m in base_later)
        gen = statistics.median(m["time/generate"] for m in later)
        print(
            f"\nratios, this / previous (median after the first step): step {step_time / base_time:.2f}×, "
            f"generation {gen / base_gen:.2f}×, peak memory {peak / base_peak:.2f}×"
        )


def compare_schedules(config: dict, turn_steps_first: list[dict]) -> None:
    """The same steps with rows scheduled (continuous batching), then turns again (the default): medians of
    each, and their ratio."""
    rows_steps, rows_peak, _ = run(config, baseline=False, continuous=True)
    report("rows scheduled (continuous=True)", rows_steps, rows_peak)
    again, peak, _ = run(config, baseline=False, continuous=False)
    report("a turn at a time again (continuous=False, the default)", again, peak)
    turns = (turn_steps_first[1:] or turn_steps_first) + (again[1:] or again)
    rows = rows_steps[1:] or rows_steps
    for key, label in (("step_time", "step"), ("time/generate", "generation"), ("tokens_per_s", "tokens/s")):
        a, b = statistics.median(m[key] for m in rows), statistics.median(m[key] for m in turns)
        print(f"{label}: rows {a:.1f}, turns {b:.1f}, rows / turns {a / b:.2f}×")


if __name__ == "__main__":
    main()

"""Our DPO step against TRL's DPOTrainer with its defaults, on the same pairs and the bundled model, in the
same run: the time of a step and the peak resident memory of each, and their ratios (goal ≤ 0.5× both).

    python bench/dpo_vs_trl.py [--pairs 8] [--steps 2] [--quick]

Each side runs in a fresh process (resident memory only grows within one). Ours: `trainers.recipes.dpo`
with its defaults (LoRA rank 16, the reference the adapters off, each pair's pass and backward on its
own). TRL's: `DPOTrainer(model, args=DPOConfig(...))` with TRL's defaults (full fine-tuning with a
reference copy, bf16, max_length 1024), told only what a CPU run must be told (`use_cpu`), the batch
(the pairs), the steps and no reporting or saving. The pairs are demo-like: a system prompt and an
arithmetic question (~230 tokens), answers of ~10–50 tokens. `--quick`: 4 pairs, 1 step; `--smoke`: 2.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import smoke_parser  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))

SYSTEM = (
    "You are a careful assistant that solves arithmetic problems. Think step by step, show the working "
    "in a few short lines, and give the final result inside <answer></answer> tags. If a tool is offered, "
    "you may call the calculator with an expression; its result comes back as a tool message. "
) * 4


def demo_pairs(count: int) -> list[dict]:
    """Preference pairs shaped like the demo's snapshot rows: the better answer is right and tagged."""
    rows = []
    for i in range(count):
        a, b = 17 + 7 * i, 5 + 3 * i
        rows.append(
            {
                "prompt": [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"What is {a} + {b}?"},
                ],
                "chosen": [
                    {
                        "role": "assistant",
                        "content": f"{a} plus {b}: {a} + {b} = {a + b}. <answer>{a + b}</answer>",
                    }
                ],
                "rejected": [
                    {
                        "role": "assistant",
                        "content": f"Let me think. {a} and {b} together make about {a + b + 10}, "
                        f"or maybe {a + b - 3}; I am not sure, so I will say {a * 2}.",
                    }
                ],
            }
        )
    return rows


def ours(pairs: int, steps: int) -> dict:
    from _measure import PhaseRecorder

    from trainers.recipes.dpo import train_dpo

    cpu: list[float] = []

    class Recorder(PhaseRecorder):
        """Also this process's CPU seconds per step (from the step's first pass to its metrics): on a
        machine others keep busy, wall time says more about them than about the step."""

        def emit(self, event: dict) -> None:
            if event.get("type") == "phase" and event.get("phase") == "updating" and not event.get("done"):
                self.began = time.process_time()
            elif event.get("type") == "metrics" and event.get("split") == "train":
                cpu.append(time.process_time() - self.began)
            super().emit(event)

    recorder = Recorder()
    with tempfile.TemporaryDirectory(prefix="dpo-bench-") as out:
        train_dpo(
            demo_pairs(pairs),
            {"max_steps": steps, "batch_size": pairs, "eval_fraction": 0.0, "save_every": 0, "device": "cpu"},
            out_dir=out,
            sink=recorder,
        )
    recorder.close()
    return {"step_time": [m["step_time"] for m in recorder.steps], "step_cpu": cpu, "peak": recorder.peak}


def trl(pairs: int, steps: int) -> dict:
    from _measure import PhaseRecorder
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import DPOConfig, DPOTrainer

    from trainers.models import model_dir

    recorder = PhaseRecorder()  # only its memory sampler
    times: list[float] = []
    cpu: list[float] = []

    class StepTimes(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.began, self.began_cpu = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kwargs):
            times.append(time.perf_counter() - self.began)
            cpu.append(time.process_time() - self.began_cpu)

    path = model_dir("smollm2-135m")
    with tempfile.TemporaryDirectory(prefix="trl-dpo-bench-") as out:
        args = DPOConfig(
            output_dir=out,
            use_cpu=True,
            per_device_train_batch_size=pairs,
            max_steps=steps,
            report_to=[],
            save_strategy="no",
            disable_tqdm=True,
        )
        trainer = DPOTrainer(
            model=AutoModelForCausalLM.from_pretrained(path),
            args=args,
            train_dataset=Dataset.from_list(demo_pairs(pairs)),
            processing_class=AutoTokenizer.from_pretrained(path),
            callbacks=[StepTimes()],
        )
        trainer.train()
    recorder.close()
    return {"step_time": times, "step_cpu": cpu, "peak": recorder.peak, "bf16": bool(args.bf16)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="4 pairs, 1 step")
    parser.add_argument("--child", choices=["ours", "trl"], help=argparse.SUPPRESS)
    smoke_parser(parser, pairs=2, steps=1)
    args = parser.parse_args()
    if args.quick:
        args.pairs, args.steps = 4, 1
    if args.child:
        result = (ours if args.child == "ours" else trl)(args.pairs, args.steps)
        print("RESULT " + json.dumps(result), flush=True)
        return
    from _measure import gib

    from trainers.models import model_dir

    model_dir("smollm2-135m")  # converted once, before either side is timed
    results = {}
    for side in ("ours", "trl"):
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                side,
                "--pairs",
                str(args.pairs),
                "--steps",
                str(args.steps),
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise SystemExit(f"{side} failed:\n{done.stderr[-3000:]}")
        results[side] = json.loads(
            next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:]
        )
    # The fastest step (the first also warms the allocator up); CPU seconds beside wall seconds.
    step = {side: min(r["step_time"]) for side, r in results.items()}
    cpu = {side: min(r["step_cpu"]) for side, r in results.items()}
    print(f"DPO on the bundled model, {args.pairs} pairs a step, {args.steps} step(s), this machine")
    print(f"  {'':<8}{'step time':>12}{'CPU time':>12}{'peak memory':>16}")
    for side, r in results.items():
        print(f"  {side:<8}{step[side]:>10.1f} s{cpu[side]:>10.1f} s{gib(r['peak']):>16}")
    time_ratio, memory_ratio = step["ours"] / step["trl"], results["ours"]["peak"] / results["trl"]["peak"]
    print(f"  TRL's bf16 default: {results['trl']['bf16']}")
    print(
        f"ratio ours/TRL: time {time_ratio:.2f}× (CPU time {cpu['ours'] / cpu['trl']:.2f}×), peak memory "
        f"{memory_ratio:.2f}×   goal ≤ 0.5× both: {'met' if time_ratio <= 0.5 and memory_ratio <= 0.5 else 'not met'}"
    )
    print(f"our step on {args.pairs} pairs: {step['ours']:.1f} s (goal ≤ 15 s on 8 pairs)")


if __name__ == "__main__":
    main()

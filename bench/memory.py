"""Where a CPU run's memory goes: the peak resident memory of each phase of a GRPO run with the demo's
knobs, for the bundled SmolLM2-135M and for a 0.5B-class model (Qwen2.5-0.5B's shape, random weights
built from its config: no download).

    python bench/memory.py [--steps 2] [--models bundled,0.5b,dpo] [--eval-tasks 4] [--set key=value ...]

`dpo`: a DPO run on the bundled model beside them (`trainers.recipes.dpo` with its defaults, 8 demo-like
pairs a step, bench/dpo_vs_trl.py's), its phases in the same rows (scoring: the reference's log-probs).

Each model runs in a fresh process (resident memory only grows within one). Prints, per phase (loading,
evaluating, generating, scoring, updating, syncing), the highest resident set size sampled while it
was under way, and what the process held after the run once the trainer's memory was given back
(`trainers.learn.memory.release_memory`, as the Celery worker does). The floor of full fine-tuning with
AdamW in fp32 is 16 bytes a parameter (weights, gradients, two moments): 2.2 GB for 135M, 7.9 GB for
0.5B; the goal for the 135M demo run is ≤ 3 GB peak. `--set key=value` changes one of the demo's knobs
(the value is JSON where it parses as JSON: `--set micro_batch_tokens=256`, `--set lora='{"enabled": true}'`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import smoke_parser  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))

GOAL_BYTES = 3_000_000_000  # issue 25: the 135M demo run ≤ 3 GB peak RSS
PHASES = ("loading", "evaluating", "generating", "scoring", "updating", "syncing", "checkpointing")


def measure(model: str, steps: int, eval_tasks: int, knobs: dict | None = None) -> dict:
    """Run in this process; returns the figures as JSON-able data."""
    from _measure import PhaseRecorder
    from demo_step import demo_config

    from trainers.learn.memory import release_memory, resident_bytes
    from trainers.recipes.grpo import Trainer

    config = {
        **demo_config(steps),
        **(knobs or {}),
        "model": model,
        "eval_tasks": eval_tasks,
        "eval_every": 0,
    }
    recorder = PhaseRecorder()
    Trainer(config, sink=recorder).run()
    recorder.close()
    params = None
    try:
        from transformers import AutoConfig

        from trainers.models import model_dir

        cfg = AutoConfig.from_pretrained(model_dir(model))
        params = cfg.num_parameters if hasattr(cfg, "num_parameters") else None
    except Exception:  # noqa: BLE001 — the parameter count is a nicety
        pass
    release_memory()
    return {
        "model": model,
        "params": params,
        "peaks": recorder.peak_by_phase,
        "peak": recorder.peak,
        "after": resident_bytes(),
        "step_time": [m["step_time"] for m in recorder.steps],
    }


def measure_dpo(steps: int) -> dict:
    """A DPO run of `steps` steps of 8 pairs on the bundled model, in this process."""
    from _measure import PhaseRecorder
    from dpo_vs_trl import demo_pairs

    from trainers.learn.memory import release_memory, resident_bytes
    from trainers.recipes.dpo import train_dpo

    recorder = PhaseRecorder()
    with tempfile.TemporaryDirectory(prefix="memory-bench-dpo-") as out:
        train_dpo(
            demo_pairs(10),
            {"max_steps": steps, "batch_size": 8, "save_every": 0, "device": "cpu"},
            out_dir=out,
            sink=recorder,
        )
    recorder.close()
    release_memory()
    return {
        "model": "smollm2-135m (DPO)",
        "params": None,
        "peaks": recorder.peak_by_phase,
        "peak": recorder.peak,
        "after": resident_bytes(),
        "step_time": [m["step_time"] for m in recorder.steps],
    }


def floor() -> None:
    """What a 135M run holds before any activation: the runtime, the fp32 policy, the bf16 sampling copy,
    a gradient for every parameter and AdamW's two moments after one fused step (the policy's pages are
    mapped from the safetensors file until touched, so they count once the step has read them); then the
    floor of the update (the sampling copy given back, as the trainer does during it) and of generation
    (the copy back, the gradients given back after the update)."""
    import psutil
    import torch
    from demo_step import demo_config

    from trainers.models import load_model, load_tokenizer

    process = psutil.Process()

    def show(label: str) -> None:
        print(f"  {label:<34} {process.memory_info().rss / 2**30:.2f} GiB", flush=True)

    print("resident memory, cumulative (bench/memory.py --floor)")
    import transformers  # noqa: F401

    show("torch and transformers imported")
    demo_config(1)
    show("Django set up")
    model = load_model("smollm2-135m", "cpu", torch.float32)
    show("fp32 policy (mapped)")
    from trainers.learn.memory import release_memory
    from trainers.rollout.backends import make_backend

    tokenizer = load_tokenizer("smollm2-135m")
    sampler = make_backend(
        "transformers", model=load_model("smollm2-135m", "cpu", "bfloat16"), tokenizer=tokenizer
    )
    show("tokenizer, bf16 sampling copy")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    show("a gradient for every parameter")
    optimizer.step()
    show("AdamW moments, policy read")
    sampler.release_weights()
    release_memory()
    show("the update's floor: copy given back")
    sampler.update_weights(model.state_dict())
    optimizer.zero_grad(set_to_none=True)
    release_memory()
    show("generation's floor: gradients given back")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--models", default="bundled,0.5b,dpo")
    parser.add_argument("--eval-tasks", type=int, default=4)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--floor", action="store_true", help="only the 135M run's floor before activations")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="one of the demo's knobs"
    )
    smoke_parser(parser, steps=1, models="bundled", eval_tasks=1)
    args = parser.parse_args()
    if args.floor:
        floor()
        return
    if args.child:
        from _measure import knob_overrides

        knobs = knob_overrides(args.set)
        result = (
            measure_dpo(args.steps)
            if args.child == "dpo"
            else measure(args.child, args.steps, args.eval_tasks, knobs)
        )
        print("RESULT " + json.dumps(result), flush=True)
        return
    from _measure import gib

    from trainers.models import save_random_llama

    with tempfile.TemporaryDirectory(prefix="memory-bench-") as tmp:
        results = []
        for name in args.models.split(","):
            model = {"bundled": "smollm2-135m", "dpo": "dpo"}.get(name) or str(
                save_random_llama("0.5b", Path(tmp) / "half-b")
            )
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    model,
                    "--steps",
                    str(args.steps),
                    "--eval-tasks",
                    str(args.eval_tasks),
                    *(f"--set={pair}" for pair in args.set),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            result = json.loads(
                next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:]
            )
            result["name"] = name
            results.append(result)
    changed = f" with {', '.join(args.set)}" if args.set else ""
    print(
        f"peak resident memory per phase, {args.steps} steps of the demo's knobs{changed}, "
        f"{args.eval_tasks} evaluation tasks"
    )
    print(f"  {'phase':<12}" + "".join(f"{r['name']:>14}" for r in results))
    for phase in PHASES:
        print(f"  {phase:<12}" + "".join(f"{gib(r['peaks'].get(phase, 0)):>14}" for r in results))
    print(f"  {'whole run':<12}" + "".join(f"{gib(r['peak']):>14}" for r in results))
    print(f"  {'after':<12}" + "".join(f"{gib(r['after']):>14}" for r in results))
    for r in results:
        steps = ", ".join(f"{t:.0f} s" for t in r["step_time"])
        print(f"  {r['name']}: steps {steps}")
    bundled = next((r for r in results if r["name"] == "bundled"), None)
    if bundled:
        peak = bundled["peak"]
        verdict = "met" if peak <= GOAL_BYTES else "not met"
        print(
            f"bundled model's run: peak {gib(peak)} ({peak / 1e9:.2f} GB)   goal ≤ 3 GB ({gib(GOAL_BYTES)}): {verdict}"
        )
    dpo = next((r for r in results if r["name"] == "dpo"), None)
    if dpo:
        peak = dpo["peak"]
        verdict = "met" if peak <= GOAL_BYTES else "not met"
        print(f"DPO run (8 pairs a step): peak {gib(peak)} ({peak / 1e9:.2f} GB)   goal ≤ 3 GB: {verdict}")


if __name__ == "__main__":
    main()

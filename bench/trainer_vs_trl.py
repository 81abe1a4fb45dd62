"""One GRPO step, ours vs TRL's GRPOTrainer, alternating in one process.

Same work on both sides: SmolLM2-135M-Instruct in fp32 on CPU, `--threads` torch threads, one
arithmetic prompt per step, a group of 8 completions of up to 32 new tokens (T = 1, stop at eos),
a correctness reward, group-normalised advantages, one on-policy update, AdamW, full fine-tuning,
no KL term, no gradient checkpointing (TRL turns it on by default: `--trl-gradient-checkpointing`
keeps it). TRL runs its own training loop; a callback runs one of our steps after each TRL step,
so both see the same machine load. The first `--warmup` pairs are excluded.

    python bench/trainer_vs_trl.py [--steps 6] [--warmup 1] [--threads 2] [--ours float32,auto] [--trl-bf16]

`--ours` lists our variants, each a trainer of its own, run one after another after each TRL step (same
load for all), by run config `dtype` (`trainers.models.policy_precision`): `float32`, the fp32 path above;
`auto`, the default (fp32 on a CPU); `mixed`, fp32 weights, gradients and AdamW moments with the learner's
passes under bf16 autocast and sampling in a bf16 copy on a CPU with bf16 matrix units (AVX512-BF16/AMX)
— what TRL's own default does (`--trl-bf16`: `bf16=True`, fp32 weights under bf16 autocast), so
`--ours mixed --trl-bf16` is the like-for-like pair in half precision, `--ours float32` without it the
one in fp32.

Per-phase breakdown: ours from the trainer's own timers; TRL's by wrapping its generation, its
generate-and-score, `compute_loss` (forward) and the optimizer callbacks (backward is the rest).
The last line prints the ratio of median wall-clock step times (ours / TRL); the line before it the
ratio of median process CPU time, which a busy machine disturbs less.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._measure import smoke_parser  # noqa: E402

SYSTEM = "You are a helpful assistant. Answer with just the number."


def make_prompts(n: int, seed: int = 0) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        out.append((f"What is {a} + {b}? Answer with just the number.", a + b))
    return out


def reward_of(text: str, answer: int) -> float:
    """1 for the right first number; partial credit (the sum somewhere, any number at all) so that most
    groups have reward variance and both trainers run their update on most steps."""
    numbers = re.findall(r"-?\d+", text)
    if numbers and int(numbers[0]) == answer:
        return 1.0
    if str(answer) in text:
        return 0.5
    return 0.1 if numbers else 0.0


@dataclass
class _Step:
    observation: str | None
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


class BenchEnv:
    """Single-turn arithmetic with the bench's reward; stops at eos only, as TRL does."""

    max_turns = 1
    tools: list[Any] = []
    stop: tuple[str, ...] = ()

    def tasks(self, split: str, n: int, seed: int) -> list[Any]:
        from trainers.types import Task

        return [
            Task(id=f"{split}-{i}", prompt=q, answer=a) for i, (q, a) in enumerate(make_prompts(n, seed + 1))
        ]

    def system_prompt(self) -> str:
        return SYSTEM

    def reset(self, task: Any, seed: int) -> str:
        self.task = task
        return task.prompt

    def step(self, text: str) -> _Step:
        reward = reward_of(text, self.task.answer)
        return _Step(None, reward, True, {"correct": reward == 1.0})

    def state(self) -> dict[str, Any]:
        return {}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--ours", default="float32", help="our learner's dtypes, comma-separated")
    parser.add_argument("--trl-bf16", action="store_true", help="TRL's default bf16 autocast, not fp32")
    parser.add_argument(
        "--generation-dtype",
        default="auto",
        help="our sampler: auto (the fp32 policy itself, as TRL samples) or bfloat16 (a bf16 copy, as the "
        "demo samples; fp32 on a CPU without bf16 units). The learner is fp32 either way.",
    )
    parser.add_argument(
        "--trl-gradient-checkpointing",
        action="store_true",
        help="keep TRL's default gradient checkpointing (recomputes activations in backward); off "
        "by default so both sides do the same arithmetic",
    )
    smoke_parser(parser, steps=1, warmup=0, group=2, tokens=8)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    import transformers
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trainers.models import load_tokenizer, model_dir
    from trainers.recipes.grpo import Trainer

    transformers.logging.set_verbosity_error()
    path = model_dir("smollm2-135m")
    tokenizer = load_tokenizer("smollm2-135m")

    def our_trainer(dtype: str) -> Trainer:
        return Trainer(
            {
                "model": "smollm2-135m",
                "device": "cpu",
                "dtype": dtype,
                "generation_dtype": args.generation_dtype,
                "torch_threads": args.threads,
                "group_size": args.group,
                "prompts_per_step": 1,
                "max_new_tokens": args.tokens,
                "max_turns": 1,
                "temperature": 1.0,
                "learning_rate": args.lr,
                "max_grad_norm": 1.0,
                "max_steps": 10_000,
                "eval_tasks": 0,
                "checkpoint_every": 0,
                "seed": 0,
                "preset": "grpo",
            },
            env_factory=BenchEnv,
        )

    ours = {label: our_trainer(label) for label in args.ours.split(",")}
    for trainer in ours.values():
        trainer.setup()

    dataset = Dataset.from_list(
        [
            {"prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}], "answer": a}
            for q, a in make_prompts(args.steps * 4, seed=2)
        ]
    )

    def trl_reward(prompts: list[Any], completions: list[Any], answer: list[int], **_: Any) -> list[float]:
        return [
            reward_of(c[0]["content"] if isinstance(c, list) else c, a)
            for c, a in zip(completions, answer, strict=True)
        ]

    out_dir = tempfile.mkdtemp(prefix="bench-trl-")
    trl_args = GRPOConfig(
        output_dir=out_dir,
        use_cpu=True,
        per_device_train_batch_size=args.group,
        num_generations=args.group,
        gradient_accumulation_steps=1,
        max_completion_length=args.tokens,
        learning_rate=args.lr,
        beta=0.0,
        loss_type="grpo",
        scale_rewards="group",
        temperature=1.0,
        max_steps=args.steps,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=0,
        bf16=args.trl_bf16,
        max_grad_norm=1.0,
        dataloader_num_workers=0,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        disable_tqdm=True,
        gradient_checkpointing=args.trl_gradient_checkpointing,
    )
    trl_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    trl = GRPOTrainer(
        model=trl_model,
        reward_funcs=[trl_reward],
        args=trl_args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )

    phases: dict[str, float] = {}

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                phases[name] = phases.get(name, 0.0) + time.perf_counter() - t0

        return wrapper

    trl._generate = timed("generate", trl._generate)
    trl._generate_and_score_completions = timed("generate+score", trl._generate_and_score_completions)
    trl.compute_loss = timed("forward", trl.compute_loss)

    rows: list[dict[str, Any]] = []

    class Alternate(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            phases.clear()
            self.started = time.perf_counter()
            self.cpu_started = time.process_time()

        def on_pre_optimizer_step(self, *a: Any, **k: Any) -> None:
            self.optimizer_started = time.perf_counter()

        def on_optimizer_step(self, *a: Any, **k: Any) -> None:
            phases["optimizer"] = time.perf_counter() - self.optimizer_started

        def on_step_end(self, *a: Any, **k: Any) -> None:
            total = time.perf_counter() - self.started
            trl_cpu = time.process_time() - self.cpu_started
            trl_row = {
                "total": total,
                "cpu": trl_cpu,
                "generate": phases.get("generate", 0.0),
                "score": phases.get("generate+score", 0.0) - phases.get("generate", 0.0),
                "forward": phases.get("forward", 0.0),
                "optimizer": phases.get("optimizer", 0.0),
            }
            trl_row["backward"] = total - sum(v for k, v in trl_row.items() if k not in ("total", "cpu"))
            row: dict[str, Any] = {"trl": trl_row}
            for dtype, trainer in ours.items():
                t0, cpu0 = time.perf_counter(), time.process_time()
                metrics = trainer.train_step()
                row[dtype] = {
                    "total": time.perf_counter() - t0,
                    "cpu": time.process_time() - cpu0,
                    "generate": metrics["time/generate"],
                    "score": metrics["time/score"],
                    "forward": metrics.get("time/forward", 0.0),
                    "backward": metrics.get("time/backward", 0.0),
                    "optimizer": metrics.get("time/optimizer", 0.0),
                    "tokens": metrics["response_length"] * args.group,
                    "mismatch": metrics.get("logprob_mismatch/mean", float("nan")),
                }
            rows.append(row)
            line = "; ".join(
                f"{d} {r['total']:.2f}s (gen {r['generate']:.2f} fwd {r['forward']:.2f} bwd {r['backward']:.2f} "
                f"opt {r['optimizer']:.2f}; {r['tokens']:.0f} tokens)"
                for d, r in row.items()
                if d != "trl"
            )
            print(f"pair {len(rows)}: TRL {total:.2f}s  ours {line}", flush=True)

    trl.add_callback(Alternate())
    trl.train()

    measured = rows[args.warmup :] or rows
    load = os.getloadavg()
    labels = list(ours)
    trained = {d: sum(1 for r in measured if r[d]["forward"] > 0) for d in labels}
    print(
        f"\nmedians over {len(measured)} steps (after {args.warmup} warm-up), {args.threads} threads, "
        f"group {args.group} × {args.tokens} tokens, TRL {'bf16 autocast' if args.trl_bf16 else 'fp32'}, "
        f"full fine-tuning; load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}; our "
        f"update ran on {', '.join(f'{trained[d]} ({d})' for d in labels)} of {len(measured)} steps "
        f"(steps whose advantages are all 0 skip it)"
    )
    print(f"{'phase':<12}{'TRL s':>10}" + "".join(f"{d:>12}" for d in labels))
    for phase in ("generate", "score", "forward", "backward", "optimizer", "total", "cpu"):
        values = [statistics.median(r[key][phase] for r in measured) for key in ["trl", *labels]]
        print(f"{phase:<12}{values[0]:>10.2f}" + "".join(f"{v:>12.2f}" for v in values[1:]))
    mismatches = [statistics.median(r[d]["mismatch"] for r in measured) for d in labels]
    print(f"{'mismatch':<12}{'':>10}" + "".join(f"{v:>12.4f}" for v in mismatches))
    trl_total = statistics.median(r["trl"]["total"] for r in measured)
    trl_cpu = statistics.median(r["trl"]["cpu"] for r in measured)
    for d in labels:
        our_total = statistics.median(r[d]["total"] for r in measured)
        our_cpu = statistics.median(r[d]["cpu"] for r in measured)
        per_pair = sorted(r[d]["total"] / r["trl"]["total"] for r in measured)
        print(
            f"ours ({d}): CPU time (all threads) ratio ours/TRL = {our_cpu / trl_cpu:.2f}; per-pair wall "
            f"ratios {', '.join(f'{x:.2f}' for x in per_pair)}"
        )
        print(
            f"ours ({d}): ratio ours/TRL = {our_total / trl_total:.2f} (ours {our_total:.2f} s/step, "
            f"TRL {trl_total:.2f} s/step)   goal ≤ 0.40 (issue 25), "
            f"{'met' if our_total / trl_total <= 0.40 else 'not met'}"
        )


if __name__ == "__main__":
    main()

"""One learner process vs N FSDP2 learner shards: step time and memory per process.

    python bench/learner_shards.py [--shards 2] [--steps 3] [--samples 8] [--tokens 48] [--model smollm2-135m]

One batch of rollouts is sampled once from the bundled SmolLM2-135M-Instruct (arithmetic tasks,
`--samples` completions of up to `--tokens` tokens) and given fixed advantages (±1), so both sides
learn from exactly the same rows. Then `--steps` optimizer steps (the trainer's `update`: forward,
backward, clip, AdamW, and the weight sync that follows) with one process (torch threads = the
machine's cores), and with `--shards` Ray processes sharding the policy with FSDP2 over gloo (the
cores split between them). Per process: the peak resident memory while stepping (the peak is reset
after setup, so model loading does not count) and the bytes of policy state it holds (weights +
gradients + AdamW moments); the sharded side's driver keeps a full copy of the weights for sampling,
reported on its own line.

Printed last: the step-time ratio shards / single and the state and peak memory per learner process.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._measure import smoke_parser  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--model", default="smollm2-135m")
    smoke_parser(parser, steps=1, samples=2, tokens=8)
    args = parser.parse_args()

    import torch
    import transformers

    from trainers.learn.sharded import process_memory
    from trainers.recipes.grpo import Trainer

    transformers.logging.set_verbosity_error()
    cores = os.cpu_count() or 1
    config = {
        "model": args.model,
        "max_steps": 1000,
        "group_size": args.samples // 2,
        "prompts_per_step": 2,
        "max_new_tokens": args.tokens,
        "max_turns": 1,
        "eval_tasks": 0,
        "checkpoint_every": 0,
        "learning_rate": 1e-5,
        "torch_threads": cores,
        "environment": {"kind": "arithmetic_calculator", "config": {}},
    }
    single = Trainer(config)
    single.setup()
    model, tokenizer = single.model, single.learner.tokenizer
    tasks = single.sampler.train_tasks[:2]
    seeds = single.sampler.seeds(2, config["group_size"])
    groups = single.rollouts.generate(
        tasks, seeds, max_turns=1, generation_seed=seeds[0][0], policy_version=0
    )
    rollouts = [r for g in groups for r in g]
    for i, r in enumerate(rollouts):
        r.advantage = 1.0 if i % 2 else -1.0
    tokens = sum(r.model_tokens for r in rollouts)
    print(f"batch: {len(rollouts)} completions, {tokens} sampled tokens; {cores} cores", flush=True)
    initial = copy.deepcopy(model.state_dict())

    def run(trainer: Trainer, label: str) -> list[float]:
        times = []
        for step in range(args.steps):
            started = time.perf_counter()
            trainer.update(copy.deepcopy(rollouts), {})
            times.append(time.perf_counter() - started)
            print(f"  {label} step {step + 1}: {times[-1]:.2f} s", flush=True)
        return times

    process_memory(reset_peak=True)
    single_times = run(single, "1 process")
    single_memory = process_memory()
    state = sum(p.numel() * p.element_size() for p in single.learner.params) * 2 + sum(
        v.numel() * v.element_size()
        for s in single.learner.optimizer.state.values()
        for v in s.values()
        if v.dim() > 0
    )
    single.rollouts.close()

    model.load_state_dict(initial)
    sharded = Trainer({**config, "num_learner_workers": args.shards}, model=model, tokenizer=tokenizer)
    sharded.setup()
    try:
        sharded.learner.shards.info(reset_peak=True)
        process_memory(reset_peak=True)
        shard_times = run(sharded, f"{args.shards} shards")
        shards = sharded.learner.shards.info()
        driver = process_memory()
    finally:
        sharded.rollouts.close()
        sharded.learner.close()

    mib = 1 / 2**20
    one, many = statistics.median(single_times), statistics.median(shard_times)
    print()
    print(
        f"1 process:   step {one:.2f} s (median of {args.steps}); policy state {state * mib:.0f} MiB, "
        f"peak RSS while stepping {single_memory['peak_rss'] * mib:.0f} MiB"
    )
    for s in sorted(shards, key=lambda s: s["rank"]):
        print(
            f"shard {s['rank']}:     policy state {s['state_bytes'] * mib:.0f} MiB "
            f"({s['local_params'] / 1e6:.1f}M parameters), peak RSS while stepping {s['peak_rss'] * mib:.0f} MiB"
        )
    print(
        f"driver ({args.shards} shards): peak RSS while stepping {driver['peak_rss'] * mib:.0f} MiB "
        "(full weights for sampling; no gradients or optimizer state)"
    )
    print(
        f"{args.shards} shards:    step {many:.2f} s (median of {args.steps}; includes gathering the "
        "weights into the driver)"
    )
    print(
        f"ratio step time shards/single: {many / one:.2f}; policy state per learner process: "
        f"{max(s['state_bytes'] for s in shards) / state:.2f} of one process's"
    )
    del torch


if __name__ == "__main__":
    main()

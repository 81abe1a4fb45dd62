"""What per-token statistics (`token_stats`) cost the built-in trainer: the time spent in their own code
per step — the learner copying out its first-epoch log-probs and entropies (`Recorder`), packing each model
turn's statistics with the trajectories (`add_to_item`: the tokenizer's decode per token for the text
lengths, the half-float packing), and the learner's items after the update (`learner_items`) — next to
the step's time, on the demo's shape (the bundled SmolLM2-135M on the arithmetic environment, 2 prompts ×
8 samples, 48 new tokens, 3 turns). The entropy and log-probs themselves are computed by the loss
whether or not the run reports them. Also the packed statistics' size per model token.

    python bench/token_stats_trainer.py [on|off] [steps]     (TOKEN_BENCH_THREADS: torch threads, 1)

Each call is one run in this process; the wall times of on and off runs differ as much as the machine's
load does, so the figure to read is the token-stats code's own time.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench._measure import size  # noqa: E402
from trainers.learn import token_stats  # noqa: E402
from trainers.recipes.grpo import Trainer  # noqa: E402
from trainers.sdk.events import MemorySink  # noqa: E402

DEMO_SHAPE = {
    "preset": "grpo",
    "group_size": 8,
    "prompts_per_step": 2,
    "max_new_tokens": 48,
    "max_turns": 3,
    "learning_rate": 2e-5,
    "max_grad_norm": 1.0,
    "generation_dtype": "bfloat16",
    "checkpoint_every": 0,
    "eval_tasks": 0,
}

spent = {"record": 0.0, "add_to_item": 0.0, "learner_items": 0.0}


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def inner(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - started

    return inner


def main() -> None:
    positional = [arg for arg in sys.argv[1:] if arg != "--smoke"]
    choice = positional[0] if positional else "on"
    steps = int(positional[1]) if len(positional) > 1 else size(2, smoke=1)
    torch.set_num_threads(int(os.environ.get("TOKEN_BENCH_THREADS", "1")))
    # The trainer reaches these through the module: wrapping its attributes times every call.
    token_stats.add_to_item = timed("add_to_item", token_stats.add_to_item)
    token_stats.learner_items = timed("learner_items", token_stats.learner_items)
    hook = token_stats.Recorder.hook
    token_stats.Recorder.hook = lambda self, batch: timed("record", hook(self, batch))  # type: ignore[method-assign]

    sink = MemorySink()
    started = time.perf_counter()
    result = Trainer({**DEMO_SHAPE, "max_steps": steps, "token_stats": choice}, sink=sink).run()
    wall = time.perf_counter() - started
    step_times = [e["values"]["step_time"] for e in sink.of_type("metrics") if e.get("split") == "train"]
    turns = [t for e in sink.of_type("trajectories") for i in e["items"] for t in i["turns"]]
    tokens = sum(len(t.get("token_ids") or []) for t in turns if t["role"] == "assistant")
    packed = sum(len(v) for t in turns for v in (t.get("token_stats") or {}).values())
    packed += sum(
        len(v) for e in sink.of_type("token_stats") for i in e["items"] for v in i["stats"].values()
    )
    code = sum(spent.values())
    print(
        f"token_stats {choice}: {result.status}, {steps} steps in {wall:.1f} s "
        f"(step_time {', '.join(f'{s:.1f}' for s in step_times)} s), {tokens:,} model tokens; "
        f"token-stats code {code * 1000 / steps:.1f} ms a step "
        f"({', '.join(f'{k} {v * 1000 / steps:.1f}' for k, v in spent.items())}); "
        f"packed statistics {packed / max(tokens, 1):.1f} bytes a model token (base64)"
    )


if __name__ == "__main__":
    main()

"""Rollout generation throughput, vLLM backend vs transformers backend, in one process.

Same work on both sides: SmolLM2-135M-Instruct (the bundled GGUF, converted once), fp32, `--threads`
torch threads, `--groups` arithmetic chat prompts each sampled `--n` times (a GRPO group), up to
`--max-new-tokens` new tokens, T = 1, top-p 1, stop at eos or `</answer>`. The two backends alternate
`--rounds` times after one warm-up call each, so both see the same machine load; tokens/s counts the
tokens each actually sampled (lengths differ with the samples) over the wall-clock time of `generate`.
Engine start-up (vLLM compiles its model graph) is timed apart and left out of the rate.

Needs vLLM: run it in `.venv-vllm` (`make venv-vllm`):

    .venv-vllm/bin/python bench/vllm_vs_hf.py [--groups 4] [--n 8] [--max-new-tokens 128] [--rounds 3]

The last line prints the ratio of the medians, vLLM / transformers.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._measure import smoke_parser  # noqa: E402


def make_chats(n: int, seed: int = 0) -> list[list[dict[str, str]]]:
    rng = random.Random(seed)
    chats = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        chats.append(
            [
                {"role": "system", "content": "Think briefly, then answer in <answer></answer> tags."},
                {"role": "user", "content": f"What is {a} + {b}?"},
            ]
        )
    return chats


def timed_generate(
    backend: Any, prompts: list[Any], args: argparse.Namespace, seed: int
) -> tuple[int, float]:
    started = time.perf_counter()
    completions = backend.generate(
        prompts,
        n=args.n,
        max_new_tokens=args.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        stop=["</answer>"],
        seed=seed,
    )
    return sum(len(c.token_ids) for c in completions), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="vLLM with its compiled graph (on a CPU the backend runs eager by default)",
    )
    smoke_parser(parser, groups=1, n=2, max_new_tokens=4, rounds=1)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from trainers.models import load_model_and_tokenizer
    from trainers.rollout.backends import make_backend

    model, tokenizer = load_model_and_tokenizer("smollm2-135m", device="cpu", dtype="float32")
    model.eval()
    started = time.perf_counter()
    vllm = make_backend(
        "vllm",
        model_name="smollm2-135m",
        tokenizer=tokenizer,
        seed=0,
        dtype="float32",
        enforce_eager=not args.compiled,
    )
    startup = time.perf_counter() - started
    hf = make_backend("transformers", model=model, tokenizer=tokenizer)
    backends = {"vllm": vllm, "transformers": hf}

    prompts = [vllm.prompt_token_ids(chat) for chat in make_chats(args.groups)]
    for backend in backends.values():  # warm-up: first-call allocations, lazy initialisation
        backend.generate(prompts[:1], n=2, max_new_tokens=8, seed=0)
    rates: dict[str, list[float]] = {name: [] for name in backends}
    print(
        f"{args.groups} prompts x {args.n} samples, <= {args.max_new_tokens} new tokens, {args.threads} threads, "
        f"vLLM {'compiled' if args.compiled else 'eager'} (start-up {startup:.1f} s)"
    )
    for round_ in range(args.rounds):
        row = []
        for name, backend in backends.items():
            tokens, seconds = timed_generate(backend, prompts, args, seed=1000 + round_)
            rates[name].append(tokens / seconds)
            row.append(f"{name} {tokens} tok in {seconds:.2f} s = {tokens / seconds:.1f} tok/s")
        print(f"round {round_ + 1}: " + "; ".join(row))
    medians = {name: statistics.median(values) for name, values in rates.items()}
    vllm.close()
    print(
        f"ratio vLLM/transformers = {medians['vllm'] / medians['transformers']:.2f} "
        f"(vLLM {medians['vllm']:.1f} tok/s, transformers {medians['transformers']:.1f} tok/s, "
        f"medians of {args.rounds} rounds)"
    )


if __name__ == "__main__":
    main()

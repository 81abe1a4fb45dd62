"""A wide evaluation wave on the transformers backend: many prompts that share a long beginning (system
prompt, tools, worked example), one sample each, greedy, inside one session, as the step-0 evaluation
generates them.

    python bench/eval_wave.py [--prompts 256] [--tokens 256] [--dtype bfloat16]

Runs the same wave twice in this process — as one cache for every row (`wave_bytes` 0, the previous
path) and in waves of at most `DEFAULT_WAVE_BYTES` of KV cache — checks both sampled the same tokens, and
prints the times, the peak resident memory of each and the ratio.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import smoke_parser  # noqa: E402


def peak_rss_during(fn):  # type: ignore[no-untyped-def]
    """(fn's result, seconds, highest resident set size sampled while it ran)."""
    import psutil

    process, peak, stop = psutil.Process(), [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(0.02)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    started = time.perf_counter()
    try:
        result = fn()
    finally:
        stop.set()
        thread.join()
    return result, time.perf_counter() - started, peak[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--wave-mib", type=int, default=0, help="wave budget (default DEFAULT_WAVE_BYTES)")
    parser.add_argument(
        "--old", action="store_true", help="also run the previous path (one cache for all rows)"
    )
    smoke_parser(parser, prompts=4, tokens=4)
    args = parser.parse_args()

    import torch

    from trainers.learn.memory import release_memory, return_large_frees_to_the_os
    from trainers.models import load_model, load_tokenizer
    from trainers.rollout.backends.transformers_backend import DEFAULT_WAVE_BYTES, TransformersBackend

    return_large_frees_to_the_os()
    tokenizer = load_tokenizer("smollm2-135m")
    model = load_model("smollm2-135m", "cpu", args.dtype).eval()
    shared = (
        "You are a careful assistant that solves arithmetic problems. You may call the calculator tool "
        'with <tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call> '
        'and answer with <answer>N</answer>. Example: what is 17 + 25? <tool_call>{"name": '
        '"calculator", "arguments": {"expression": "17+25"}}</tool_call> result 42 <answer>42</answer>. '
    ) * 3
    # Rendered as text, then encoded, as the trainer does: apply_chat_template's tokenized return type
    # changed under us (a dict-like encoding in transformers 5, token ids before).
    prompts = [
        tokenizer(
            tokenizer.apply_chat_template(
                [
                    {"role": "system", "content": shared},
                    {"role": "user", "content": f"What is {i} + {3 * i + 7}?"},
                ],
                tokenize=False,
                add_generation_prompt=True,
            ),
            add_special_tokens=False,
        )["input_ids"]
        for i in range(args.prompts)
    ]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.prompts} prompts of "
        f"{min(map(len, prompts))}–{max(map(len, prompts))} tokens, {args.tokens} new tokens, {args.dtype}"
    )

    def wave(wave_bytes: int):  # type: ignore[no-untyped-def]
        backend = TransformersBackend(model=model, tokenizer=tokenizer, wave_bytes=wave_bytes)
        with backend.session():
            return backend.generate(prompts, n=1, max_new_tokens=args.tokens, temperature=0.0, seed=1)

    budget = args.wave_mib << 20 if args.wave_mib else DEFAULT_WAVE_BYTES
    runs = [("waves", budget)] + ([("one cache (previous)", 0)] if args.old else [])
    results = {}
    for label, wave_bytes in runs:
        release_memory()
        out, seconds, peak = peak_rss_during(lambda wave_bytes=wave_bytes: wave(wave_bytes))
        tokens = sum(len(c.token_ids) for c in out)
        results[label] = (out, seconds, peak)
        print(
            f"  {label:<22} {seconds:7.1f} s  {tokens / seconds:6.1f} tokens/s  peak RSS {peak / 2**30:.2f} GiB"
        )
    if args.old:
        (new, t_new, p_new), (old, t_old, p_old) = results["waves"], results["one cache (previous)"]
        same = sum(a.token_ids == b.token_ids for a, b in zip(new, old, strict=True))
        print(f"  same tokens in {same}/{len(new)} rows (greedy)")
        print(f"ratio waves / previous: time {t_new / t_old:.2f}×, peak memory {p_new / p_old:.2f}×")


if __name__ == "__main__":
    main()

"""Rollouts through the agent gateway vs in process, alternating in one process.

The same episodes both ways: `arithmetic_calculator` (its worked example, the calculator tool, up to
`--turns` model turns of up to `--tokens` new tokens), `--groups` tasks × `--group-size` episodes,
on SmolLM2-135M-Instruct in fp32 on CPU. In process: `generate_rollouts`, as the trainer runs it.
Through the gateway: the `agent` kind with `environment_agent` — an agent that plays the same
environment through the real `openai` client over HTTP on 127.0.0.1, so every model call goes
through request parsing, chat-template rendering, batching, the session record and the reply.

Sampling is greedy, so both sides generate the same tokens (checked) and differ only by the
gateway's work; both sample from a non-main thread (see `in_a_thread`). Per round and side: wall
time, process CPU time, time inside `backend.generate`, batches, model calls.

    python bench/gateway.py [--rounds 4] [--groups 2] [--group-size 4] [--tokens 32] [--turns 3] [--threads 2]

Printed last: the gateway's overhead (its time outside `backend.generate`, less the in-process
loop's) per call and per episode, and ratios gateway / in process: by CPU time, by that overhead
over the rollout time, and by wall time (the noisiest on a shared machine). The goal is at most 1.05.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._measure import smoke_parser  # noqa: E402


class TimedBackend:
    """The real backend, with the time spent in `generate` and the number of calls counted; everything else
    (sessions, weights, what the backend grows next) goes to the backend itself, so the bench does not
    break when the backend's interface does (it did: `'TimedBackend' object has no attribute 'session'`)."""

    def __init__(self, backend: Any) -> None:
        self.backend, self.tokenizer = backend, backend.tokenizer
        self.seconds, self.calls, self.rows = 0.0, 0, 0

    def generate(self, prompts: Sequence[Any], **kwargs: Any) -> list[Any]:
        started = time.perf_counter()
        try:
            return self.backend.generate(prompts, **kwargs)
        finally:
            self.seconds += time.perf_counter() - started
            self.calls += 1
            self.rows += len(prompts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)


def in_a_thread(function: Any, *args: Any, **kwargs: Any) -> Any:
    """Call `function` on a fresh thread, as the gateway samples on its own generation thread.

    On the shared 2-core development machine (load 12-22 from other jobs) the same torch ops ran up
    to 15x slower from the main thread than from any other thread (2000 small `linear`s: 54 s vs
    3.6 s), so both sides sample from a non-main thread and only the gateway's own work differs."""
    out: list[Any] = []
    failed: list[BaseException] = []

    def call() -> None:
        try:
            out.append(function(*args, **kwargs))
        except BaseException as exc:  # re-raised on the calling thread below
            failed.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return out[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    smoke_parser(parser, rounds=1, groups=1, group_size=2, tokens=4, turns=1)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from trainers.envs.agent import AgentEnv, environment_agent
    from trainers.envs.arithmetic import ArithmeticCalculatorEnv
    from trainers.models import load_model_and_tokenizer
    from trainers.rollout.backends import make_backend
    from trainers.rollout.chat import ChatFormat
    from trainers.rollout.episodes import generate_rollouts
    from trainers.rollout.toolformats import resolve_tool_format

    model, tokenizer = load_model_and_tokenizer("smollm2-135m", device="cpu", dtype="float32")
    model.eval()
    chat = ChatFormat(tokenizer, resolve_tool_format("auto", tokenizer))

    def make_env() -> ArithmeticCalculatorEnv:
        return ArithmeticCalculatorEnv(max_digits=2)

    agent_env = AgentEnv(
        agent=environment_agent(make_env, tool_format=chat.tool_format),
        tasks=[{"prompt": "-"}],
        timeout_s=3600,
    )
    options = dict(
        max_turns=args.turns,
        max_new_tokens=args.tokens,
        max_context_tokens=2048,
        temperature=0.0,
        top_p=1.0,
        stop=chat.tool_format.stop,
    )
    results: dict[str, list[dict[str, float]]] = {"in process": [], "gateway": []}
    print(
        f"{args.groups} tasks x {args.group_size} episodes, <= {args.turns} turns of <= {args.tokens} tokens, "
        f"{args.threads} threads, greedy"
    )
    for round_ in range(args.rounds + 1):  # round 0 warms up both paths and is not counted
        tasks = make_env().tasks("train", args.groups, seed=round_)
        seeds = [[1000 * round_ + 10 * g + s for s in range(args.group_size)] for g in range(args.groups)]
        tokens: dict[str, list[list[int]]] = {}
        for side in ("in process", "gateway") if round_ % 2 == 0 else ("gateway", "in process"):
            backend = TimedBackend(make_backend("transformers", model=model, tokenizer=tokenizer))
            started, cpu = time.perf_counter(), time.process_time()
            if side == "in process":
                groups = in_a_thread(
                    generate_rollouts,
                    backend,
                    chat,
                    make_env,
                    tasks,
                    seeds,
                    generation_seed=round_,
                    **options,
                )
            else:
                groups = agent_env.drive_rollouts(
                    backend, chat, tasks, seeds, generation_seed=round_, **options
                )
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
            rollouts = [r for g in groups for r in g]
            tokens[side] = [r.completion_ids for r in rollouts]
            calls = sum(1 for r in rollouts for t in r.trajectory.turns if t.role == "assistant")
            if round_:
                results[side].append(
                    {
                        "wall": wall,
                        "cpu": cpu,
                        "generate": backend.seconds,
                        "batches": backend.calls,
                        "calls": calls,
                        "episodes": len(rollouts),
                        "tokens": sum(sum(r.loss_mask) for r in rollouts),
                    }
                )
                print(
                    f"round {round_} {side:>10}: {wall:6.2f} s wall, {cpu:6.2f} s CPU, {backend.seconds:6.2f} s in generate, "
                    f"{backend.calls:2d} batches, {calls} calls, {results[side][-1]['tokens']:.0f} sampled tokens"
                )
        same = tokens["in process"] == tokens["gateway"]
        print(f"round {round_}: identical tokens on both sides: {same}" + ("" if round_ else " (warm-up)"))

    def median(side: str, key: str) -> float:
        return statistics.median(r[key] for r in results[side])

    def outside(side: str) -> float:  # time not spent sampling: what the gateway adds
        return statistics.median(r["wall"] - r["generate"] for r in results[side])

    local, remote = median("in process", "wall"), median("gateway", "wall")
    calls, episodes = median("gateway", "calls"), median("gateway", "episodes")
    extra = outside("gateway") - outside("in process")
    print(
        f"median rollout time: in process {local:.2f} s, gateway {remote:.2f} s "
        f"(CPU {median('in process', 'cpu'):.2f} s vs {median('gateway', 'cpu'):.2f} s)"
    )
    print(
        f"time outside backend.generate per round: in process {outside('in process'):.3f} s, "
        f"gateway {outside('gateway'):.3f} s"
    )
    print(
        f"gateway overhead per call: {1000 * extra / calls:.1f} ms ({calls:.0f} calls); "
        f"per episode: {1000 * extra / episodes:.1f} ms ({episodes:.0f} episodes)"
    )
    print(
        f"ratio gateway / in process, CPU time: {median('gateway', 'cpu') / median('in process', 'cpu'):.3f}"
    )
    print(f"ratio gateway / in process, overhead over rollout time: {(local + extra) / local:.3f}")
    print(f"ratio gateway / in process, rollout wall time: {remote / local:.3f}")


if __name__ == "__main__":
    main()

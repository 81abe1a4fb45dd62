"""What the Tinker-compatible service adds to a step: the same RL loop through the service and in-process.

    python bench/tinker_overhead.py [--steps 6] [--group 8] [--tokens 32] [--port 8766]

The loop is the cookbook's rl_loop step on the bundled SmolLM2 (LoRA rank 8): freeze the weights for
sampling → sample a group of `--group` completions of `--tokens` tokens → one `forward_backward` with
`importance_sampling` on them (advantages: reward = length parity, centred) → `optim_step`.

- service: the real `tinker` SDK against `manage.py demo --no-launch` (daphne + a Celery worker + the
  embedded redis-server, a throwaway state folder): every call goes HTTP → Redis → the worker's
  `trainers.tinker.serve` and back, protobuf bodies as the SDK sends them.
- in-process: the same parts the worker calls (`trainers.tinker.compute.TinkerModel`), called directly.
- our GRPO step (`trainers.recipes.grpo.Trainer`, as bench/demo_step.py runs it) on work of the same size:
  one prompt of the demo's arithmetic environment, a group of `--group`, `--tokens` new tokens, one turn,
  LoRA rank 8 — for scale, not the same loop (its rollouts go through an environment and a rubric, its
  learner micro-batches; `--no-grpo` skips it).

Both run the same seeds against one running demo and take turns, step for step (which goes first
alternates; never at once: they would share the CPUs), so each service step has an in-process step beside
it that saw the same load of the machine. The first step of each pays for warm-up and is not counted; the
figure is the median of the paired ratios (the ratio of the median steps is printed too), against the goal
(the service adds ≤ 10 %). Wall time on a loaded machine is noisy, so the bench also meters CPU seconds
per step by process — the worker, daphne, the control worker, redis, the SDK client (this process) — which
count what each part did whatever the load; the load average is printed at the start and the end.
`OMP_NUM_THREADS` (inherited by the demo's worker) sets both loops' torch threads.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._measure import smoke_parser  # noqa: E402

PROMPT = "Question: name three colours of the rainbow.\nAnswer:"
GOAL_OVERHEAD = 0.10


def phases(started: float, sampled_at: float, sampled_tokens: int) -> dict[str, float]:
    """A step's seconds: in all, to the samples (weights frozen + sampled), and training on them; and how
    many tokens it sampled (the same seeds and weights sample the same tokens: the same work)."""
    now = time.perf_counter()
    return {
        "step": now - started,
        "sample": sampled_at - started,
        "train": now - sampled_at,
        "tokens": float(sampled_tokens),
    }


def advantages_of(groups: list[list[int]]) -> list[float]:
    """The toy reward (1 for an even number of tokens) centred over the group, as rl_loop centres it."""
    rewards = [1.0 if len(tokens) % 2 == 0 else 0.0 for tokens in groups]
    mean = sum(rewards) / len(rewards)
    return [r - mean for r in rewards]


def rl_datum(prompt: list[int], tokens: list[int], logprobs: list[float], advantage: float) -> dict[str, Any]:
    """rl_loop's datum as plain lists: the prompt and all but the last sampled token in, the sampled
    tokens as targets, their sampling log-probs and the advantage on the completion."""
    ob = len(prompt) - 1
    n = ob + len(tokens)
    return {
        "tokens": prompt + tokens[:-1],
        "target_tokens": [0] * ob + tokens,
        "logprobs": [0.0] * ob + logprobs,
        "advantages": [0.0] * ob + [advantage] * (n - ob),
    }


def cpu_seconds(process: psutil.Process) -> float:
    """User + system CPU seconds of a process, all its threads (0 once it is gone)."""
    try:
        times = process.cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system


def role_of(process: psutil.Process) -> str:
    """Which part of the stack a process of the demo is, by its command line."""
    try:
        line = " ".join(process.cmdline())
    except psutil.Error:
        return "gone"
    for needle, role in (
        ("-Q cpu", "worker (cpu queue)"),
        ("-Q control", "control worker + beat"),
        ("daphne", "daphne (web)"),
        ("redis-server", "redis"),
        ("manage.py demo", "manage.py demo"),
    ):
        if needle in line:
            return role
    return "other"


class CpuMeter:
    """CPU seconds each process spent between each `start()` and its `stop()`, summed by role: unlike wall
    time, what a process does counts whatever else the machine's cores were doing meanwhile."""

    def __init__(self, processes: Callable[[], list[psutil.Process]]) -> None:
        self.processes = processes
        self.started: dict[int, tuple[psutil.Process, float]] = {}
        self.spent: dict[str, float] = {}

    def start(self) -> None:
        self.started = {p.pid: (p, cpu_seconds(p)) for p in self.processes()}

    def stop(self) -> None:
        for process, before in self.started.values():
            role = role_of(process) if process.pid != os.getpid() else "bench (SDK client)"
            self.spent[role] = self.spent.get(role, 0.0) + cpu_seconds(process) - before


class InProcessLoop:
    """The loop's parts called directly: the `trainers.tinker.compute.TinkerModel` the worker calls."""

    role = "in-process"

    def __init__(self, args: argparse.Namespace) -> None:
        from trainers.tinker.compute import LoraSpec, TinkerModel

        self.args = args
        self.model = TinkerModel("smollm2-135m", LoraSpec(rank=8, seed=0), device="cpu")
        self.prompt = self.model.tokenizer.encode(PROMPT)

    def step(self, step: int) -> dict[str, float]:
        model, prompt = self.model, self.prompt
        started = time.perf_counter()
        sampler_id = f"step-{step}"
        model.freeze_for_sampler(sampler_id)
        params = {"max_tokens": self.args.tokens, "temperature": 1.0, "seed": step}
        sequences = model.sample(prompt, self.args.group, params, sampler_id)
        sampled_at = time.perf_counter()
        advantages = advantages_of([s["tokens"] for s in sequences])
        datums = []
        for seq, advantage in zip(sequences, advantages, strict=True):
            d = rl_datum(prompt, seq["tokens"], seq["logprobs"], advantage)
            datums.append(
                {
                    "tokens": d["tokens"],
                    "inputs": {
                        name: {"data": d[name], "dtype": "int64" if name == "target_tokens" else "float32"}
                        for name in ("target_tokens", "logprobs", "advantages")
                    },
                }
            )
        model.forward_backward(datums, "importance_sampling")
        model.optim_step({"learning_rate": 1e-4})
        return phases(started, sampled_at, sum(len(s["tokens"]) for s in sequences))


class ServiceLoop:
    """The same loop through the real `tinker` SDK against the demo."""

    role = "service"

    def __init__(self, args: argparse.Namespace, url: str, key: str) -> None:
        import tinker

        self.args = args
        self.service = tinker.ServiceClient(base_url=url, api_key=key)
        self.client = self.service.create_lora_training_client(
            base_model="smollm2-135m", rank=8, seed=0
        ).result()
        self.prompt = self.client.get_tokenizer().encode(PROMPT)

    def step(self, step: int) -> dict[str, float]:
        from tinker import types

        client, prompt = self.client, self.prompt
        started = time.perf_counter()
        sampler = client.save_weights_and_get_sampling_client().result()
        sampled = sampler.sample(
            types.ModelInput.from_ints(prompt),
            self.args.group,
            types.SamplingParams(max_tokens=self.args.tokens, temperature=1.0, seed=step),
        ).result()
        sampled_at = time.perf_counter()
        advantages = advantages_of([list(s.tokens) for s in sampled.sequences])
        datums = []
        for seq, advantage in zip(sampled.sequences, advantages, strict=True):
            d = rl_datum(prompt, list(seq.tokens), list(seq.logprobs or []), advantage)
            datums.append(
                types.Datum(
                    model_input=types.ModelInput.from_ints(d["tokens"]),
                    loss_fn_inputs={n: d[n] for n in ("target_tokens", "logprobs", "advantages")},
                )
            )
        fb = client.forward_backward(datums, "importance_sampling")
        optim = client.optim_step(types.AdamParams(learning_rate=1e-4))
        fb.result(), optim.result()
        return phases(started, sampled_at, sum(len(s.tokens) for s in sampled.sequences))

    def close(self) -> None:
        self.service.close("success").result(timeout=30)


def wait_until_up(url: str, demo: subprocess.Popen, timeout_s: float) -> None:
    import requests

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if demo.poll() is not None:
            raise RuntimeError("manage.py demo exited before it served")
        try:
            if requests.get(f"{url}/healthz", timeout=1).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"manage.py demo did not answer within {timeout_s:.0f} s")


def demo_token(env: dict[str, str]) -> str:
    """A personal API token of the demo user, as the SDK's key (tml-<token>)."""
    code = (
        "from django.contrib.auth import get_user_model; "
        "from webapp.accounts.services import api_token_create; "
        "from webapp.tinker.services import sdk_key; "
        "print(sdk_key(api_token_create(user=get_user_model().objects.get(username='demo'), name='bench')[1]))"
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def demo_processes(demo: subprocess.Popen, state: Path) -> list[psutil.Process]:
    """The bench (the SDK client), the demo and its children (workers, daphne), the embedded redis-server."""
    processes = [psutil.Process()]
    try:
        root = psutil.Process(demo.pid)
        processes += [root, *root.children(recursive=True)]
    except psutil.Error:
        pass
    try:
        processes.append(psutil.Process(int((state / "redis.pid").read_text().strip())))
    except (OSError, ValueError, psutil.Error):
        pass
    return processes


@contextmanager
def demo_stack(args: argparse.Namespace) -> Iterator[tuple[str, str, Callable[[], list[psutil.Process]]]]:
    """`manage.py demo --no-launch` in a throwaway state folder: its URL, an SDK key of the demo user and
    the processes that serve (for the CPU meter); stopped at the end."""
    state = Path(tempfile.mkdtemp(prefix="tinker-bench-"))
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env |= {"ROLLOUT_STUDIO_VAR": str(state), "TINKER_TELEMETRY": "0"}
    url = f"http://127.0.0.1:{args.port}"
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--no-launch", "--port", str(args.port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_until_up(url, demo, 180)
        os.environ["TINKER_TELEMETRY"] = "0"
        yield url, demo_token(env), lambda: demo_processes(demo, state)
    finally:
        os.killpg(demo.pid, signal.SIGINT)
        try:
            demo.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
        shutil.rmtree(state, ignore_errors=True)


def paired_steps(
    loops: list[Any], meters: dict[str, CpuMeter], steps: int
) -> dict[str, list[dict[str, float]]]:
    """`steps` steps of each loop, taking turns (which goes first alternates): both see the same load of
    the machine, step for step. The first step of each warms up: its CPU is not metered."""
    times: dict[str, list[dict[str, float]]] = {loop.role: [] for loop in loops}
    for step in range(steps):
        for loop in loops if step % 2 == 0 else loops[::-1]:
            meter = meters[loop.role] if step > 0 else None
            if meter:
                meter.start()
            times[loop.role].append(loop.step(step))
            if meter:
                meter.stop()
    return times


def grpo_steps(args: argparse.Namespace) -> list[dict[str, float]]:
    sys.path.insert(0, str(ROOT / "bench"))
    from demo_step import demo_config, run

    config = demo_config(
        args.steps,
        {
            "prompts_per_step": 1,
            "group_size": args.group,
            "max_new_tokens": args.tokens,
            "max_turns": 1,
            "lora": {"enabled": True, "r": 8, "alpha": 32, "dropout": 0.0, "target_modules": ["all-linear"]},
            "seed": 0,
        },
    )
    steps, _, _ = run(config, baseline=False)
    return [{"step": float(m["step_time"])} for m in steps]


def torch_threads() -> str:
    """The worker inherits the bench's environment: OMP_NUM_THREADS sets both loops' thread count."""
    return os.environ.get("OMP_NUM_THREADS", f"torch's default ({os.cpu_count()})")


def median_after_warmup(times: list[dict[str, float]], phase: str = "step") -> float:
    counted = times[1:] if len(times) > 1 else times
    return statistics.median(t[phase] for t in counted)


def print_cpu(local: CpuMeter, served: CpuMeter, steps: int) -> None:
    """CPU seconds per counted step, by process: what the service's parts cost whatever the load."""
    local_s = sum(local.spent.values()) / steps
    served_s = sum(served.spent.values()) / steps
    print(
        f"CPU per step: in-process {local_s:.2f} s; service {served_s:.2f} s ({served_s / max(local_s, 1e-9):.2f} ×):"
    )
    for role, seconds in sorted(served.spent.items(), key=lambda item: -item[1]):
        print(f"  {role:24} {seconds / steps:6.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--no-grpo", action="store_true", help="skip our own GRPO step on the same work")
    smoke_parser(parser, steps=2, group=2, tokens=4)
    args = parser.parse_args()

    load_before = os.getloadavg()
    with demo_stack(args) as (url, key, processes):
        local = InProcessLoop(args)
        served = ServiceLoop(args, url, key)
        meters = {"in-process": CpuMeter(lambda: [psutil.Process()]), "service": CpuMeter(processes)}
        try:
            times = paired_steps([local, served], meters, args.steps)
        finally:
            served.close()
    local_times, served_times = times["in-process"], times["service"]
    local_s, served_s = median_after_warmup(local_times), median_after_warmup(served_times)
    print(
        f"loop: sample {args.group} × {args.tokens} tokens → forward_backward (importance_sampling) → optim_step; "
        f"torch threads {torch_threads()}; the two loops take turns, step for step"
    )
    for label, steps in (("in-process step", local_times), ("service step", served_times)):
        print(
            f"{label + ':':17} median {median_after_warmup(steps) * 1000:.0f} ms over {len(steps)} steps "
            f"(first not counted): sample {median_after_warmup(steps, 'sample') * 1000:.0f} ms, "
            f"forward_backward + optim_step {median_after_warmup(steps, 'train') * 1000:.0f} ms"
        )
    # Each service step over the in-process step taken beside it: the load both saw is (nearly) the same.
    ratios = [
        served["step"] / local["step"]
        for local, served in zip(local_times[1:], served_times[1:], strict=True)
    ] or [served_s / local_s]
    paired = statistics.median(ratios)
    verdict = "within" if paired - 1 <= GOAL_OVERHEAD else "over"
    print(f"per step, service / in-process: {' '.join(f'{r:.2f}' for r in ratios)}")
    for label, steps in (("in-process", local_times), ("service", served_times)):
        print(f"tokens sampled per step, {label}: {' '.join(str(int(t['tokens'])) for t in steps)}")
    print(
        f"service / in-process: {paired:.2f} (median of the pairs; of the medians {served_s / local_s:.2f}): "
        f"adds {paired - 1:+.0%}; goal ≤ +10 %: {verdict}"
    )
    print_cpu(meters["in-process"], meters["service"], max(args.steps - 1, 1))
    if not args.no_grpo:
        grpo_s = median_after_warmup(grpo_steps(args))
        print(
            f"our GRPO step on work of that size: median {grpo_s * 1000:.0f} ms "
            f"(service step / GRPO step: {served_s / grpo_s:.2f})"
        )
    print(
        f"load average (1 / 5 / 15 min) at the start: {' / '.join(f'{x:.1f}' for x in load_before)}, "
        f"at the end: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )


if __name__ == "__main__":
    main()

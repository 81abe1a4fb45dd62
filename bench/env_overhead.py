"""Per-step overhead of the OpenEnv client (/ws session and HTTP) against the same environment in-process.

    python bench/env_overhead.py [--steps 2000]

An echo environment built with openenv-core's server classes runs (a) in this process, called
directly (`env.step(action)` plus the observation's serialisation: what a local environment costs),
and (b) as a real server on 127.0.0.1 (uvicorn, started by the `openenv` kind's managed-server code),
driven through `OpenEnvEnvironment.step` over one /ws session and over stateless HTTP. Prints the
median and mean milliseconds per step, the overhead over in-process, and the ratio.
Goal: ≤ 2 ms per step on loopback.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.serialization import serialize_observation
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench._measure import smoke_parser  # noqa: E402


class EchoAction(Action):
    message: str = Field(..., description="Text to echo")


class EchoObservation(Observation):
    message: str = Field(default="", description="The echo")


class EchoEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs) -> EchoObservation:
        self._state = State(episode_id=episode_id, step_count=0)
        return EchoObservation(message="ready")

    def step(self, action: EchoAction, timeout_s=None, **kwargs) -> EchoObservation:  # type: ignore[override]
        self._state.step_count += 1
        return EchoObservation(message=action.message, reward=0.0, done=False)

    @property
    def state(self) -> State:
        return self._state


app = create_app(EchoEnvironment, EchoAction, EchoObservation, env_name="echo", max_concurrent_envs=8)


def timed(step, steps: int) -> list[float]:
    for _ in range(50):  # warm up (connections, caches)
        step()
    samples = []
    for _ in range(steps):
        started = time.perf_counter()
        step()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    smoke_parser(parser, steps=50)
    args = parser.parse_args()

    from trainers.envs.openenv import OpenEnvEnvironment
    from trainers.envs.openenv_server import stop_managed_servers
    from trainers.types import Task

    local = EchoEnvironment()
    local.reset()

    def local_step() -> None:
        serialize_observation(local.step(EchoAction(message="hello, world")))

    results = {"in-process": timed(local_step, args.steps)}
    try:
        for transport in ("ws", "http"):
            env = OpenEnvEnvironment(
                server_app="env_overhead:app", server_cwd=str(HERE), transport=transport, max_turns=10**9
            )
            env.reset(Task(id="bench", prompt="", meta={"seed": 0}), 0)
            results[f"openenv {transport}"] = timed(lambda env=env: env.step("hello, world"), args.steps)
            env.close()
    finally:
        stop_managed_servers()

    base = statistics.median(results["in-process"])
    print(f"{'path':<14} {'median ms':>10} {'mean ms':>9} {'p95 ms':>8} {'overhead ms':>12} {'ratio':>8}")
    for name, samples in results.items():
        median = statistics.median(samples)
        p95 = sorted(samples)[int(len(samples) * 0.95)]
        print(
            f"{name:<14} {median:>10.3f} {statistics.mean(samples):>9.3f} {p95:>8.3f} {median - base:>12.3f} "
            f"{median / base:>7.1f}x"
        )
    ws = statistics.median(results["openenv ws"]) - base
    print(
        f"\nOpenEnv /ws per-step overhead {ws:.2f} ms over in-process ({'within' if ws <= 2 else 'over'} the 2 ms goal); "
        f"HTTP {statistics.median(results['openenv http']) - base:.2f} ms; {args.steps} steps each, loopback."
    )


if __name__ == "__main__":
    main()

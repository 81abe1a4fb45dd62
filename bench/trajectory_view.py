"""How fast the reading pages render on the server: a 300-turn trajectory and the diff of two 100-turn
trajectories.

Real pieces: the project's Django app on a real database (SQLite in a temporary directory, or the
Postgres named by DATABASE_URL), requests through Django's test client with a signed-in viewer, the
whole middleware stack and template rendering. The timings are warm (the first requests, which fill
caches and open the connection, are not counted) and measure the server side only: no network, no
browser. Goals: the 300-turn trajectory page in at most 300 ms, the diff of two 100-turn trajectories
in at most 100 ms (p95 of BENCH_REPEATS requests each). Each request's wall time and this process's
CPU time are both reported: on a shared machine the wall clock also counts waiting for a core. The
last line prints both figures against the goals.

The trajectories look like agent rollouts: user / assistant (with a calculator call) / tool turns,
assistant turns of ~80 words, ~150 token ids per turn with a loss mask (tool and user tokens masked).
The diff's two sides are the same task at two steps: every turn's wording changes a little, a few
turns are inserted and dropped, so nothing is identical and the whole 100 × 100 stretch goes through
the alignment and every pair through the word diff (the hard case).

Environment: DATABASE_URL (default: SQLite in a temporary directory; a Postgres database named there is
created and migrated if missing, and the bench's own rows are deleted afterwards), BENCH_REPEATS (40).
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import _postgres  # noqa: E402
from bench._measure import SMOKE, size  # noqa: E402

TEMP_VAR = None
if not os.environ.get("DATABASE_URL"):
    TEMP_VAR = tempfile.mkdtemp(prefix="trajectory-bench-")
    os.environ["ROLLOUT_STUDIO_VAR"] = TEMP_VAR
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

REPEATS = size(int(os.environ.get("BENCH_REPEATS", "40")), smoke=3)
WARMUP = 5
GOAL_TRAJECTORY_MS = 300.0
GOAL_DIFF_MS = 100.0
WORDS = (
    "the calculator returns value so we add carry digits then check sum answer step first next units tens "
    "because result matches expected format tool call expression number total careful"
).split()


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def agent_turns(rng: random.Random, count: int) -> list[dict]:
    turns = []
    for index in range(count):
        role = ("user", "assistant", "tool")[index % 3] if index else "system"
        words = {"system": 60, "user": 30, "assistant": 80, "tool": 10}[role]
        tokens = {"system": 120, "user": 60, "assistant": 150, "tool": 30}[role]
        item = {
            "role": role,
            "text": sentence(rng, words),
            "token_ids": [rng.randrange(49152) for _ in range(tokens)],
            "loss_mask": [1 if role == "assistant" else 0] * tokens,
            "reward": 0.1 if role == "assistant" else None,
        }
        if role == "assistant":
            item.update(
                tool_name="calculator",
                tool_args={"expression": f"{rng.randrange(100)} + {rng.randrange(100)}"},
            )
        if role == "tool":
            item.update(tool_name="calculator", tool_result=str(rng.randrange(200)), text="")
        turns.append(item)
    return turns


def perturbed(rng: random.Random, turns: list[dict]) -> list[dict]:
    """The same episode at a later step: each turn reworded a little, a few turns inserted or dropped."""
    result = []
    for turn in turns:
        if turn["role"] != "system" and rng.random() < 0.04:
            continue  # dropped
        changed = dict(turn)
        words = changed["text"].split()
        for _ in range(max(1, len(words) // 10)):
            if words:
                words[rng.randrange(len(words))] = rng.choice(WORDS) + "!"
        changed["text"] = " ".join(words)
        if changed.get("tool_args"):
            changed["tool_args"] = {"expression": f"{rng.randrange(100)} * {rng.randrange(100)}"}
        result.append(changed)
        if turn["role"] == "tool" and rng.random() < 0.04:
            result.append({**turn, "text": sentence(rng, 20)})  # an extra tool round trip
    while len(result) < len(turns):
        result.append(
            {"role": "assistant", "text": sentence(rng, 40), "token_ids": [1] * 80, "loss_mask": [1] * 80}
        )
    return result[: len(turns)]


def store(run, turns: list[dict], **fields):
    from webapp.rollouts.models import Trajectory, Turn

    trajectory = Trajectory.objects.create(
        run=run,
        num_turns=len(turns),
        reward=fields.pop("reward", 0.5),
        num_tool_calls=sum(1 for t in turns if t.get("tool_args")),
        **fields,
    )
    Turn.objects.bulk_create(
        [
            Turn(
                trajectory=trajectory,
                index=i,
                role=t["role"],
                text=t.get("text", ""),
                tool_name=t.get("tool_name", ""),
                tool_args=t.get("tool_args"),
                tool_result=t.get("tool_result", ""),
                reward=t.get("reward"),
                token_ids=t.get("token_ids"),
                loss_mask=t.get("loss_mask"),
            )
            for i, t in enumerate(turns)
        ],
        batch_size=200,
    )
    return trajectory


@dataclass
class Timings:
    wall: list[float]  # ms from request to response, as a reader waits for it
    cpu: list[float]  # ms of this process's CPU time: the server's own work, whatever else runs


def timed(client, url: str, expect: bytes) -> Timings:
    for _ in range(WARMUP):
        response = client.get(url)
        assert response.status_code == 200 and expect in response.content, (response.status_code, url)
    result = Timings([], [])
    for _ in range(REPEATS):
        wall, cpu = time.perf_counter(), time.process_time()
        response = client.get(url)
        result.cpu.append((time.process_time() - cpu) * 1000)
        result.wall.append((time.perf_counter() - wall) * 1000)
        assert response.status_code == 200
    return result


def summary(samples: list[float]) -> str:
    return f"p50 {statistics.median(samples):.1f} ms, p95 {p95(samples):.1f} ms"


def p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20, method="inclusive")[-1]


def main() -> int:
    import django

    _postgres.ensure_database(os.environ.get("DATABASE_URL", ""))
    django.setup()
    from django.conf import settings

    # Creating a run broadcasts on the channel layer; nothing listens here and no Redis need run.
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.urls import reverse

    from webapp.experiments.services import environment_create, rubric_create, run_create
    from webapp.projects.services import project_create

    call_command("migrate", verbosity=0)
    stamp = f"{int(time.time())}-{os.getpid()}"
    user = get_user_model().objects.create_user(f"bench-{stamp}", password=None)
    project = project_create(name=f"Trajectory bench {stamp}", owner=user)
    try:
        environment = environment_create(
            project=project, name="arith", kind="arithmetic_calculator", config={}, user=user
        )
        rubric = rubric_create(
            project=project,
            name="r",
            user=user,
            spec={
                "aggregation": "weighted_sum",
                "criteria": [
                    {"name": "correct", "kind": "numeric_match", "weight": 1.0, "params": {}},
                    {"name": "format", "kind": "regex", "weight": 0.2, "params": {"pattern": "<answer>"}},
                ],
            },
        )
        run, _token = run_create(
            project=project,
            name="bench",
            environment=environment,
            rubric=rubric,
            preset="grpo",
            overrides={},
            user=user,
            dispatch=False,
        )
        rng = random.Random(7)
        components = [
            {"name": "correct", "kind": "numeric_match", "raw": 1.0, "weight": 1.0, "weighted": 1.0},
            {"name": "format", "kind": "regex", "raw": 1.0, "weight": 0.2, "weighted": 0.2},
        ]
        long = store(run, agent_turns(rng, 300), step=1, task_id="long-episode", components=components)
        base = agent_turns(rng, 100)
        step_a = store(
            run,
            base,
            step=0,
            split="eval",
            task_id="t",
            env_state={"display": "1", "stack": [1, 2]},
            components=components,
        )
        step_b = store(
            run,
            perturbed(rng, base),
            step=50,
            split="eval",
            task_id="t",
            env_state={"display": "2", "stack": [1, 2, 3]},
            components=components,
        )

        client = Client()
        client.force_login(user)
        page = reverse("rollouts:trajectory_detail", args=[project.slug, long.pk])
        diff = reverse("rollouts:diff", args=[project.slug]) + f"?a={step_a.pk}&b={step_b.pk}"
        chunks = [
            reverse("rollouts:trajectory_turns", args=[project.slug, long.pk]) + f"?start={start}"
            for start in range(30, 300, 60)
        ]

        load = os.getloadavg()[0]
        print(
            f"database: {connection.vendor}; {REPEATS} timed requests each after {WARMUP} warm-up requests; "
            f"{os.cpu_count()} CPUs, load average {load:.1f} at the start"
        )
        page_ms = timed(client, page, b'id="turn-29"')
        print(
            f"300-turn trajectory page ({len(client.get(page).content) // 1024} KiB, first 30 turns inline): "
            f"wall {summary(page_ms.wall)}; CPU {summary(page_ms.cpu)}"
        )
        windows = [timed(client, url, b"turn-") for url in chunks]
        chunk_wall = [sum(ms) for ms in zip(*(w.wall for w in windows), strict=True)]
        chunk_cpu = [sum(ms) for ms in zip(*(w.cpu for w in windows), strict=True)]
        print(
            f"  the other 270 turns in {len(chunks)} windows, all together: wall {summary(chunk_wall)}; "
            f"CPU {summary(chunk_cpu)}"
        )
        diff_ms = timed(client, diff, b"data-changed-rows")
        print(
            f"diff of two 100-turn trajectories ({len(client.get(diff).content) // 1024} KiB): "
            f"wall {summary(diff_ms.wall)}; CPU {summary(diff_ms.cpu)}"
        )
        # On a busy machine the wall clock also counts time spent waiting for a core; the CPU time is
        # what the server itself spends, so both are reported and both are held to the goals.
        page_p95, diff_p95 = p95(page_ms.wall), p95(diff_ms.wall)
        page_cpu, diff_cpu = p95(page_ms.cpu), p95(diff_ms.cpu)
        met = page_p95 <= GOAL_TRAJECTORY_MS and diff_p95 <= GOAL_DIFF_MS
        cpu_met = page_cpu <= GOAL_TRAJECTORY_MS and diff_cpu <= GOAL_DIFF_MS
        print(
            f"p95 trajectory page (300 turns) {page_p95:.1f} ms wall / {page_cpu:.1f} ms CPU vs goal ≤ "
            f"{GOAL_TRAJECTORY_MS:.0f} ms; diff (2 × 100 turns) {diff_p95:.1f} ms wall / {diff_cpu:.1f} ms CPU vs goal ≤ "
            f"{GOAL_DIFF_MS:.0f} ms: {'met' if met else 'CPU met, wall NOT met (busy machine?)' if cpu_met else 'NOT MET'}"
        )
        return 0 if met or SMOKE else 1  # a smoke run's figures judge nothing
    finally:
        project.runs.all().delete()  # runs protect their pinned environment and rubric versions
        project.delete()
        user.delete()
        if TEMP_VAR:
            shutil.rmtree(TEMP_VAR, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
